# 037_spare_faults.pl: spare files that fail or are not what they seem.
#
# A spare file whose fsync fails is thrown away; the server does not PANIC.
# PostgreSQL makes a failed fsync of its own files a PANIC
# (data_sync_elevel): a later fsync may report success over dirty pages
# the failed one dropped.  Nothing depends on a spare's zeros, so the
# writer worker removes the file, logs an ERROR and tries again later.
# Failure point fail-spare-sync (in malachi.inject_wait, which the worker
# reads from the configuration) makes the fsync of a spare it has just
# filled fail with EIO; fail-spare-writeback does the same to the wait for
# a chunk's writeback (sync_file_range, Linux), with the same outcome, and
# refuse-spare-writeback makes the start of it fail as where the call is
# not supported (EINVAL): said once, and spares are synced by their fsync
# alone; and
# fail-spare-room makes the look at the free space (statvfs) fail with EIO:
# no spare, the worker serves on; fail-recycle-clear makes the clearing of
# a deleted segment's first block fail with EIO: the file is removed
# instead of becoming a spare; fail-head-sync makes the syncs of a new
# head's file fail with EIO: a head on a prepared spare needs none and is
# made, the others fail the call that needed them.
#
# A spare that has a second name (a claim a crash cut short between its
# link and its unlink, or whose unlink failed) is not claimed: that name
# may be a head's, and two heads would share one file.  Its spare name is
# removed instead.
#
# A file system short of room gets no spare (malachi.inject_free_bytes):
# one filled into its last free bytes would make appends, and PostgreSQL,
# fail for want of the room it took.
#
# The writer reads the spares' names once and then keeps track of them
# itself: spares removed by hand are forgotten when a new head's claim
# finds them missing, and made again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('spare_sync', q{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 1
malachi.inject_wait = 'fail-spare-sync'
});
my $spares = q{SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f ~ '^spare-[0-9]'};
my $tmp = q{SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f ~ '\.tmp$'};

ok($node->wait_for_log(qr/could not fsync spare segment file/),
	'the first spare\'s fsync fails, logged');

my $log = slurp_file($node->logfile);
unlike($log, qr/PANIC/, 'no PANIC');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is up');
is($node->safe_psql('postgres', $tmp), '0', 'the unfinished spare was removed');
is($node->safe_psql('postgres', $spares), '0', 'and did not become a spare');

# range_values(NODE, RANGE): the values of a range's first 10 records, in
# offset order, space-separated
sub range_values
{
	my ($n, $r) = @_;
	return $n->safe_psql('postgres', qq{
		SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
		  FROM malachi.read($r, 0, 10)});
}

# produce_across_roll(NODE, TOPIC): a record, a roll, a record, in a new
# topic of one range; its range's records read back, in order
sub produce_across_roll
{
	my ($n, $topic) = @_;
	my $r = topic_range($n, $topic);
	$n->safe_psql('postgres', qq{SELECT malachi.produce('$topic', 'k', 'one'::text)});
	$n->safe_psql('postgres', qq{SELECT malachi.roll($r)});
	$n->safe_psql('postgres', qq{SELECT malachi.produce('$topic', 'k', 'two'::text)});
	return range_values($n, $r);
}

# the worker still serves: new heads, which grow their files
is(produce_across_roll($node, 't'), 'one two', 'producing goes on in a new head');

# a spare with a second name, made by hand while the node is down, as a
# crash between a claim's link and its unlink leaves it (the writer reads
# the spares' names once, then keeps track of its own)
my $dir = $node->data_dir . '/malachi';
my $spare = "$dir/spare-1-1";
$node->stop;
open(my $fh, '>', $spare) or die "create $spare: $!";
binmode $fh;
print $fh "\0" x 8192;
close $fh;
link($spare, "$dir/by-hand") or die "link: $!";
$node->start;
my $u = topic_range($node, 'u');
$node->safe_psql('postgres', q{SELECT malachi.produce('u', 'k', 'own'::text)});
my $head = $node->safe_psql('postgres', qq{
	SELECT segment_id FROM malachi.segments WHERE range_id = $u AND state = 'active'});
isnt((stat(segment_file($node, $head)))[1], (stat("$dir/by-hand"))[1],
	'a new head does not take a spare that has another name');
ok(!-e $spare, 'that spare\'s name was removed');
is((stat("$dir/by-hand"))[3], 1, 'and the other name keeps the file, alone');
is(range_values($node, $u), 'own', 'the head reads its own record');

$node->stop;

# a file system short of room: malachi.inject_free_bytes (read by the
# writer from the configuration) says 1 MiB is free, less than a spare of
# 1 MiB and its margin.  No spare is started, which says so once in the
# log; heads grow their files.  With the real free space back, spares are
# made again.
my $room = malachi_node('spare_room', q{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 2
malachi.inject_free_bytes = 1048576
});
ok($room->wait_for_log(qr/not preparing spare segment files: 1048576 bytes free/),
	'short of room: the writer says it prepares no spare');
my $rdir = $room->data_dir . '/malachi';
my $r = topic_range($room, 'r');
$room->safe_psql('postgres', q{SELECT malachi.produce('r', 'k', 'grown'::text)});
$room->safe_psql('postgres', q{SELECT pg_sleep(2.5)});	# counted every second
is($room->safe_psql('postgres', $spares . q{ OR f ~ '\.tmp$'}), '0',
	'no spare was made, nor begun');
is(range_values($room, $r), 'grown', 'a head grows its file meanwhile');
my $said = () = slurp_file($room->logfile) =~ /not preparing spare segment files/g;
is($said, 1, 'said once');
$room->safe_psql('postgres', q{ALTER SYSTEM SET malachi.inject_free_bytes = -1});
$room->reload;
ok($room->wait_for_log(qr/preparing spare segment files again/),
	'with room back, the writer says so');
ok($room->poll_query_until('postgres', $spares, '2'),
	'and makes its 2 spares');

# spares removed by hand: the next head's claim finds them missing and
# forgets them (the writer keeps its own list of spares), so the writer
# makes new ones
my @made = grep { /^spare-\d/ } split /\n/,
  $room->safe_psql('postgres', q{SELECT pg_ls_dir('malachi')});
unlink("$rdir/$_") or die "unlink $_: $!" for @made;
is($room->safe_psql('postgres', $spares), '0', 'both spares removed by hand');
$room->safe_psql('postgres', q{
	SELECT malachi.create_topic('missing', 1);
	SELECT malachi.produce('missing', 'k', 'v'::text)});
ok($room->poll_query_until('postgres', $spares, '2'),
	'a new head found them missing, and the writer made 2 spares again');

# A spare's name is never one a spare has: a writer that got an earlier
# one's pid (after a restart) replaced that one's spares as it finished its
# own, and filled again.  Here a spare made by hand under the name the
# writer would give its next spare, while no room keeps it from filling:
# the next spare takes another name, and the one made by hand stays
# (before: replaced, a new file of the spare size).
my $wpid = $room->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'malachi writer'});
my ($last) = sort { $b <=> $a } map { /^spare-$wpid-(\d+)$/ ? $1 : () }
  split /\n/, $room->safe_psql('postgres', q{SELECT pg_ls_dir('malachi')});
ok(defined $last, "the writer's spares are named spare-$wpid-<n>");
my $log_at = -s $room->logfile;
$room->safe_psql('postgres', q{ALTER SYSTEM SET malachi.inject_free_bytes = 1048576});
$room->reload;
$room->safe_psql('postgres', qq{
	SELECT malachi.create_topic('take$_', 1);
	SELECT malachi.produce('take$_', 'k', 'v'::text)})
  for 1 .. 2;
ok($room->poll_query_until('postgres', $spares, '0'), 'both spares taken by new heads');
ok($room->wait_for_log(qr/not preparing spare segment files/, $log_at),
	'and no room to make more');
my $by_hand = "$rdir/spare-$wpid-" . ($last + 1);
open(my $bh, '>', $by_hand) or die "create $by_hand: $!";
binmode $bh;
print $bh "\0" x 8192;
close $bh;
my $ino = (stat $by_hand)[1];
$room->safe_psql('postgres', q{ALTER SYSTEM SET malachi.inject_free_bytes = -1});
$room->reload;
my $next = "spare-$wpid-" . ($last + 2);
ok( $room->poll_query_until('postgres', qq{
		SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f = '$next'}, '1'),
	"the writer's next spare takes the next free name, $next");
is((stat $by_hand)[1], $ino, 'the spare made by hand keeps its name');
is(-s $by_hand, 8192, 'and its size');
$room->stop;

# The writer starts each chunk's writeback as it zero-fills a spare and
# waits for the one before (sync_file_range: Linux only), and only with
# fsync on, which test nodes turn off.
SKIP:
{
	skip 'sync_file_range is Linux only', 9 unless $^O eq 'linux';

	# A spare whose writeback fails (failure point fail-spare-writeback: the
	# wait for the first chunk, once the second is written, fails with EIO)
	# is thrown away as one whose fsync fails.  (The worker tries again a
	# minute later: no spare is begun again while this runs.)
	my $wb = malachi_node('spare_writeback', q{
fsync = on
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 2097152
malachi.spare_segments = 1
malachi.inject_wait = 'fail-spare-writeback'
});
	ok( $wb->wait_for_log(
			qr/could not write back spare segment file "[^"]*": Input\/output error/),
		'the first spare\'s writeback fails, logged with its errno');
	unlike(slurp_file($wb->logfile), qr/PANIC|sync_file_range refused/,
		'no PANIC, and not taken for a refusal of the call');
	is($wb->safe_psql('postgres', $tmp), '0', 'the unfinished spare was removed');
	is($wb->safe_psql('postgres', $spares), '0', 'and did not become a spare');
	is(produce_across_roll($wb, 'w'), 'one two', 'producing goes on in a new head');
	$wb->stop;

	# A file system that refuses the call itself (failure point
	# refuse-spare-writeback: EINVAL, as where sync_file_range is not
	# supported) is said once, and spares are then synced by their fsync
	# alone: both spares are made.
	my $ref = malachi_node('spare_refused', q{
fsync = on
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 2
malachi.inject_wait = 'refuse-spare-writeback'
});
	ok($ref->poll_query_until('postgres', $spares, '2'),
		'with writeback refused, the writer still makes its 2 spares');
	my $rlog = slurp_file($ref->logfile);
	my $refused = () = $rlog =~
	  /sync_file_range refused on spare segment file "[^"]*": Invalid argument/g;
	is($refused, 1, 'the refusal is said once, with its errno');
	like($rlog, qr/Spares are written back by their fsync alone from now on/,
		'and what follows from it');
	unlike($rlog, qr/could not write back spare segment file/,
		'not taken for a failed writeback');
	$ref->stop;
}

# A file system whose free space cannot be read (failure point
# fail-spare-room: statvfs fails with EIO) gets no spare; the writer logs
# the error and serves on (and tries again a minute later: no spare is
# begun while this runs).
my $fs = malachi_node('spare_statvfs', q{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 1
malachi.inject_wait = 'fail-spare-room'
});
ok($fs->wait_for_log(qr/could not read the free space of "malachi": Input\/output error/),
	'the free space cannot be read, logged with its errno');
unlike(slurp_file($fs->logfile), qr/PANIC/, 'no PANIC');
is($fs->safe_psql('postgres', $spares . q{ OR f ~ '\.tmp$'}), '0',
	'no spare was made, nor begun');
is(produce_across_roll($fs, 'f'), 'one two', 'producing goes on in a new head');
$fs->stop;

# A deleted segment's file whose first block cannot be cleared (failure
# point fail-recycle-clear: the write fails with EIO) is not kept as a
# spare, whose start would then read as its old data: the writer logs it
# and removes the file.
my $rc = malachi_node('recycle_clear', q{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 0
malachi.max_spare_segments = 4
malachi.inject_wait = 'fail-recycle-clear'
});
is(produce_across_roll($rc, 'd'), 'one two', 'a topic of two segments');
$rc->safe_psql('postgres', q{SELECT malachi.drop_topic('d')});
ok( $rc->wait_for_log(
		qr/could not clear the first block of recycled segment file "malachi\/recycle-[0-9a-f]{16}": Input\/output error/),
	'clearing a dropped segment\'s first block fails, logged with its errno');
ok($rc->log_contains(qr/The file is removed instead of kept as a spare/),
	'and what becomes of the file');
ok( $rc->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM pg_ls_dir('malachi') f WHERE f ~ '^recycle-'}),
	'the dropped segments\' files are handled');
is($rc->safe_psql('postgres', q{SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f ~ '^spare-r'}),
	'0', 'none became a spare: they were removed');
unlike(slurp_file($rc->logfile), qr/PANIC/, 'no PANIC');
is(produce_across_roll($rc, 'e'), 'one two', 'producing goes on in a new head');
$rc->stop;

# A head that takes a spare neither writes nor syncs it: the spare's first
# block is zeros already, and durable (zero-filled and synced whole).  With
# failure point fail-head-sync, the syncs of a new head's file fail with
# EIO: a head on a spare is made all the same; one on a spare whose first
# block holds data (as an earlier build left its recycled spares) has to
# clear it and sync it, and fails, as does a head without a spare, whose
# new file is synced.  Each failure is an ERROR of the call that needed the
# head, not a PANIC, and the next head on a good spare works.
my $hs = malachi_node('head_sync', q{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 1
malachi.inject_wait = 'fail-head-sync'
});
my $hs_spare = q{SELECT f FROM pg_ls_dir('malachi') f WHERE f ~ '^spare-[0-9]'};
my $hs_dir = $hs->data_dir . '/malachi';
ok($hs->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($hs_spare) s"),
	'fail-head-sync: the writer made its spare');
my $hr = topic_range($hs, 'h');
is($hs->safe_psql('postgres', qq{SELECT malachi.produce('h', 'k', 'one'::text)}), '1',
	'fail-head-sync: a head on the spare was made without a sync, and takes a record');
ok($hs->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($hs_spare) s"),
	'fail-head-sync: the writer made another spare');
my $dirty = $hs->safe_psql('postgres', $hs_spare);
put_bytes("$hs_dir/$dirty", 0, 'x' x 64);
$hs->safe_psql('postgres', "SELECT malachi.roll($hr)");
my ($ret, $stdout, $stderr) =
  $hs->psql('postgres', qq{SELECT malachi.produce('h', 'k', 'lost'::text)});
like($stderr,
	qr/could not clear the first block of segment file "malachi\/[0-9a-f]{16}\.seg": Input\/output error/,
	'fail-head-sync: a head on a spare with data in its first block must sync it, and fails');
ok($hs->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($hs_spare) s WHERE f <> '$dirty'"),
	'fail-head-sync: the writer made a new spare');
$hs->safe_psql('postgres', qq{SELECT malachi.produce('h', 'k', 'two'::text)});
is(range_values($hs, $hr), 'one two',
	'fail-head-sync: the next head, on the new spare, takes the next record');

# no spare: the new file is synced, and that fails
$hs->stop;
unlink glob("$hs_dir/spare-*");
$hs->append_conf('postgresql.conf', 'malachi.spare_segments = 0');
$hs->start;
$hs->safe_psql('postgres', "SELECT malachi.roll($hr)");
($ret, $stdout, $stderr) =
  $hs->psql('postgres', qq{SELECT malachi.produce('h', 'k', 'lost'::text)});
like($stderr,
	qr/could not fsync segment file "malachi\/[0-9a-f]{16}\.seg": Input\/output error/,
	'fail-head-sync: a head without a spare syncs its new file, and fails');
is(range_values($hs, $hr), 'one two',
	'fail-head-sync: the failed calls appended nothing');
unlike(slurp_file($hs->logfile), qr/PANIC/, 'fail-head-sync: no PANIC');
$hs->stop;
done_testing();
