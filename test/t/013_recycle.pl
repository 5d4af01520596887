# 013_recycle.pl: the files of deleted segments become spares, safely.
#
# A dropped topic's segment files are renamed recycle-<id>; once no process
# can hold them open, the writer worker makes them spares (spare-r<id>), up
# to malachi.max_spare_segments, and removes the rest.  New heads take them
# over with the old segment's batches still inside, past their own data.
# Checked here:
#
# - the cap: at most max_spare_segments spares, the other files removed;
# - a file becomes a spare with its first block cleared, the rest kept; a
#   head that takes a spare whose first block holds data (as an earlier
#   build left them) clears it, and keeps the spare's space;
# - new heads take the recycled files, and read back only their own records;
# - a kill -9 while the head is a recycled file: recovery cuts the old
#   batches off as a torn tail, every acknowledged record reads back
#   byte-exact, nothing else appears, and producing goes on;
# - a transaction that has a dropped segment's file open holds the recycling
#   of that file back until it ends, also a producer paused between its
#   reservation and its write, which writes into the dropped head's file
#   later (a new topic's records stay intact); one that holds it past a
#   minute makes the writer remove the files instead;
# - max_spare_segments = 0 removes deleted segments' files at once;
# - a head whose first batch has another format version is refused, not
#   cut as a torn tail;
# - a recreated extension never gives a segment the id whose old batches a
#   recycled spare holds;
# - a file with a second name (a claim cut short by a crash) is not
#   recycled, and an orphan's grace counts from its change time.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use MalachiTest;

my $cap = 6;
my $node = malachi_node('recycle', qq{
malachi.produce_mode = 'immediate'
malachi.spare_segments = 0
malachi.max_spare_segments = $cap
});
my $dir = $node->data_dir . '/malachi';

# the number of files in the segment directory whose names match RE
sub files { return segment_dir_files($node, $_[0]); }

# wait up to 30 s for N files matching RE, then check it
sub wait_files
{
	my ($re, $n, $what) = @_;
	my $deadline = time + 30;
	usleep(50_000) while files($re) != $n && time < $deadline;
	is(files($re), $n, $what);
}

# a topic of one range rolling every 64 KiB
sub topic
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT malachi.create_topic('$name');
		SELECT malachi.alter_topic('$name', '{"segment_max_bytes": 65536}');
		SELECT malachi.active_range_ids('$name');}) =~ s/.*\n//sr;
}

# CALLS produce calls of 60 records of about 1 KiB to TOPIC, the values
# TAG-<n>-xxx..., n counting on from FIRST
sub fill
{
	my ($topic, $tag, $first, $calls) = @_;
	for my $c (0 .. $calls - 1)
	{
		my $lo = $first + 60 * $c;
		$node->safe_psql('postgres', qq{
			SELECT malachi.produce_batch('$topic', array_agg('k' || i),
					array_agg('$tag-' || i || '-' || repeat('x', 1000)))
			  FROM generate_series($lo, $lo + 59) i});
	}
}

# the records of a range as "offset:value" with the value's tag and number
# only, in offset order
sub contents
{
	my ($range) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg("offset" || ':' || split_part(convert_from(value, 'UTF8'), '-x', 1), ' ' ORDER BY "offset")
		  FROM malachi.read($range, 0, 100000)});
}

sub expected
{
	my ($tag, $n) = @_;
	return join(' ', map { "$_:$tag-$_" } 0 .. $n - 1);
}

#---- the cap ----

topic('a');
fill('a', 'a', 0, 20);
my $a_segments = $node->safe_psql('postgres',
	q{SELECT count(*) FROM malachi.segments JOIN malachi.ranges USING (range_id) WHERE topic = 'a'});
cmp_ok($a_segments, '>', $cap, "topic a has more segments ($a_segments) than the cap");
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('a')});
wait_files(qr/^recycle-/, 0, 'the writer finished recycling the dropped topic');
is(files(qr/^spare-r/), $cap, "$cap of its files became spares");
is(files(qr/\.seg$/), 0, 'no segment file is left, the others were removed');

# the spares' paths
sub spares
{
	opendir(my $d, $dir) or die "opendir $dir: $!";
	my @names = map { "$dir/$_" } grep { /^spare-r/ } readdir($d);
	closedir $d;
	return @names;
}

# a block of a file (block_size bytes) at POSITION
my $blcksz = $node->safe_psql('postgres', 'SHOW block_size');
sub block_at { return file_bytes($_[0], $_[1], $blcksz); }

# a file became a spare with its first block (the start of its old first
# batch) cleared, and synced by the rename that made it a spare, so that a
# head taking it needs no write and sync of its own; the rest of the old
# file is left as it was
my @spares = spares();
is(scalar(grep { block_at($_, 0) eq "\0" x $blcksz } @spares), $cap,
	'every recycled spare starts with a block of zeros');
is(scalar(grep { block_at($_, $blcksz) ne "\0" x $blcksz } @spares), $cap,
	'and still holds its old data after that block');

# as an earlier build left its recycled spares: the old segment's data in
# the first block too.  A head that takes such a spare clears it, rather
# than be cut as a torn tail at position 0, its spare's space and all.
put_bytes($_, 0, block_at($_, $blcksz)) for @spares;
my $b_log = -s $node->logfile;

#---- new heads take the recycled files ----

my $rb = topic('b');
fill('b', 'b', 0, 10);
my $b_segments = $node->safe_psql('postgres',
	"SELECT count(*) FROM malachi.segments WHERE range_id = $rb");
cmp_ok($b_segments, '<=', $cap, "topic b has no more segments ($b_segments) than the cap");
is(files(qr/^spare-r/), $cap - $b_segments, 'each of its heads took a spare');
is(contents($rb), expected('b', 600), 'topic b reads back exactly its own 600 records');
unlike(slurp_file($node->logfile, $b_log), qr/truncating torn tail of segment \d+ at position 0 /,
	'no head of b was cut at position 0: each cleared the data in its spare\'s first block');
my ($b_head, $b_size) = split /\|/, $node->safe_psql('postgres',
	"SELECT segment_id, byte_size FROM malachi.segments WHERE range_id = $rb AND state = 'active'");
cmp_ok(-s segment_file($node, $b_head), '>', $b_size,
	'b\'s head kept the space of the spare it took');

#---- a crash while the head is a recycled file ----

topic('c');
fill('c', 'c', 0, 12);
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('c')});
wait_files(qr/^spare-r/, $cap, 'topic c was recycled too');
$node->safe_psql('postgres', "SELECT malachi.roll($rb)");
fill('b', 'b', 600, 1);
my ($head, $size) = split /\|/, $node->safe_psql('postgres',
	"SELECT segment_id, byte_size FROM malachi.segments WHERE range_id = $rb AND state = 'active'");
cmp_ok(-s segment_file($node, $head), '>', $size,
	'the head is a recycled file: it holds more than its own data');

kill9_node($node, seconds => 60, label => 'recycled head');
$node->start;
is(contents($rb), expected('b', 660),
	'after kill -9, every acknowledged record of b reads back, and nothing else');
like(slurp_file($node->logfile), qr/truncating torn tail of segment $head at position $size /,
	'recovery cut the old segment\'s batches off the head');
fill('b', 'b', 660, 1);
is(contents($rb), expected('b', 720), 'producing goes on after the crash');

#---- an open file holds its recycling back ----

my $d = topic('d');
fill('d', 'd', 0, 8);
my $spares = files(qr/^spare-r/);
my $holder = $node->background_psql('postgres');
$holder->query_safe(qq{BEGIN; SELECT count(*) FROM malachi.read($d, 0, 10)});
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('d')});
my $waiting = files(qr/^recycle-/);
cmp_ok($waiting, '>', 0, "the dropped topic's files wait as recycle- files ($waiting)");
# the writer looks ten times a second; give it two seconds
usleep(2_000_000);
is(files(qr/^recycle-/), $waiting, 'they still wait while a transaction has one open');
is(files(qr/^spare-r/), $spares, 'and no spare was made of them');
$holder->query_safe('COMMIT');
wait_files(qr/^recycle-/, 0, 'once that transaction ends they are recycled');
is(files(qr/^spare-r/), $spares + $waiting < $cap ? $spares + $waiting : $cap,
	'as spares, up to the cap');

#---- a producer between its reservation and its write ----

# A producer paused after reserving its region (pause point append-reserved,
# advisory lock 77000002) still has the head's file open when the topic is
# dropped, and writes into it once it goes on.  The file must not be
# recycled before: a new head that took it would get that write over its
# own records.  Only the dropped head's file may become a spare, so the
# other spares go first.
unlink glob("$dir/spare-*");
my $x = topic('x');
$node->safe_psql('postgres', q{SELECT malachi.produce('x', 'k', 'first'::text)});
$holder->query_safe('SELECT pg_advisory_lock(77000002)');
my $producer = $node->background_psql('postgres', on_error_stop => 0);
$producer->query_safe(q{SET malachi.inject_wait = 'append-reserved'});
$producer->query_until(qr/started/,
	qq{\\echo started\nSELECT malachi.produce('x', 'k', repeat('p', 10000)::text);\n});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_locks
	 WHERE locktype = 'advisory' AND objid = 77000002 AND NOT granted})
  or die 'the producer did not reach its pause point';
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('x')});
is(files(qr/^recycle-/), 1, "the dropped head's file waits while its producer is paused");
usleep(2_000_000);
is(files(qr/^recycle-/) . '|' . files(qr/^spare-r/), '1|0',
	'two seconds later it still waits, and is no spare');
my $y = topic('y');
fill('y', 'y', 0, 1);
$holder->query_safe('SELECT pg_advisory_unlock(77000002)');
$producer->quit;
fill('y', 'y', 60, 1);
is(contents($y), expected('y', 120),
	'a new topic written before and after the paused write reads back intact');
wait_files(qr/^recycle-/, 0, 'once the producer is done the file is recycled');
is(files(qr/^spare-r/), 1, 'as a spare');

#---- held past a minute: removed instead ----

$node->safe_psql('postgres', "ALTER SYSTEM SET malachi.max_spare_segments = 100; SELECT pg_reload_conf()");
my $e = topic('e');
fill('e', 'e', 0, 4);
$spares = files(qr/^spare-r/);
$holder->query_safe(qq{BEGIN; SELECT count(*) FROM malachi.read($e, 0, 10)});
my $log_at = -s $node->logfile;
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('e')});
$waiting = files(qr/^recycle-/);
cmp_ok($waiting, '>', 0, "topic e's files wait ($waiting)");
my $deadline = time + 120;
usleep(200_000) while files(qr/^recycle-/) > 0 && time < $deadline;
is(files(qr/^recycle-/), 0, 'after a minute the writer stopped waiting');
is(files(qr/^spare-r/), $spares, 'and removed the files instead of making spares');
like(substr(slurp_file($node->logfile), $log_at),
	qr/removing \d+ deleted segment file\(s\) instead of keeping them as spares/,
	'and said so in the log');
$holder->query_safe('COMMIT');
$holder->quit;

#---- max_spare_segments = 0 ----

$node->safe_psql('postgres', "ALTER SYSTEM SET malachi.max_spare_segments = 0; SELECT pg_reload_conf()");
topic('f');
fill('f', 'f', 0, 4);
my @f_segments = split /\n/, $node->safe_psql('postgres',
	q{SELECT segment_id FROM malachi.segments JOIN malachi.ranges USING (range_id) WHERE topic = 'f'});
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('f')});
is(files(qr/^recycle-/) + grep({ -e segment_file($node, $_) } @f_segments), 0,
	'with max_spare_segments = 0 the dropped files are removed at once');

#---- a head of another format version is refused, not cut ----

# a batch's magic and version are written whole or not at all, and a
# recycled file's first block is zeroed before a head takes it: another
# version at position 0 means another build wrote the file
my $v = topic('v');
$node->safe_psql('postgres', q{SELECT malachi.produce_batch('v', ARRAY['a', 'b', 'c'], ARRAY['1', '2', '3'])});
my $v_head = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $v AND state = 'active'");
my $v_file = segment_file($node, $v_head);
$node->stop;
my $v_size = -s $v_file;
flip_byte($v_file, 4);
$node->start;
my ($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM malachi.read($v, 0, 10)");
like($err, qr/was written in another format version/,
	'a head whose first batch has another format version is refused');
is(-s $v_file, $v_size, 'and its file is left as it is');
$node->stop;
flip_byte($v_file, 4);
$node->start;
is($node->safe_psql('postgres', "SELECT string_agg(convert_from(value, 'UTF8'), ',' ORDER BY \"offset\") FROM malachi.read($v, 0, 10)"),
	'1,2,3', 'with the byte back, every record reads');

#---- a recreated extension's ids stay above the recycled files' ----

$node->safe_psql('postgres', "ALTER SYSTEM SET malachi.max_spare_segments = $cap; SELECT pg_reload_conf()");
topic('h');
fill('h', 'h', 0, 4);
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('h')});
wait_files(qr/^recycle-/, 0, 'a last dropped topic is recycled');
opendir(my $dh, $dir) or die "opendir $dir: $!";
my ($old_max) = sort { $b <=> $a } map { /^spare-r([0-9a-f]{16})$/ ? hex($1) : () } readdir($dh);
closedir $dh;
ok(defined $old_max, 'recycled spares are left over');
$node->safe_psql('postgres', 'DROP EXTENSION malachi');
unlink glob("$dir/*.seg"), glob("$dir/*.idx");
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
topic('g');
fill('g', 'g', 0, 1);
cmp_ok($node->safe_psql('postgres', 'SELECT min(segment_id) FROM malachi.segments'),
	'>', $old_max,
	'after DROP and CREATE EXTENSION, with the .seg files removed, new segment ids start above the ids of the recycled spares');

#---- a file with a second name is never recycled ----

# A crash between the link and the unlink of a claim leaves a spare and an
# orphan segment file naming one file.  The orphan's name is removed, not
# recycled, or two spares would be one file.
opendir($dh, $dir) or die "opendir $dir: $!";
my ($spare) = grep { /^spare-r/ } readdir($dh);
closedir $dh;
ok(defined $spare, 'a spare is left to link');
my $orphan = sprintf('%s/%016x.seg', $dir, 0xfff0000);
link("$dir/$spare", $orphan) or die "link $orphan: $!";
# a claim keeps the spare's old modification time; its change time is now
utime(time - 3600, time - 3600, $orphan) or die "utime: $!";
$node->safe_psql('postgres',
	q{SET malachi.orphan_grace = '10min'; SELECT malachi.run_maintenance()});
ok(-e $orphan,
	'an orphan an hour old by its modification time but just linked stays within the grace');
$node->safe_psql('postgres',
	q{SET malachi.orphan_grace = 0; SELECT malachi.run_maintenance()});
ok(!-e $orphan, 'past the grace its name is removed');
is(files(qr/^(recycle-|spare-r)0*fff0000$/), 0, 'and the file is not recycled: it has another name');
is((stat("$dir/$spare"))[3], 1, 'the spare keeps the file, under one name');

$node->stop;
done_testing();
