# 004_crash.pl: acknowledged records survive kill -9 of the postmaster under
# concurrent load, and a torn tail is cut off at recovery.
#
# Each cycle starts four producer clients (psql scripts of produce and
# produce_batch calls with unique, self-describing values) and a control
# client (rolls, one split), waits until a seeded number of produce calls
# were acknowledged, kills the postmaster with SIGKILL (in even cycles its
# children too, at once), waits until every server process is gone and
# starts the node again.  Then every range of every topic is read in full
# and checked against what the clients were told: every acknowledged
# record is there byte for byte, nothing twice, offsets dense from 0, each
# batch all-or-nothing per range and contiguous, each client's records in
# the order it produced them, segments tiling offsets; and producing goes
# on at the right next offset.  The server log of the load must show no
# seal that disagreed with its fence and no torn tail cut from a live head.
#
# A client echoes "ack <batch>" after each statement (ON_ERROR_STOP), so an
# echoed line means the call returned: the batch was acknowledged.
#
# Last, a deterministic torn tail: garbage written after the data end of a
# head while the node is down must be truncated at recovery.
#
# MALACHI_CRASH_SEED replays another random schedule (kill points, batch
# shapes, splits); the seed is printed first.
use strict;
use warnings;

use Digest::MD5 qw(md5 md5_hex);
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

seed_random(4004);

my $CYCLES = 5;				# load + kill -9 + restart cycles
my $CLIENTS = 4;			# concurrent producer clients
my $MAX_BATCHES = 400;		# statements per client and cycle, at most
my $LOAD_SECONDS = 20;		# a cycle's load must reach its kill point by then
my $GONE_SECONDS = 30;		# the killed server's processes must be gone by then

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
# TEMP_CONFIG normally preloads malachi; say it again in case it does not.
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'malachi'
malachi.fsync = on
# this test checks immediate produce: acknowledged at the call, offsets
# dense (transactional produce, whose aborted batches burn their offsets,
# has its own oracle test in 007_transactional.pl)
malachi.produce_mode = immediate
# topic big's batches are block-aligned and written with O_DIRECT
malachi.direct_io = on
# the sweeper saves the heads' indexes every second, so that the restarts
# recover heads from their indexes' last points (022_head_index.pl)
malachi.sweep_interval = 1
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
$node->safe_psql(
	'postgres', q{
SELECT malachi.create_topic('four', 4);
SELECT malachi.alter_topic('four', '{"segment_max_bytes": 65536}');
SELECT malachi.create_topic('z', 2);
SELECT malachi.alter_topic('z', '{"compression": "zstd", "segment_max_bytes": 131072}');
SELECT malachi.create_topic('big', 1);
SELECT malachi.alter_topic('big', '{"segment_max_bytes": 1048576}');
});

my $tmp = PostgreSQL::Test::Utils::tempdir();

#---- records ----

# A record's id is c<client>.k<cycle>.b<batch>.r<index>; its key and value
# follow from the id alone, so any record read back can be checked.  Client
# 0 is this script producing after a restart, client 9 the torn-tail case.
my @KEYS = map { "key-$_" } 0 .. 49;

sub rec_key
{
	my ($id) = @_;
	return $KEYS[ unpack('N', md5("key/$id")) % @KEYS ];
}

# "<id>:" then a chain of md5 digests, 200 to 499 bytes in all
sub rec_value
{
	my ($id) = @_;
	my $len = 200 + unpack('N', md5("len/$id")) % 300;
	my $v = "$id:";
	$v .= md5_hex("$id/" . length($v)) while length($v) < $len;
	return substr($v, 0, $len);
}

my %batches;	# batch id => { topic, n }: every batch any client may send
my %acked;		# batch id => 1: its call returned
my %sent;		# batch id => 1: acknowledged, or in flight at a kill

# SQL producing one batch: produce for one record, else produce_batch with
# text or bytea values.
sub batch_sql
{
	my ($bid, $topic, $n, $type) = @_;
	my @ids = map { "$bid.r$_" } 0 .. $n - 1;
	$batches{$bid} = { topic => $topic, n => $n };
	return sprintf("SELECT malachi.produce('%s', '%s', '%s'::text);\n",
		$topic, rec_key($ids[0]), rec_value($ids[0]))
	  if $n == 1;
	return sprintf(
		"SELECT malachi.produce_batch('%s', ARRAY[%s], ARRAY[%s]::%s[]);\n",
		$topic,
		join(',', map { "'" . rec_key($_) . "'" } @ids),
		join(',', map { "'" . rec_value($_) . "'" } @ids), $type);
}

# Produce batches from this script (they are acknowledged when it returns).
sub produce_now
{
	my @specs = @_;		# [bid, topic, n]
	my $sql = join('', map { batch_sql(@$_, 'text') } @specs);
	$node->safe_psql('postgres', $sql);
	$acked{ $_->[0] } = $sent{ $_->[0] } = 1 for @specs;
	return;
}

#---- load clients ----

# A producer client's script: produce calls, each followed by its ack.
sub producer_script
{
	my ($cycle, $client) = @_;
	my $sql = "\\o /dev/null\n";
	for my $b (0 .. $MAX_BATCHES - 1)
	{
		my $bid = "c$client.k$cycle.b$b";
		# big: one range, no compression, batches of 70 to 170 kB, which
		# are block-aligned and written with direct I/O
		my $r = rand();
		my $topic = $r < 0.04 ? 'big' : $r < 0.6 ? 'four' : 'z';
		my $kind = rand();
		my $n =
		    $topic eq 'big' ? 200 + int(rand(300))
		  : $kind < 0.15 ? 1
		  : 2 + int(rand(29));
		$sql .= batch_sql($bid, $topic, $n, $kind < 0.4 ? 'bytea' : 'text');
		$sql .= "\\echo ack $bid\n";
	}
	return write_file("$tmp/k$cycle-c$client.sql", "$sql\\echo done\n");
}

# The control client's script: rolls of random heads and one split of
# topic four, paced so that they spread over the load.
sub control_script
{
	my ($cycle) = @_;
	my $split_at = int(rand(6));
	my $sql = "\\o /dev/null\n";
	for my $step (0 .. 29)
	{
		my $key = $KEYS[ int(rand(@KEYS)) ];
		my $r = rand();
		my $topic = $r < 0.15 ? 'big' : $r < 0.6 ? 'four' : 'z';
		$sql .=
		  $step == $split_at
		  ? "SELECT malachi.split_range(malachi.route('four', '$key'));\n\\echo ack split four $key\n"
		  : "SELECT malachi.roll(malachi.route('$topic', '$key'));\n\\echo ack roll $topic $key\n";
		$sql .= "SELECT pg_sleep(0.02);\n";
	}
	return write_file("$tmp/k$cycle-ctl.sql", "$sql\\echo done\n");
}

# The batches a client acknowledged so far.
sub client_acks
{
	my ($c) = @_;
	return map { /^ack (c\S+)$/ ? $1 : () } file_lines($c->{out});
}

#---- checks ----

# key => its hash, for every key the load uses
sub key_hashes
{
	return map { split /\|/ } split /\n/,
	  $node->safe_psql('postgres',
		'SELECT k, malachi.key_hash(k) FROM unnest(ARRAY['
		  . join(',', map { "'$_'" } @KEYS) . ']) k');
}

# Read every range of every topic in full and check it against the acks.
# Returns { range_id => records } for what it read.
sub verify
{
	my ($label) = @_;
	my (%range, %count);

	for (split /\n/,
		$node->safe_psql('postgres',
			'SELECT range_id, topic, key_lo, key_hi, state FROM malachi.ranges'))
	{
		my ($id, $topic, $lo, $hi, $state) = split /\|/;
		$range{$id} = { topic => $topic, lo => $lo, hi => $hi, state => $state };
		$count{$id} = 0;
	}
	my %hash = key_hashes();

	# one range per line: an error names its line, so its range, and the
	# other ranges are still read
	my @ids = sort { $a <=> $b } keys %range;
	my ($rc, $out, $err) = $node->psql(
		'postgres',
		join('',
			map {
				qq{SELECT $_, x."offset", x.key, encode(x.value, 'hex') FROM malachi.read($_, 0, 1000000) x ORDER BY 2;\n}
			} @ids),
		on_error_stop => 0);
	my %unreadable;
	$unreadable{ $ids[ $1 - 1 ] } = $2
	  while $err =~ /^psql:<stdin>:(\d+): ERROR:\s+(.*)$/mg;
	is(join("\n", map { "range $_: $unreadable{$_}" } sort keys %unreadable),
		'', "$label: every range of every topic reads in full");

	# of a range that fails at some offset, check what precedes it
	for my $rid (sort keys %unreadable)
	{
		next unless $unreadable{$rid} =~ /at offset (\d+)/ && $1 > 0;
		my (undef, $part) = $node->psql('postgres',
			qq{SELECT $rid, x."offset", x.key, encode(x.value, 'hex') FROM malachi.read($rid, 0, $1) x ORDER BY 2});
		$out .= "\n$part" if $part ne '';
	}

	my (@bad, @dup, @gap, @order, %seen, %runs, %last);
	for my $row (split /\n/, $out)
	{
		my ($rid, $off, $key, $hex) = split /\|/, $row, 4;
		my $value = pack('H*', $hex // '');
		my ($id) = $value =~ /^(c\d+\.k\d+\.b\d+\.r\d+):/;

		push @gap, "range $rid: offset $off where $count{$rid} was due"
		  if $off != $count{$rid};
		$count{$rid} = $off + 1;
		if (!defined $id
			|| !exists $batches{ $id =~ s/\.r\d+$//r }
			|| $value ne rec_value($id)
			|| $key ne rec_key($id))
		{
			push @bad, "range $rid offset $off: key '$key', value '"
			  . substr($value =~ s/[^ -~]/?/gr, 0, 60) . "'";
			next;
		}
		push @dup, "$id at range $rid offset $off and $seen{$id}"
		  if $seen{$id};
		$seen{$id} = "range $rid offset $off";

		my ($client, $cycle, $b, $r) = $id =~ /^c(\d+)\.k(\d+)\.b(\d+)\.r(\d+)$/;
		my $bid = "c$client.k$cycle.b$b";
		push @{ $runs{"$bid\@$rid"} }, [ $off, $r ];

		# a client's records come in the order it produced them
		my $pos = sprintf('%05d.%05d.%05d', $cycle, $b, $r);
		push @order, "range $rid offset $off: $id after $last{\"$rid/$client\"}"
		  if defined $last{"$rid/$client"} && $last{"$rid/$client"} ge $pos;
		$last{"$rid/$client"} = $pos;
	}

	# per batch and range: one contiguous run, in the batch's order, of
	# exactly the batch's records whose key the range owns
	my (@torn, @lost, @phantom, %found);
	for my $run (sort keys %runs)
	{
		my ($bid, $rid) = split /\@/, $run;
		my @recs = @{ $runs{$run} };
		my $batch = $batches{$bid};
		my $r = $range{$rid};
		my @want = grep {
			my $h = $hash{ rec_key("$bid.r$_") };
			$batch->{topic} eq $r->{topic} && $h >= $r->{lo} && $h < $r->{hi}
		} 0 .. $batch->{n} - 1;
		my @got = map { $_->[1] } @recs;
		my $contiguous = $recs[-1][0] - $recs[0][0] == $#recs;
		push @torn,
		  "batch $bid (topic $batch->{topic}) in range $rid ($r->{topic}): "
		  . "records [@got] at offsets $recs[0][0]..$recs[-1][0], expected [@want]"
		  if !$contiguous || "@got" ne "@want";
		$found{$bid} += @recs;
	}
	for my $bid (sort keys %acked)
	{
		my $n = $found{$bid} // 0;
		push @lost, "$bid: $n of $batches{$bid}{n} records" if $n < $batches{$bid}{n};
	}
	for my $bid (sort keys %found)
	{
		push @phantom, "$bid ($found{$bid} records)" unless $sent{$bid};
	}
	my $unacked = grep { !$acked{$_} } keys %found;

	is(scalar(@bad), 0,
		"$label: every record is one a client produced, key and value byte-exact")
	  or diag(first_lines(@bad));
	is(scalar(@lost), 0, "$label: every acknowledged batch reads back complete")
	  or diag(first_lines(@lost));
	is(scalar(@dup), 0, "$label: no record appears twice")
	  or diag(first_lines(@dup));
	is(scalar(@gap), 0, "$label: the offsets of every range are dense from 0")
	  or diag(first_lines(@gap));
	is(scalar(@torn), 0,
		"$label: each batch is in each range all or nothing, contiguous and in order")
	  or diag(first_lines(@torn));
	is(scalar(@order), 0,
		"$label: each client's records are in produce order within a range")
	  or diag(first_lines(@order));
	is(scalar(@phantom), 0, "$label: no record of a batch that was never sent")
	  or diag(first_lines(@phantom));
	note sprintf(
		'%s: %d records in %d ranges; %d batches acknowledged, %d unacknowledged present',
		$label, scalar(keys %seen), scalar(keys %range),
		scalar(keys %acked), $unacked);

	verify_segments($label, \%range, \%count, \%unreadable);
	delete $count{$_} for keys %unreadable;
	return \%count;
}

# Per range, segments tile offsets from 0 up to what was read, with at
# most one active segment, the last; a sealed range has no active one.
sub verify_segments
{
	my ($label, $range, $count, $unreadable) = @_;
	my (%segs, @bad);

	for (split /\n/,
		$node->safe_psql('postgres',
			'SELECT range_id, seq, base_offset, end_offset, state FROM malachi.segments ORDER BY range_id, seq'))
	{
		my ($rid, $seq, $base, $end, $state) = split /\|/;
		push @{ $segs{$rid} },
		  { seq => $seq, base => $base, end => $end, state => $state };
	}
	for my $rid (sort { $a <=> $b } keys %$range)
	{
		my @s = @{ $segs{$rid} // [] };
		my $next = 0;
		my $active = 0;
		for my $i (0 .. $#s)
		{
			my $s = $s[$i];
			my $what = "range $rid segment $s->{seq} [$s->{base}, "
			  . ($s->{end} eq '' ? 'null' : $s->{end}) . ") $s->{state}";
			push @bad, "$what: seq $i expected" if $s->{seq} != $i;
			push @bad, "$what: starts at $next expected" if $s->{base} != $next;
			push @bad, "$what: no end offset" if $s->{end} eq '';
			push @bad, "$what: active but not the last" if $s->{state} eq 'active' && $i != $#s;
			$active++ if $s->{state} eq 'active';
			$next = $s->{end} eq '' ? $s->{base} : $s->{end};
		}
		push @bad, "range $rid: segments end at $next, $count->{$rid} records read"
		  if $next != $count->{$rid} && !$unreadable->{$rid};
		push @bad, "range $rid: sealed, but has an active segment"
		  if $active && $range->{$rid}{state} eq 'sealed';
	}
	is(scalar(@bad), 0,
		"$label: segments tile each range's offsets, at most one active (the last)")
	  or diag(first_lines(@bad));
	return;
}

# Produce after a restart: the records land at each range's next offset and
# read back.
sub produce_continues
{
	my ($label, $count, @specs) = @_;
	my $active = $node->safe_psql('postgres',
		q{SELECT range_id, topic, key_lo, key_hi FROM malachi.ranges WHERE state = 'active'});
	my %hash = key_hashes();

	my ($rc, $out, $err) = $node->psql('postgres',
		join('', map { batch_sql(@$_, 'text') } @specs));
	is($rc, 0, "$label: producing works") or diag($err);
	return if $rc != 0;
	$acked{ $_->[0] } = $sent{ $_->[0] } = 1 for @specs;

	# where each record must land: its key's range, at the next offset
	my (%next, @want);
	for my $spec (@specs)
	{
		my ($bid, $topic, $n) = @$spec;
		for my $r (0 .. $n - 1)
		{
			my $h = $hash{ rec_key("$bid.r$r") };
			my ($rid) = map { (split /\|/)[0] } grep {
				my (undef, $t, $lo, $hi) = split /\|/;
				$t eq $topic && $h >= $lo && $h < $hi
			} split /\n/, $active;
			next unless defined $count->{$rid};	# unreadable: its end is unknown
			$next{$rid} //= $count->{$rid};
			push @want, "$rid|" . $next{$rid}++ . "|$bid.r$r";
		}
	}
	return unless %next;
	my $from = join(',', map { "($_, $count->{$_})" } sort keys %next);
	my (undef, $got, $rerr) = $node->psql(
		'postgres', qq{
SELECT v.id, x."offset", split_part(convert_from(x.value, 'UTF8'), ':', 1)
  FROM (VALUES $from) v(id, off), LATERAL malachi.read(v.id, v.off, 1000) x
 ORDER BY 1, 2});
	diag($rerr) if $rerr ne '';
	is($got, join("\n", sort { my @a = split /\|/, $a; my @b = split /\|/, $b;
				$a[0] <=> $b[0] || $a[1] <=> $b[1] } @want),
		"$label: the new records read back at each range's next offset");
	return;
}

#---- load, kill -9, restart ----

my $started = time;
for my $cycle (1 .. $CYCLES)
{
	my $load_log = -s $node->logfile;

	# scripts first, so that the clients start together
	my @scripts = map { producer_script($cycle, $_) } 1 .. $CLIENTS;
	my $ctl_script = control_script($cycle);
	my @producers =
	  map { start_client($node, $scripts[ $_ - 1 ], name => "k$cycle-c$_") }
	  1 .. $CLIENTS;
	my $control = start_client($node, $ctl_script, name => "k$cycle-ctl");
	my @clients = (@producers, $control);

	# the kill point: a seeded number of acknowledged produce calls (or
	# the end of the load, should every producer stop before)
	my $target = 20 + int(rand(1000));
	my ($acks, $running) =
	  wait_for_acks($target, $LOAD_SECONDS, qr/^ack c\S+$/, @producers);
	ok($acks >= $target || !$running,
		"cycle $cycle: the load reached its kill point within ${LOAD_SECONDS}s");
	note "cycle $cycle: kill point $target acknowledged calls, $acks seen, "
	  . "$running of $CLIENTS producers running";

	# a client that stopped before the kill stopped on an error
	check_client($_,
		"cycle $cycle: client $_->{name} ran without error until the kill")
	  for @clients;
	kill9_node(
		$node,
		label => "cycle $cycle",
		everything => $cycle % 2 == 0,
		seconds => $GONE_SECONDS);
	$_->{h}->finish for @clients;

	for my $c (@producers)
	{
		my @acks = client_acks($c);
		$acked{$_} = $sent{$_} = 1 for @acks;
		# the statement in flight at the kill may have been appended
		my ($last) = (@acks ? $acks[-1] : "$c->{name}.b-1") =~ /\.b(-?\d+)$/;
		my $next = sprintf('c%s.k%d.b%d', $c->{name} =~ /-c(\d+)$/, $cycle, $last + 1);
		$sent{$next} = 1 if exists $batches{$next};
		note "cycle $cycle: $c->{name} acknowledged " . scalar(@acks) . ' calls';
	}
	my @ctl = grep { /^ack / } file_lines($control->{out});
	note "cycle $cycle: control client: " . join(', ', map { s/^ack //r } @ctl);

	# two seals of one segment must agree (rule 3); the load sees no
	# recovery either: reading every range after the restart loaded every
	# head, so a torn tail cut now would be live data
	my $log = slurp_file($node->logfile, $load_log);
	my @disagree =
	  $log =~ /WARNING:  (segment \d+ was recorded sealed at offset \d+, its fence answered \d+)/g;
	is(join("\n", @disagree), '',
		"cycle $cycle: every seal during the load agreed with its fence");
	my @reloaded = $log =~ /LOG:  malachi: (truncating torn tail of segment .*)/g;
	is(join("\n", @reloaded), '',
		"cycle $cycle: no segment was recovered (torn tail cut) during the load");

	my $log_offset = -s $node->logfile;
	$node->start;
	my $count = verify("after crash $cycle");
	my $torn = () = slurp_file($node->logfile, $log_offset) =~ /truncating torn tail/g;
	note "after crash $cycle: $torn torn tails truncated";
	produce_continues("after crash $cycle", $count,
		[ "c0.k$cycle.b0", 'four', 12 ], [ "c0.k$cycle.b1", 'z', 1 ]);
	note sprintf('cycle %d done at %.1fs', $cycle, time - $started);
}

# the load did reach the large batches of topic big (direct I/O)
my $big_acked = grep { $batches{$_}{topic} eq 'big' } keys %acked;
cmp_ok($big_acked, '>=', 10,
	"at least 10 large batches (block-aligned, direct I/O) were acknowledged and checked ($big_acked)");

#---- a torn tail written while the node is down ----

$node->safe_psql('postgres', q{SELECT malachi.create_topic('torn', 1)});
produce_now([ 'c9.k0.b0', 'torn', 6 ], [ 'c9.k0.b1', 'torn', 1 ],
	[ 'c9.k0.b2', 'torn', 3 ]);
my ($seg, $size, $end) = split /\|/,
  $node->safe_psql(
	'postgres', q{
SELECT s.segment_id, s.byte_size, s.end_offset
  FROM malachi.segments s JOIN malachi.ranges r USING (range_id)
 WHERE r.topic = 'torn' AND s.state = 'active'});
is($end, 10, 'torn tail: the head holds the 10 records produced');
my $file = segment_file($node, $seg);
ok(-f $file, "torn tail: segment $seg has its file");

# Segment files are preallocated (zero-filled spares): the data end is the
# head's byte_size, not the file's size.  The garbage has no zero byte, so
# it cannot pass for the zeros after the data.
kill9_node($node, label => 'torn tail', seconds => $GONE_SECONDS);
note sprintf('torn tail: %s holds %d bytes, %d of them data; 100 bytes of garbage at %d',
	$file, -s $file, $size, $size);
open my $fh, '+<', $file or die "cannot open $file: $!";
binmode $fh;
seek($fh, $size, 0) or die "cannot seek $file: $!";
print $fh join('', map { chr(1 + int(rand(255))) } 1 .. 100);
close $fh or die "cannot write $file: $!";

my $log_offset = -s $node->logfile;
$node->start;
my $count = verify('torn tail');
ok( $node->log_contains(
		qr/truncating torn tail of segment $seg at position $size \(offset 10\)/,
		$log_offset),
	'torn tail: the server log says the tail was truncated at the data end');
is( $node->safe_psql(
		'postgres', "SELECT end_offset, byte_size FROM malachi.segments WHERE segment_id = $seg"),
	"10|$size", 'torn tail: the head ends where the acknowledged data ended');
produce_continues('torn tail', $count, [ 'c9.k0.b3', 'torn', 2 ]);

#---- everything again after a clean restart ----

$node->restart;
verify('after a clean restart');
note sprintf('total %.1fs', time - $started);

$node->stop;
done_testing();
