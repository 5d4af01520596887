# 007_transactional.pl: transactional produce (the default produce_mode) is
# readable if and only if its transaction committed, across kill -9 of the
# postmaster under load.
#
# Every transaction produces records that carry its id and inserts that id
# into the table oracle, so Postgres itself says which transactions
# committed.  Four psql clients run transactions on topic ot (4 ranges,
# 16 kB segments, so heads roll under load); about 30% of them do not
# commit: most end in ROLLBACK, some in a COMMIT that fails after its
# batches were appended (failure point fail-after-flush); a quarter produce
# 2-5 records with produce_batch.  A client echoes "ack <id>" after a COMMIT
# returned, "rb <id>" after a transaction ended without committing.  Each
# cycle kills the postmaster at a seeded number of acks, waits until every
# server process is gone and starts the node again.  Then every range of
# topic ot is read in full and checked against the oracle:
#
#   - the ids in the log are exactly the ids in table oracle;
#   - every acknowledged id is in both, no id that did not commit in
#     either, and no id of a transaction never sent;
#   - each id's records are all there (all or nothing) and each once, with
#     the key and value it was produced with;
#   - per key, a client's records come in the order it committed them;
#   - a transaction produced and committed after the restart reads back.
#
# Then deterministic cases, crashed all at once:
#   D1  produced (buffered in the backend), never committed: absent;
#   D2  committed just before the kill: present;
#   D3  COMMIT held at the pause point after-flush (batches appended and
#       synced at pre-commit, no commit record): absent;
#   D4  committed while D3 is in doubt, in the same range (unreadable until
#       D3 is settled): present;
#   D5  like D3, in a transaction that only produces, so that no WAL record
#       carries its xid and it is the newest xid at the kill: absent.
#
# MALACHI_CRASH_SEED replays another random schedule; the seed is printed.
use strict;
use warnings;

use Digest::MD5 qw(md5 md5_hex);
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

seed_random(7007);

my $CYCLES = 5;				# load + kill -9 + restart cycles
my $CLIENTS = 4;			# concurrent load clients
my $MAX_TX = 3000;			# transactions per client and cycle, at most
my $LOAD_SECONDS = 20;		# a cycle's load must reach its kill point by then
my $GONE_SECONDS = 30;		# the killed server's processes must be gone by then
my $AFTER_FLUSH_KEY = 77000007;	# advisory lock of pause point after-flush

my $started = time;
my $node = PostgreSQL::Test::Cluster->new('txn');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'malachi'
malachi.fsync = on
});
$node->start;
is($node->safe_psql('postgres', 'SHOW malachi.produce_mode'),
	'transactional', 'produce_mode is transactional by default');
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION malachi;
SELECT malachi.create_topic('ot', 4);
SELECT malachi.alter_topic('ot', '{"segment_max_bytes": 16384}');
CREATE TABLE oracle (id bigint PRIMARY KEY, client int, seq int);
});

my $tmp = PostgreSQL::Test::Utils::tempdir();

#---- transactions ----

# Client 0 is this script; 1 .. $CLIENTS the load.  A record's value is
# "i<id>.c<client>.s<seq>.r<index>.n<records>:" padded with md5 hex to 100 to
# 399 bytes; its key follows from the id and index.
my @KEYS = map { sprintf('key-%02d', $_) } 0 .. 19;

my %tx;			# id => { client, seq, n, commit }: every transaction planned
my %acked;		# id => 1: its COMMIT returned
my %rolled;		# id => 1: it ended without committing (ROLLBACK, failed COMMIT)
my %sent;		# id => 1: its COMMIT may have been sent (acked or in flight)
my $next_id = 1;
my %next_seq;	# client => its next seq: a client commits in seq order

sub rec_key
{
	my ($id, $r) = @_;
	return $tx{$id}{keys}[$r] if $tx{$id} && $tx{$id}{keys};
	return $KEYS[ unpack('N', md5("key/$id/$r")) % @KEYS ];
}

sub rec_value
{
	my ($id, $r) = @_;
	my $t = $tx{$id};
	my $v = "i$id.c$t->{client}.s$t->{seq}.r$r.n$t->{n}:";
	my $len = 100 + unpack('N', md5("len/$id/$r")) % 300;
	$v .= md5_hex("$id/$r/" . length($v)) while length($v) < $len;
	return substr($v, 0, $len);
}

# Plan a transaction of a client; returns its id.
sub new_tx
{
	my ($client, $n, $commit) = @_;
	my $id = $next_id++;
	$tx{$id} = {
		client => $client,
		seq => $next_seq{$client}++,
		n => $n,
		commit => $commit
	};
	return $id;
}

# The statements of a transaction between BEGIN and its end.
sub tx_body
{
	my ($id, $insert_first) = @_;
	my $t = $tx{$id};
	my $produce =
	  $t->{n} == 1
	  ? sprintf("SELECT malachi.produce('ot', '%s', '%s'::text);\n",
		rec_key($id, 0), rec_value($id, 0))
	  : sprintf("SELECT malachi.produce_batch('ot', ARRAY[%s], ARRAY[%s]);\n",
		join(',', map { "'" . rec_key($id, $_) . "'" } 0 .. $t->{n} - 1),
		join(',', map { "'" . rec_value($id, $_) . "'" } 0 .. $t->{n} - 1));
	my $insert = "INSERT INTO oracle VALUES ($id, $t->{client}, $t->{seq});\n";
	return $insert_first ? $insert . $produce : $produce . $insert;
}

# Commit transactions of client 0 from this script, one by one.
sub commit_now
{
	my ($label, @ns) = @_;
	my @ids = map { new_tx(0, $_, 1) } @ns;
	my ($rc, $out, $err) = $node->psql('postgres',
		join('', map { "BEGIN;\n" . tx_body($_, 0) . "COMMIT;\n" } @ids),
		on_error_stop => 1);
	is($rc, 0, "$label: transactions produce and commit") or diag($err);
	$acked{$_} = $sent{$_} = 1 for $rc == 0 ? @ids : ();
	return @ids;
}

#---- load clients ----

# A load client's script and the ids it runs, in order.  A transaction
# that does not commit ends in ROLLBACK (its records never leave the
# backend) or, one in four, in a COMMIT that fails after its batches were
# appended at pre-commit (the failure point fail-after-flush): they are on
# disk, void.
sub load_script
{
	my ($cycle, $client) = @_;
	my (@ids, $sql);
	$sql = "\\o /dev/null\n";
	for (1 .. $MAX_TX)
	{
		my $commit = rand() >= 0.3;
		my $n = rand() < 0.25 ? 2 + int(rand(4)) : 1;
		my $id = new_tx($client, $n, $commit);
		push @ids, $id;
		$sql .= "BEGIN;\n" . tx_body($id, rand() < 0.5);
		$sql .=
		    $commit ? "COMMIT;\n\\echo ack $id\n"
		  : rand() < 0.75 ? "ROLLBACK;\n\\echo rb $id\n"
		  : "SET LOCAL malachi.inject_wait = 'fail-after-flush';\n"
		  . "\\set ON_ERROR_STOP 0\nCOMMIT;\n\\set ON_ERROR_STOP 1\n\\echo rb $id\n";
	}
	return (write_file("$tmp/k$cycle-c$client.sql", "$sql\\echo done\n"), \@ids);
}

#---- checks ----

# Read all of topic ot and check it against the oracle and the clients.
sub verify
{
	my ($label) = @_;
	my %oracle;		# id => "client|seq"
	for (split /\n/, $node->safe_psql('postgres', 'SELECT id, client, seq FROM oracle'))
	{
		my ($id, $client, $seq) = split /\|/;
		$oracle{$id} = "$client|$seq";
	}

	# every range, sealed ones too; one range per line, so that an error
	# names its range and the others are still read
	my @ranges = split /\n/,
	  $node->safe_psql('postgres',
		q{SELECT range_id FROM malachi.ranges WHERE topic = 'ot' ORDER BY 1});
	my ($rc, $out, $err) = $node->psql(
		'postgres',
		join('',
			map {
				qq{SELECT $_, x."offset", x.key, convert_from(x.value, 'UTF8') FROM malachi.read($_, 0, 10000000) x;\n}
			} @ranges),
		on_error_stop => 0);
	my @unreadable = map { "range $ranges[$1 - 1]: $2" }
	  $err =~ /^psql:<stdin>:(\d+): ERROR:\s+(.*)$/mg;
	is(first_lines(@unreadable), '', "$label: every range of topic ot reads in full");

	my (@bad, @disorder, @dup, @order, %seen, %log, %last, %key_range);
	my %prev_offset;
	for my $row (split /\n/, $out)
	{
		my ($rid, $off, $key, $value) = split /\|/, $row, 4;
		$value //= '';
		push @disorder, "range $rid: offset $off after $prev_offset{$rid}"
		  if defined $prev_offset{$rid} && $off <= $prev_offset{$rid};
		$prev_offset{$rid} = $off;

		my ($id, $r) = $value =~ /^i(\d+)\.c\d+\.s\d+\.r(\d+)\.n\d+:/;
		if (   !defined $id
			|| !$tx{$id}
			|| $r >= $tx{$id}{n}
			|| $value ne rec_value($id, $r)
			|| $key ne rec_key($id, $r))
		{
			push @bad, "range $rid offset $off: key '$key', value '"
			  . substr($value, 0, 60) . "'";
			next;
		}
		push @dup, "id $id record $r at range $rid offset $off and $seen{\"$id/$r\"}"
		  if $seen{"$id/$r"};
		$seen{"$id/$r"} = "range $rid offset $off";
		$log{$id}++;

		# per key, a client's records in commit (= seq) order
		my $t = $tx{$id};
		my $pos = sprintf('%07d.%02d', $t->{seq}, $r);
		my $k = "$key/$t->{client}";
		push @order, "key $key: id $id (client $t->{client} seq $t->{seq} record $r) "
		  . "at range $rid offset $off after seq.record $last{$k}"
		  if defined $last{$k} && $last{$k} ge $pos;
		$last{$k} = $pos;
		$key_range{$key}{$rid} = 1;
	}

	my (@log_only, @oracle_only, @lost, @rb, @phantom, @partial, @mislabelled);
	for my $id (sort { $a <=> $b } keys %log)
	{
		push @log_only, "id $id ($log{$id} records)" unless exists $oracle{$id};
		push @partial, "id $id: $log{$id} of $tx{$id}{n} records"
		  if $log{$id} != $tx{$id}{n};
	}
	for my $id (sort { $a <=> $b } keys %oracle)
	{
		push @oracle_only, "id $id" unless $log{$id};
		push @mislabelled, "id $id: oracle row $oracle{$id}"
		  if $tx{$id} && $oracle{$id} ne "$tx{$id}{client}|$tx{$id}{seq}";
	}
	for my $id (sort { $a <=> $b } keys %acked)
	{
		push @lost, "id $id: " . ($log{$id} // 0) . ' records in the log, '
		  . (exists $oracle{$id} ? '' : 'not ') . 'in oracle'
		  unless $log{$id} && exists $oracle{$id};
	}
	for my $id (sort { $a <=> $b } grep { !$tx{$_}{commit} } keys %tx)
	{
		push @rb, "id $id ("
		  . ($rolled{$id} ? 'rolled back' : 'never committed') . '): '
		  . ($log{$id} // 0) . ' records in the log, '
		  . (exists $oracle{$id} ? '' : 'not ') . 'in oracle'
		  if $log{$id} || exists $oracle{$id};
	}
	for my $id (sort { $a <=> $b } keys %{ { %log, %oracle } })
	{
		push @phantom, "id $id" if $tx{$id} && $tx{$id}{commit} && !$sent{$id};
	}
	my @split_keys = grep { keys %{ $key_range{$_} } > 1 } sort keys %key_range;

	is(first_lines(@bad), '',
		"$label: every record is one a transaction produced, key and value exact");
	is(first_lines(@disorder), '', "$label: each range reads in increasing offsets");
	is(first_lines(@log_only), '', "$label: every id in the log is in oracle");
	is(first_lines(@oracle_only), '', "$label: every id in oracle is in the log");
	is(first_lines(@lost), '', "$label: every acknowledged id is in the log and in oracle");
	is(first_lines(@rb), '',
		"$label: no rolled-back (or never committed) id is in the log or in oracle");
	is(first_lines(@phantom), '', "$label: no id of a transaction never sent");
	is(first_lines(@partial), '',
		"$label: each id has all its records (all or nothing)");
	is(first_lines(@dup), '', "$label: no record appears twice");
	is(first_lines(@order), '',
		"$label: per key, a client's records are in commit order");
	is(first_lines(@mislabelled), '', "$label: oracle rows match their transactions");
	is("@split_keys", '', "$label: each key's records are in one range");
	note sprintf(
		'%s: %d ranges, %d records of %d ids; oracle %d ids; %d acknowledged, %d rolled back',
		$label, scalar(@ranges), scalar(keys %seen), scalar(keys %log),
		scalar(keys %oracle), scalar(keys %acked), scalar(keys %rolled));
	return (\%log, \%oracle);
}

# After a restart: committing goes on, and reads back.
sub commit_continues
{
	my ($label) = @_;
	my @ids = commit_now($label, 1, 3);
	my $list = join(',', map { "'i$_.%'" } @ids);
	my $got = $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM malachi.ranges r, malachi.read(r.range_id, 0, 10000000) x
 WHERE r.topic = 'ot' AND convert_from(x.value, 'UTF8') LIKE ANY (ARRAY[$list])});
	is($got, 4, "$label: the committed records (ids @ids) read back");
	return;
}

#---- load, kill -9, restart ----

my $log_pos = 0;
for my $cycle (1 .. $CYCLES)
{
	# scripts first, so that the clients start together
	my @scripts = map { [ $_, load_script($cycle, $_) ] } 1 .. $CLIENTS;
	my @clients = map {
		start_client($node, $_->[1],
			name => "cycle $cycle client $_->[0]",
			ids => $_->[2])
	} @scripts;

	# the kill point: a seeded number of acknowledged commits
	my $target = 50 + int(rand(500));
	my ($acks) = wait_for_acks($target, $LOAD_SECONDS, qr/^ack /, @clients);
	ok($acks >= $target,
		"cycle $cycle: the load reached its kill point within ${LOAD_SECONDS}s");
	check_client($_, "$_->{name}: ran without error until the kill")
	  for @clients;
	note "cycle $cycle: kill point $target acks, $acks seen";
	$log_pos = -s $node->logfile;
	kill9_node($node, label => "cycle $cycle", seconds => $GONE_SECONDS);
	$node->start;
	$_->{h}->finish for @clients;

	# what each client was told; the transaction after its last echo may
	# have been in flight
	for my $c (@clients)
	{
		my @lines = grep { /^(ack|rb) \d+$/ } file_lines($c->{out});
		for (@lines)
		{
			my ($what, $id) = split / /;
			$what eq 'ack' ? ($acked{$id} = $sent{$id} = 1) : ($rolled{$id} = 1);
		}
		my $inflight = $c->{ids}[ scalar @lines ];
		$sent{$inflight} = 1 if defined $inflight;
		note sprintf('%s: %d transactions ended, then id %s in flight (%s)',
			$c->{name}, scalar @lines, $inflight // 'none',
			defined $inflight && $tx{$inflight}{commit} ? 'to commit' : 'to roll back');
	}
	verify("after crash $cycle");
	my $recovery = slurp_file($node->logfile, $log_pos);
	note sprintf(
		'after crash %d: %d segments had batches voided at recovery; %d batches of a transaction "never assigned" kept',
		$cycle,
		scalar(() = $recovery =~ /marked \d+ batch\(es\) of segment \d+ void/g),
		scalar(() = $recovery =~ /holds a batch of transaction \d+, which this server never assigned/g));
	commit_continues("after crash $cycle");
	note sprintf('cycle %d done at %.1fs', $cycle, time - $started);
}

#---- deterministic: in flight at the kill ----

# a fresh head for each range, so that no producer below rolls (a roll
# waits for batches in doubt)
$node->safe_psql('postgres',
	q{SELECT malachi.roll(range_id) FROM malachi.ranges WHERE topic = 'ot' AND state = 'active'});

# Wait until $n sessions wait at the pause point after-flush.
sub held_after_flush
{
	my ($n) = @_;
	return $node->poll_query_until(
		'postgres', qq{
SELECT count(*) = $n FROM pg_locks
 WHERE locktype = 'advisory' AND objid = $AFTER_FLUSH_KEY AND NOT granted});
}

# D1: produced, buffered, never committed
my $d1 = new_tx(0, 1, 0);
my $s1 = $node->background_psql('postgres');
$s1->query_safe("BEGIN;\n" . tx_body($d1, 0));

# D2: committed just before the kill
my ($d2) = commit_now('D2', 2);

# D5's session commits once on D3's first two keys, so that its heads are
# cached: D5 then asks the writer worker nothing (whose transactions would
# take newer xids)
my $d3 = new_tx(0, 3, 0);
my $warm = new_tx(0, 2, 1);
$tx{$warm}{keys} = [ rec_key($d3, 0), rec_key($d3, 1) ];
my $s5 = $node->background_psql('postgres', on_error_stop => 0);
$s5->query_safe("BEGIN;\n" . tx_body($warm, 1) . "COMMIT;\n");
$acked{$warm} = $sent{$warm} = 1;

# D3: COMMIT held after its batches were appended and synced at pre-commit,
# before the commit record
my $holder = $node->background_psql('postgres');
$holder->query_safe("SELECT pg_advisory_lock($AFTER_FLUSH_KEY)");
my $s3 = $node->background_psql('postgres', on_error_stop => 0);
$s3->query_safe(q{SET malachi.inject_wait = 'after-flush'});
$s3->query_safe("BEGIN;\n" . tx_body($d3, 0));
$s3->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
ok(held_after_flush(1), 'D3: its COMMIT waits after the flush');

# D4: committed while D3 is in doubt, on the key of D3's first record
my $d4 = new_tx(0, 1, 1);
$tx{$d4}{keys} = [ rec_key($d3, 0) ];
my ($rc4, undef, $err4) =
  $node->psql('postgres', "BEGIN;\n" . tx_body($d4, 0) . "COMMIT;\n");
is($rc4, 0, 'D4: commits while D3 is in doubt') or diag($err4);
$acked{$d4} = $sent{$d4} = 1 if $rc4 == 0;
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*) FROM malachi.read(malachi.route('ot', '$tx{$d4}{keys}[0]'), 0, 10000000) x
 WHERE convert_from(x.value, 'UTF8') LIKE 'i$d4.%'}),
	0,
	'D4: not readable yet (it follows a batch in doubt)');

# D5: like D3, in a transaction that only produces: its xid is on no WAL
# record, and the newest at the kill
my $d5 = new_tx(0, 2, 0);
$tx{$d5}{keys} = $tx{$warm}{keys};
$s5->query_safe(q{SET malachi.inject_wait = 'after-flush'});
$s5->query_safe(
	sprintf("BEGIN;\nSELECT malachi.produce_batch('ot', ARRAY['%s', '%s'], ARRAY['%s', '%s']);\n",
		rec_key($d5, 0), rec_key($d5, 1), rec_value($d5, 0), rec_value($d5, 1)));
my $d5_xid = $s5->query_safe('SELECT pg_current_xact_id()');
$s5->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
ok(held_after_flush(2), 'D5: its COMMIT waits after the flush');

$log_pos = -s $node->logfile;
kill9_node($node, label => 'in flight', seconds => $GONE_SECONDS);
$node->start;
$_->{run}->kill_kill for $s1, $holder, $s3, $s5;
note sprintf('D5 had xid %s; after recovery the next xid is %s',
	$d5_xid, $node->safe_psql('postgres', 'SELECT pg_snapshot_xmax(pg_current_snapshot())'));

my ($log, $oracle) = verify('after the in-flight crash');
my %fate = (
	D1 => $d1,
	D2 => $d2,
	D3 => $d3,
	D4 => $d4,
	D5 => $d5);
is( join(' ',
		map { "$_:" . ($log->{ $fate{$_} } // 0) . (exists $oracle->{ $fate{$_} } ? '+oracle' : '') }
		  sort keys %fate),
	'D1:0 D2:2+oracle D3:0 D4:1+oracle D5:0',
	'records read back (+oracle: committed) of D1 (never committed), D2 (committed), '
	  . 'D3 (in doubt), D4 (committed after D3), D5 (in doubt, produce only)');
my $recovery = slurp_file($node->logfile, $log_pos);
note 'recovery: ' . join('; ',
	$recovery =~ /malachi: (marked \d+ batch\(es\) of segment \d+ void)/g,
	$recovery =~ /WARNING:  (segment \d+ holds a batch [^\n]*)/g);
commit_continues('after the in-flight crash');

#---- everything again after a clean restart ----

$node->restart;
verify('after a clean restart');
note sprintf('total %.1fs', time - $started);

$node->stop;
done_testing();
