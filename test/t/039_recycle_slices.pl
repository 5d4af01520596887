# 039_recycle_slices.pl: the writer worker serves requests while it removes
# the files of a large drop.
#
# A dropped topic's segment files wait as recycle-<id> until no process can
# hold them open; then the writer makes spares of some and removes the
# rest.  Removing a file can take tens of milliseconds (ext4 frees a 64 MiB
# file's blocks in about 30 ms), and the writer used to handle every file of
# the drop in one go, while every roll and every new head of every topic
# waited: 0.42-0.44 s for the 35 files of a topic of 64 MiB segments, and
# proportionally longer for larger drops.  It now handles files for about
# 5 ms at a time and serves requests in between.
#
# Pause point recycle-file (77000019, in postgresql.conf: the worker has no
# session) holds the writer before each file.  While a controlling session
# holds the pause, a roll of another topic waits for the writer (checked
# once the roll has passed pause point seal-fenced, after its fence); the
# controllers let one file through and hold the pause again.  The writer's
# turn has then lasted longer than 5 ms, so it serves the roll before the
# next file.  Before the change it went on to the next file and held the
# roll at the pause.
#
# A removal is cut into steps too (8 MiB off the file's end per step): one
# more pass through the pause cuts 8 MiB off a 9 MB file, and the writer
# stops before the rest of it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $key = 77000019;
my $node = malachi_node('recycle_slices', q{
malachi.produce_mode = 'immediate'
malachi.spare_segments = 0
malachi.max_spare_segments = 1
malachi.inject_wait = 'recycle-file'
});

# the number of files in the segment directory whose names match RE
sub files { return segment_dir_files($node, $_[0]); }

# a topic 'big' of four segments of 9 MB (a removal takes two steps of
# 8 MiB), and 'other' with a head
my $nine = q{SELECT malachi.produce_batch('big', array_fill('k'::text, ARRAY[9]),
	array_fill(repeat('b', 1000000), ARRAY[9]))};
my $big = topic_range($node, 'big');
for my $i (1 .. 3)
{
	$node->safe_psql('postgres', "$nine; SELECT malachi.roll($big)");
}
$node->safe_psql('postgres', $nine);
my $other = topic_range($node, 'other');
$node->safe_psql('postgres', q{SELECT malachi.produce('other', 'k', 'one'::text)});
is(files(qr/^recycle-/), 0, 'no deleted segment files yet');

# queue_for_pause(SESSION, NAME): SESSION, whose application_name is NAME,
# asks for the pause's lock; true once it waits for it
sub queue_for_pause
{
	my ($session, $name) = @_;
	$session->query_until(qr/started/, qq{\\echo started\nSELECT pg_advisory_lock($key);\n});
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		 WHERE l.locktype = 'advisory' AND l.objid = $key AND NOT l.granted
		   AND a.application_name = '$name'});
}

my $writer_waits = qq{
	SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	 WHERE l.locktype = 'advisory' AND l.objid = $key AND NOT l.granted
	   AND a.backend_type = 'malachi writer'};
my $ctl = $node->background_psql('postgres');
$ctl->query_safe(q{SET application_name = 'controller1'});
$ctl->query_safe("SELECT pg_advisory_lock($key)");
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('big')});
ok($node->poll_query_until('postgres', $writer_waits),
	'the writer waits before the first of the dropped files');
is(files(qr/^recycle-/), 4, 'the four files of the drop wait as recycle-');

# a roll of the other topic asks the writer to record its seal; held at
# pause point seal-fenced first, so that the Extension wait seen after it
# is the wait for the writer, not the fence's own file I/O
my $sealed_key = 77000006;
$ctl->query_safe("SELECT pg_advisory_lock($sealed_key)");
my $roll = paused_session($node, 'roller', 'seal-fenced', $sealed_key,
	"SELECT malachi.roll($other) AS rolled;");
$ctl->query_safe("SELECT pg_advisory_unlock($sealed_key)");
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE application_name = 'roller' AND state = 'active'
	   AND wait_event_type = 'Extension'}),
	'the roll waits for the writer');

# one file through, then the pause again: a second controller queues for
# the pause's lock behind the writer, so it holds the pause again as soon as
# the writer has passed it once
my $ctl2 = $node->background_psql('postgres');
$ctl2->query_safe(q{SET application_name = 'controller2'});
ok(queue_for_pause($ctl2, 'controller2'),
	'a second controller queues behind the writer');
$ctl->query_safe("SELECT pg_advisory_unlock($key)");
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE application_name = 'roller' AND state = 'idle'}),
	'the roll is served while the pause holds the rest of the files');
ok($node->poll_query_until('postgres', $writer_waits),
	'the writer waits before the next file');
is(files(qr/^recycle-/), 3, 'three files wait still');
is(files(qr/^spare-r/), 1, 'the first became a spare');
is( $node->safe_psql('postgres', qq{
	SELECT state FROM malachi.segments WHERE range_id = $other}),
	'sealed', 'the other topic\'s head is sealed');

# a removal goes in steps: one more pass through the pause (the first
# controller queued behind the writer this time) cuts 8 MiB off the next
# file, and the writer stops before the rest of it
ok(queue_for_pause($ctl, 'controller1'),
	'the first controller queues behind the writer');
$ctl2->query_safe("SELECT pg_advisory_unlock($key)");
ok($node->poll_query_until('postgres', $writer_waits),
	'the writer waits before the second step of that file');
my $dir = $node->data_dir . '/malachi';
opendir(my $d, $dir) or die "opendir $dir: $!";
my @sizes = sort { $a <=> $b } map { -s "$dir/$_" } grep { /^recycle-/ } readdir($d);
closedir $d;
is(scalar(@sizes), 3, 'three files wait still');
ok($sizes[0] < 8_000_000 && $sizes[1] >= 9_000_000,
	'one of them is 8 MiB shorter, the others whole')
  or diag("sizes: @sizes");

# let the rest through
$ctl->query_safe("SELECT pg_advisory_unlock($key)");
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_ls_dir('malachi') f WHERE f ~ '^recycle-'}),
	'the other files are handled');
is(files(qr/^spare-r/), 1, 'one spare (max_spare_segments = 1), the rest removed');
$node->safe_psql('postgres', q{SELECT malachi.produce('other', 'k', 'two'::text)});
is( $node->safe_psql('postgres', qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($other, 0, 10)}),
	'one two', 'producing goes on');
$roll->quit;
$ctl2->quit;
$ctl->quit;
$node->stop;
done_testing();
