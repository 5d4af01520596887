# 009_groups.pl: a consumer group across splits and merges, drained by
# concurrent consumers, and the latency of a long poll.
#
# Topic t: keyed records, 50 keys, each record's value "<key>:<seq>" with
# seq 1, 2, 3 ... per key in produce order.  The group g consumes in the
# exactly-once pattern (INSERT INTO delivered SELECT ... FROM
# malachi.consume(...) in one transaction), delivered.id (bigserial) giving
# the order of delivery:
#
#   1. 200 records into the root; three consumes of 40, each committed;
#   2. split the root, 150 more; two consumers at once, each 20 records in
#      a transaction: the second skips the half the first holds and takes
#      the other; split the left half, merge its two halves again, 150 more;
#   3. three consumers of g, each its own psql running transactions of
#      consume(.., 25, '50ms') until the topic is drained, while a producer
#      client commits the last 150 records in 50 transactions and this
#      script splits the root's right half (166 or so of its records not
#      delivered yet), splits that one's left half and merges its two
#      halves again, each while every consumer is held inside a transaction
#      with its claims (an advisory lock, the "gate", after its consume);
#   4. every record of the topic (read range by range, sealed ones too) was
#      delivered exactly once, with the range, offset, key and value it has,
#      and per key the seqs were delivered in order: 1, 2, 3 ... each once.
#
# Then: split_range does not wait for a consumer's open transaction, also
# not for one that created the group's position row on that range (its
# foreign key holds the range's row FOR KEY SHARE; splits lock it FOR NO
# KEY UPDATE).
#
# Long poll (topic lp, caught up), three times: a consume with wait '5s'
# sleeps (seen in pg_stat_activity), another session produces one record
# (transactional twice, immediate once); the consume must return it within
# a second of the COMMIT.  The latency, server clock, is printed.  A long
# poll of 300ms with nothing arriving returns empty after its wait.  A
# caught-up long poll of 1 hour ends, empty, when drop_topic waits for it,
# and the drop completes (before: it waited for the whole hour).  So does
# one of a new group on an empty topic when commit_offset or reset_group
# waits for the gate it created its position row under.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use MalachiTest;

seed_random(9009);

my $NKEYS = 50;
my $DRAIN_SECONDS = 60;		# the concurrent drain must end by then
my $ITERATIONS = 600;		# transactions per drain client, at most

my $started = time;
my $node = PostgreSQL::Test::Cluster->new('groups');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'malachi'
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION malachi;
CREATE TABLE delivered (
	id bigserial PRIMARY KEY,		-- order of delivery
	consumer int NOT NULL,
	range_id bigint NOT NULL,
	"offset" bigint NOT NULL,
	key text NOT NULL,
	k text NOT NULL,				-- the key, from the value
	seq int NOT NULL);				-- the seq, from the value
CREATE TABLE expected (total int);	-- set once the last record is produced
INSERT INTO expected VALUES (NULL);
});
my $tmp = PostgreSQL::Test::Utils::tempdir();

#---- producing ----

my @KEYS = map { sprintf('key-%02d', $_) } 0 .. $NKEYS - 1;
my %next_seq = map { $_ => 1 } @KEYS;
my $produced = 0;

# produce_sql(N): a transaction producing N records (produce_batch), keys
# chosen at random, seqs following on per key.
sub produce_sql
{
	my ($n) = @_;
	my (@k, @v);
	for (1 .. $n)
	{
		my $key = $KEYS[ int(rand(@KEYS)) ];
		push @k, $key;
		push @v, "$key:" . $next_seq{$key}++;
	}
	$produced += $n;
	return sprintf(
		"BEGIN;\nSELECT malachi.produce_batch('t', ARRAY[%s]::text[], ARRAY[%s]::text[]);\nCOMMIT;\n",
		join(',', map { "'$_'" } @k), join(',', map { "'$_'" } @v));
}

# produce(N): that transaction, now
sub produce
{
	my ($n) = @_;
	my $got = $node->safe_psql('postgres', produce_sql($n));
	is($got, $n, "produce_batch accepts $n records");
	return;
}

# the exactly-once consume of consumer C: the records delivered go into
# table delivered in the consume's transaction; how many, is the result
sub consume_sql
{
	my ($c, $max, $wait) = @_;
	return qq{WITH d AS (
  INSERT INTO delivered (consumer, range_id, "offset", key, k, seq)
  SELECT $c, range_id, "offset", key, split_part(v, ':', 1), split_part(v, ':', 2)::int
    FROM (SELECT range_id, "offset", key, convert_from(value, 'UTF8') AS v
            FROM malachi.consume('t', 'g', $max, '$wait')) x
  RETURNING 1)
SELECT count(*) FROM d};
}

sub delivered_count
{
	return $node->safe_psql('postgres', 'SELECT count(*) FROM delivered');
}

sub active_ranges
{
	return $node->safe_psql('postgres',
		q{SELECT string_agg(x::text, ' ' ORDER BY x) FROM malachi.active_range_ids('t') x});
}

#---- 1. the root, consumed in part ----

my $root = $node->safe_psql('postgres', q{SELECT malachi.create_topic('t')});
produce(50) for 1 .. 4;
for my $i (1 .. 3)
{
	is($node->safe_psql('postgres', "BEGIN;\n" . consume_sql(0, 40, '0') . ";\nCOMMIT;"),
		'40', "consume $i of 40 on the root delivers 40 records");
}
is( $node->safe_psql('postgres',
		q{SELECT count(*), count(DISTINCT "offset"), min("offset"), max("offset"),
				 bool_and(range_id = } . $root . q{) FROM delivered}),
	'120|120|0|119|t',
	'the root\'s first 120 records, each once');
is( $node->safe_psql('postgres',
		q{SELECT range_id, "offset" FROM malachi.committed_offsets('g', 't')}),
	"$root|120", 'the group stands at offset 120 of the root');

#---- 2. split, produce, consume, split, merge, produce ----

my ($l, $r) = split /\|/,
  $node->safe_psql('postgres', "SELECT * FROM malachi.split_range($root)");
produce(50) for 1 .. 3;

# two consumers at once: the first claims the left half (the first active
# range), the second skips it and claims the right half; each gets the
# root's remaining records of its slice first
my $ca = $node->background_psql('postgres');
my $cb = $node->background_psql('postgres');
$ca->query_safe('BEGIN');
is($ca->query_safe(consume_sql(10, 20, '0')), '20',
	'after the split, consumer A (in a transaction) gets 20 records');
$cb->query_safe('BEGIN');
is($cb->query_safe(consume_sql(11, 20, '0')), '20',
	'consumer B, while A holds its claim, gets 20 records');
$ca->query_safe('COMMIT');
$cb->query_safe('COMMIT');
$ca->quit;
$cb->quit;
is( $node->safe_psql('postgres', qq{
SELECT consumer, count(*), count(*) FILTER (WHERE range_id = $root),
       string_agg(DISTINCT malachi.route('t', key)::text, ',')
  FROM delivered WHERE consumer IN (10, 11) GROUP BY 1 ORDER BY 1}),
	"10|20|20|$l\n11|20|20|$r",
	"A got the root's next 20 records of the left half's slice, B of the right half's");
is( $node->safe_psql('postgres',
		q{SELECT count(*), count(DISTINCT "offset") FROM delivered WHERE range_id = } . $root),
	'160|160', 'no record of the root delivered twice so far');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(range_id::text, ' ' ORDER BY range_id) FROM malachi.committed_offsets('g', 't')}),
	"$root $l $r", 'the group has positions on the root and both halves');
my ($ll, $lr) = split /\|/,
  $node->safe_psql('postgres', "SELECT * FROM malachi.split_range($l)");
my $m = $node->safe_psql('postgres', "SELECT malachi.merge_ranges($ll, $lr)");
produce(50) for 1 .. 3;
is(active_ranges(), join(' ', sort { $a <=> $b } $m, $r),
	"active ranges: the merge child $m and the root's right half $r");
note sprintf('root %d split into %d, %d; %d split into %d, %d; merged into %d',
	$root, $l, $r, $l, $ll, $lr, $m);

#---- 3. three concurrent consumers drain the topic ----

# A drain client runs transactions of consume until it saw three empty
# batches in a row and table delivered holds as many records as table
# expected says were produced (known once the last was).  It echoes
# "drained" then, and "done" at the end of its script.  After its consume,
# each transaction passes the gate: advisory lock $GATE, shared, which this
# script takes exclusively to hold every consumer inside a transaction,
# with its claims, while it splits or merges a range.
my $GATE = 9009;
sub drain_script
{
	my ($c) = @_;
	my $iter = qq{\\if :drained
\\else
BEGIN;
} . consume_sql($c, 25, '50ms') . qq{ \\gset n_
SELECT pg_advisory_lock_shared($GATE), pg_advisory_unlock_shared($GATE) \\g /dev/null
COMMIT;
SELECT CASE WHEN :n_count = 0 THEN :empties + 1 ELSE 0 END AS empties \\gset
SELECT coalesce(:empties >= 3 AND (SELECT count(*) FROM delivered) >= (SELECT total FROM expected), false) AS drained \\gset
\\if :drained
\\echo drained
\\endif
\\endif
};
	return write_file("$tmp/drain$c.sql",
		"\\set empties 0\n\\set drained f\n" . ($iter x $ITERATIONS) . "\\echo done\n");
}

# The last records: 50 transactions of 3, paced by 10 ms, from a client of
# their own; it echoes "ack" after each COMMIT.
my $last_script = write_file("$tmp/producer.sql",
	join('', map { produce_sql(3) . "\\echo ack\nSELECT pg_sleep(0.01) \\g /dev/null\n" } 1 .. 50)
	  . "\\echo done\n");

# How many records of a range were not delivered (committed) yet.
sub undelivered
{
	my ($rid) = @_;
	return $node->safe_psql('postgres', qq{
SELECT (SELECT count(*) FROM malachi.read($rid, 0, 1000000))
     - (SELECT count(*) FROM delivered WHERE range_id = $rid)});
}

my $gate = $node->background_psql('postgres');
my $reshapes = 0;

# reshape(LABEL, SQL, PARENT...): with every consumer held at the gate in a
# transaction, with its claims, split or merge (SQL) in a client of its
# own; then open the gate.  Returns SQL's result.  SQL must not wait for a
# consumer's transaction (if it does, the gate opens so that the test can
# go on, and the check fails).
sub reshape
{
	my ($label, $sql, @parents) = @_;
	my $name = 'reshape' . ++$reshapes;
	ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = 3 FROM pg_locks
 WHERE locktype = 'advisory' AND objid = $GATE AND NOT granted}),
		"$label: the 3 consumers wait at the gate, inside their transactions");
	my $left = join(', ', map { "$_: " . undelivered($_) } @parents);
	my $c = start_client($node,
		write_file("$tmp/$name.sql",
			"SET application_name = '$name';\n\\pset tuples_only on\n\\pset format unaligned\n$sql;\n\\echo done\n"));
	my $waited = 0;
	my $deadline = time + 30;
	until (grep { $_ eq 'done' } file_lines($c->{out}))
	{
		last if !pid_running($c->{pid}) || time > $deadline;
		if (!$waited
			&& $node->safe_psql('postgres', qq{
SELECT count(*) FROM pg_stat_activity
 WHERE application_name = '$name' AND wait_event_type = 'Lock'}))
		{
			$waited = 1;
			$gate->query_safe("SELECT pg_advisory_unlock($GATE)");
		}
		usleep(5_000);
	}
	my @out = grep { $_ ne 'done' } file_lines($c->{out});
	ok((grep { $_ eq 'done' } file_lines($c->{out})), "$label: done within 30 s")
	  or diag(slurp_file($c->{err}));
	$c->{h}->finish;
	$gate->query_safe("SELECT pg_advisory_unlock($GATE)") unless $waited;
	ok(!$waited, "$label: did not wait for the consumers' transactions");
	note sprintf('%s -> %s, %s; records of the parents not delivered (committed) then: %s',
		$label, "@out",
		$waited
		? 'after waiting for a consumer\'s transaction (it created a position row on the range)'
		: 'while the consumers held their claims',
		$left);
	return $out[0] // '';
}

my $before_drain = delivered_count();
my $drain_start = time;
# the gate is shut before the consumers start: each holds its first batch
$gate->query_safe("SELECT pg_advisory_lock($GATE)");
my @clients = map { start_client($node, drain_script($_), name => "consumer $_") } 1 .. 3;
my $producer = start_client($node, $last_script, name => 'producer');

# split the root's right half at once, its left half later, and merge that
# one's halves again, while the producer goes on
my ($rl, $rr) = split /\|/, reshape("split $r", "SELECT * FROM malachi.split_range($r)", $r);
my ($acks) = wait_for_acks(20, $DRAIN_SECONDS, qr/^ack$/, $producer);
cmp_ok($acks, '>=', 20, 'the last producer commits 20 transactions');
$gate->query_safe("SELECT pg_advisory_lock($GATE)");
my ($rll, $rlr) = split /\|/,
  reshape("split $rl", "SELECT * FROM malachi.split_range($rl)", $rl);
($acks) = wait_for_acks(35, $DRAIN_SECONDS, qr/^ack$/, $producer);
cmp_ok($acks, '>=', 35, 'the last producer commits 35 transactions');
$gate->query_safe("SELECT pg_advisory_lock($GATE)");
my $rm = reshape("merge $rll, $rlr", "SELECT malachi.merge_ranges($rll, $rlr)", $rll, $rlr);
my ($pdone) = wait_for_acks(1, $DRAIN_SECONDS, qr/^done$/, $producer);
is($pdone, 1, 'the last producer commits all its 50 transactions');
check_client($producer, 'the last producer: ran without error');
$producer->{h}->finish;
$node->safe_psql('postgres', "UPDATE expected SET total = $produced");
note sprintf('drain: %d delivered when the last of %d records was produced',
	delivered_count(), $produced);
is(active_ranges(), join(' ', sort { $a <=> $b } $m, $rm, $rr),
	"active ranges: $m, $rm, $rr");

my ($drained, $running) = wait_for_acks(3, $DRAIN_SECONDS, qr/^drained$/, @clients);
is($drained, 3, "each of the 3 consumers finds the topic drained within ${DRAIN_SECONDS}s");
check_client($_, "$_->{name}: ran without error") for @clients;
for my $c (@clients)
{
	$c->{h}->kill_kill if pid_running($c->{pid});
	$c->{h}->finish;
}
note sprintf('drain took %.1fs; records delivered per consumer (0: before it): %s', time - $drain_start,
	$node->safe_psql('postgres',
		q{SELECT string_agg(format('%s: %s', consumer, n), ', ' ORDER BY consumer)
		    FROM (SELECT consumer, count(*) AS n FROM delivered GROUP BY 1) x}));

#---- 4. exactly once, per key in order ----

is(delivered_count(), $produced, "$produced records produced, as many delivered");
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (
  SELECT r.range_id, x."offset", x.key, convert_from(x.value, 'UTF8') AS v
    FROM malachi.ranges r, malachi.read(r.range_id, 0, 1000000) x
   WHERE r.topic = 't') a
  FULL JOIN delivered d ON (a.range_id, a."offset") = (d.range_id, d."offset")
 WHERE a.range_id IS NULL OR d.id IS NULL
    OR a.key <> d.key OR a.v <> d.k || ':' || d.seq}),
	'0',
	'the records delivered are exactly the records stored (range, offset, key, value)');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT range_id, "offset" FROM delivered
                       GROUP BY 1, 2 HAVING count(*) > 1) x}),
	'0', 'no record (range, offset) delivered twice');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT k, seq FROM delivered GROUP BY 1, 2 HAVING count(*) > 1) x}),
	'0', 'no (key, seq) delivered twice');

my (%last, @disorder, @mismatch);
for (split /\n/,
	$node->safe_psql('postgres',
		q{SELECT id, consumer, range_id, "offset", key, k, seq FROM delivered ORDER BY id}))
{
	my ($id, $c, $rid, $off, $key, $k, $seq) = split /\|/;
	push @mismatch, "id $id: key $key, value of key $k" if $key ne $k;
	push @disorder,
	  "key $k: seq $seq (id $id, consumer $c, range $rid offset $off) after seq $last{$k}"
	  if ($last{$k} // 0) + 1 != $seq;
	$last{$k} = $seq;
}
is(first_lines(@mismatch), '', 'each record\'s value names its key');
is(first_lines(@disorder), '',
	'per key, the seqs are delivered in order, 1, 2, 3 ... with no gap');
is( join(' ', map { $last{$_} // 0 } @KEYS),
	join(' ', map { $next_seq{$_} - 1 } @KEYS),
	'per key, the last seq delivered is the last produced');
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.consume('t', 'g', 1000)"),
	'0', 'the group is caught up: a further consume is empty');
is( $node->safe_psql('postgres', q{
SELECT coalesce(sum(l.lag), -1) FROM malachi.consumer_lag l
  JOIN malachi.ranges r USING (range_id)
 WHERE l."group" = 'g' AND l.topic = 't' AND r.state = 'active'}),
	'0', 'no lag on the active ranges');

#---- a split does not wait for a consumer ----

# A consumer's transaction that created the group's position row on a range
# holds the range's row FOR KEY SHARE (the row's foreign key) until it
# ends; split_range locks it FOR UPDATE and so waits for it (a long poll,
# or a consumer's work, can last long).  With the position row there
# before, it does not wait.
my $sp = $node->safe_psql('postgres', q{
SELECT malachi.create_topic('sp');
SELECT malachi.produce('sp', 'k', 'v'::text);
SELECT malachi.create_topic('sp2');
SELECT malachi.produce('sp2', 'k', 'v'::text);
SELECT count(*) FROM malachi.consume('sp2', 'g', 1);
SELECT malachi.produce('sp2', 'k', 'w'::text);
SELECT malachi.route('sp', 'k'), malachi.route('sp2', 'k');
});
my ($sp1, $sp2) = split /\|/, (split /\n/, $sp)[-1];
for my $case ([ $sp2, 'sp2', 'a position row committed before' ],
	[ $sp1, 'sp', 'the position row created in the consumer\'s transaction' ])
{
	my ($rid, $topic, $what) = @$case;
	my $held = $node->background_psql('postgres');
	$held->query_safe("BEGIN; SELECT count(*) FROM malachi.consume('$topic', 'g', 1)");
	my ($rc, $out, $err) = $node->psql('postgres',
		"SET lock_timeout = '2s'; SELECT count(*) FROM malachi.split_range($rid)");
	is("$rc $out", '0 1',
		"split_range($rid) does not wait for a consumer in a transaction, with $what");
	note "split_range($rid), $what: $err" if $rc;
	$held->query_safe('COMMIT');
	$held->quit;
}

#---- long poll ----

$node->safe_psql('postgres', q{
SELECT malachi.create_topic('lp');
SELECT malachi.produce('lp', 'k', 'first'::text);
SELECT count(*) FROM malachi.consume('lp', 'g', 10);
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('lp', 'g', 10)}),
	'0', 'topic lp: group g is caught up');

my $lp = $node->background_psql('postgres');
$lp->query_safe(q{SET application_name = 'lp_consumer'});

my @latencies;
for my $round ([ 1, 'transactional' ], [ 2, 'transactional' ], [ 3, 'immediate' ])
{
	my ($i, $mode) = @$round;
	my $label = "long poll $i ($mode produce)";
	my $t0 = time;
	$lp->query_until(qr/polling\n/, qq{\\echo polling
SELECT extract(epoch FROM clock_timestamp()), key, convert_from(value, 'UTF8')
  FROM malachi.consume('lp', 'g', 10, '5s');
\\echo returned
});
	ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE application_name = 'lp_consumer' AND state = 'active'
   AND wait_event_type = 'Extension'}),
		"$label: the consume sleeps");
	my $asleep = time - $t0;

	# the clock before and after the statement that makes the record
	# visible: COMMIT, or the produce itself in immediate mode
	my $clock = q{SELECT extract(epoch FROM clock_timestamp());};
	my $sql =
	  $mode eq 'immediate'
	  ? qq{SET malachi.produce_mode = 'immediate';
$clock
SELECT malachi.produce('lp', 'k$i', 'v$i'::text) \\g /dev/null
$clock}
	  : qq{BEGIN;
SELECT malachi.produce('lp', 'k$i', 'v$i'::text) \\g /dev/null
$clock
COMMIT;
$clock};
	my ($before, $after) = split /\n/, $node->safe_psql('postgres', $sql);

	my $out = $lp->query_until(qr/returned\n/, '');
	my @rows = grep { $_ ne '' && $_ ne 'returned' } split /\n/, $out;
	my ($ret, $key, $value) = split /\|/, $rows[0] // '';
	is(scalar(@rows) . " $key $value", "1 k$i v$i", "$label: returns the record produced");
	my $since_before = ($ret - $before) * 1000;
	my $since_after = ($ret - $after) * 1000;
	cmp_ok($since_before, '>', 0, "$label: not before the record was made visible");
	cmp_ok($since_after, '<', 1000,
		"$label: within 1000 ms of the producer's commit");
	push @latencies, sprintf('%.3f', $since_after);
	note sprintf(
		'%s: asleep after %.0f ms; returned %.3f ms after the producer\'s %s began, '
		  . '%+.3f ms relative to when it had returned',
		$label, $asleep * 1000, $since_before,
		$mode eq 'immediate' ? 'produce' : 'COMMIT', $since_after);
}
diag('long-poll latency (consume return minus the producer\'s clock_timestamp() '
	  . 'right after its COMMIT/produce returned), ms: ' . join(', ', @latencies));

# nothing arrives: the wait ends, empty
my $t0 = time;
my ($n, $elapsed) = split /\|/, $node->safe_psql('postgres', q{
SELECT count(*), round(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000, 3)
  FROM malachi.consume('lp', 'g', 10, '300ms')});
my $wall = (time - $t0) * 1000;
is($n, '0', 'a long poll of 300ms with nothing arriving returns empty');
cmp_ok($elapsed, '>=', 250, 'after at least 250 ms (server clock)');
cmp_ok($wall, '<', 3000, 'and within 3 s (psql round trip)');
note sprintf('empty long poll of 300ms: %.3f ms in the server, %.1f ms round trip',
	$elapsed, $wall);

# a caught-up long poll of a new group on an empty topic holds the gate it
# created its position row under; commit_offset and reset_group on that
# range wait for the gate (not for the transaction id), and the poll must
# end, empty, once it sees them waiting (before: they waited the hour)
my $lp_range = $node->safe_psql('postgres', q{SELECT malachi.create_topic('lp_gate')});
# (the third case: the row created by an earlier consume of the same
# transaction, so that the poll itself takes no gate)
for my $case (
	[ 'commit_offset', 'fresh1', '', qq{SELECT malachi.commit_offset('fresh1', 'lp_gate', '{"$lp_range": 0}')} ],
	[ 'reset_group', 'fresh2', '', q{SELECT malachi.reset_group('fresh2', 'lp_gate')} ],
	[ 'commit_offset after an earlier consume', 'fresh3', 'BEGIN', qq{SELECT malachi.commit_offset('fresh3', 'lp_gate', '{"$lp_range": 0}')} ])
{
	my ($what, $group, $begin, $sql) = @$case;
	my $before = $begin ? "BEGIN;\nSELECT count(*) FROM malachi.consume('lp_gate', '$group', 10);\n" : '';
	my $after = $begin ? "COMMIT;\n" : '';
	$lp->query_until(qr/polling\n/, qq{$before\\echo polling
SELECT count(*) AS polled FROM malachi.consume('lp_gate', '$group', 10, '1 hour');
\\echo returned
$after});
	ok(session_asleep($node, 'lp_consumer'),
		"$what: a caught-up long poll of 1 hour of a new group sleeps");
	$t0 = time;
	my ($ret, $out, $err) = $node->psql('postgres', "SET lock_timeout = '20s'; $sql");
	my $wall = time - $t0;
	is($ret, 0, "$what on the range the poll created its row on completes")
	  or diag($err);
	cmp_ok($wall, '<', 10, "$what: within 10 s (the poll looks every 100 ms)");
	note sprintf('%s waited %.3f s for the long poll', $what, $wall);
	is(($lp->query_until(qr/returned\n/, '') =~ s/returned\n//r) =~ s/\s+//gr, '0',
		"$what: the long poll returned empty");
}

# a long poll on a merged range whose parent another consumer holds: each
# attempt to derive its start runs in a subtransaction that takes
# transaction ids and is rolled back; the poll tries that range again once
# a second, not every turn (before: every 50 ms, 40 or more ids in 2 s)
my $mx = $node->safe_psql('postgres', q{SELECT malachi.create_topic('mx')});
my ($mxl, $mxr) = split /\|/, $node->safe_psql('postgres',
	"SELECT * FROM malachi.split_range($mx)");
$node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('mx', 'gx', 10)});
$node->safe_psql('postgres', "SELECT malachi.merge_ranges($mxl, $mxr)");
$gate->query_safe(qq{BEGIN; SELECT malachi.commit_offset('gx', 'mx', '{"$mxr": 0}')});
my $xmax = q{SELECT pg_snapshot_xmax(pg_current_snapshot())};
my $xid_before = $node->safe_psql('postgres', $xmax);
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM malachi.consume('mx', 'gx', 10, '2s')}), '0',
	'merged range, a parent held: the long poll gets nothing');
my $xids = $node->safe_psql('postgres', $xmax) - $xid_before;
cmp_ok($xids, '<', 12, 'and takes a few transaction ids, not one pair per turn');
note "transaction ids taken during the 2 s poll: $xids";
$gate->query_safe('COMMIT');

# a consume that meets the 64 ranges merging 128 made derives at most 32
# of them (each in a subtransaction that keeps its id until the
# transaction ends: past 64 every snapshot of the cluster overflows); the
# next transaction derives the rest (before: 64 subtransactions at once)
$node->safe_psql('postgres', q{SELECT malachi.create_topic('sx', 128)});
$node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('sx', 'gs', 1000)});
$node->safe_psql('postgres', q{
	DO $$
	DECLARE
		ids bigint[] := ARRAY(SELECT malachi.active_range_ids('sx'));
	BEGIN
		FOR i IN 1 .. array_length(ids, 1) BY 2 LOOP
			PERFORM malachi.merge_ranges(ids[i], ids[i + 1]);
		END LOOP;
	END $$});
my $merged_rows = q{
	SELECT count(*) FROM malachi.group_positions p
	  JOIN malachi.ranges r USING (range_id)
	 WHERE p.group_name = 'gs' AND r.state = 'active'};
$xid_before = $node->safe_psql('postgres', $xmax);
$node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('sx', 'gs', 1000)});
$xids = $node->safe_psql('postgres', $xmax) - $xid_before;
is($node->safe_psql('postgres', $merged_rows), '32',
	'64 merged ranges: one consume derives 32 of them');
cmp_ok($xids, '<', 45, 'with at most 32 subtransactions');
note "transaction ids taken by the consume of 64 merged ranges: $xids";
$node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('sx', 'gs', 1000)});
is($node->safe_psql('postgres', $merged_rows), '64', 'the next one the rest');

# a caught-up long poll does not hold up drop_topic of its topic: it holds
# the topic's row (FOR KEY SHARE) and its position row, so the drop waits
# for it, and it ends, empty, once it sees the drop waiting
$lp->query_until(qr/polling\n/, qq{\\echo polling
SELECT count(*) AS polled FROM malachi.consume('lp', 'g', 10, '1 hour');
\\echo returned
});
ok(session_asleep($node, 'lp_consumer'), 'a caught-up long poll of 1 hour sleeps');
$t0 = time;
my ($ret, $out, $err) = $node->psql('postgres', q{
SET lock_timeout = '20s';
SELECT malachi.drop_topic('lp');});
my $drop_wall = time - $t0;
is($ret, 0, 'drop_topic of its topic completes') or diag($err);
cmp_ok($drop_wall, '<', 10, 'within 10 s (the poll looks every 100 ms)');
note sprintf('drop_topic waited %.3f s for the long poll', $drop_wall);
is(($lp->query_until(qr/returned\n/, '') =~ s/returned\n//r) =~ s/\s+//gr, '0',
	'the long poll returned empty');

$lp->quit;
$gate->quit;
note sprintf('total %.1fs', time - $started);
$node->stop;
done_testing();
