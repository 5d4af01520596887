# 021_time_index.pl: offset_for_time finds its answer through the indexes.
#
# A segment's index records the newest timestamp of the segment and, at
# each point, of the batches before it.  A search by time steps over a
# segment whose records are all older without reading it, so damage in
# such a segment does not stop the search (a full scan would read every
# batch and fail its checksum), while a search that needs the damaged
# batch still reports it.  The index files are removed first, so the
# search also rebuilds them, from the batch headers alone.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('time_index', qq{
malachi.produce_mode = 'immediate'
});
my $range = topic_range($node, 't');
$node->safe_psql('postgres',
	q{SELECT malachi.alter_topic('t', '{"segment_max_bytes": 262144}')});

# 80 calls of 8 records of 1 KiB, a time, 80 calls more: several segments
# before the time, several after it
produce_calls($node, 't', 80, 8, 1000);
my $mid = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
produce_calls($node, 't', 80, 8, 1000);

is( $node->safe_psql('postgres', qq{
		SELECT min("offset") FROM malachi.read($range, 0, 1000)
		 WHERE produced_at >= '$mid'}),
	'640', 'the records after the time start at offset 640');
my @segs = split /\n/, $node->safe_psql('postgres', qq{
	SELECT segment_id FROM malachi.segments
	 WHERE range_id = $range AND state = 'sealed' AND end_offset <= 640
	 ORDER BY seq});
cmp_ok(scalar(@segs), '>=', 2, 'sealed segments end before the time');

# no index files: the search builds them
unlink glob(sprintf('%s/malachi/*.idx', $node->data_dir));
# damage the payload of the first batch of the first segment
flip_byte(segment_file($node, $segs[0]), 64 + 100);

is($node->safe_psql('postgres', "SELECT malachi.offset_for_time($range, '$mid')"),
	'640', 'a search by time steps over an older, damaged segment');
ok(-e sprintf('%s/malachi/%016x.idx', $node->data_dir, $segs[0]),
	'the search saved the index it built');
is($node->safe_psql('postgres', "SELECT malachi.offset_for_time($range, '$mid')"),
	'640', 'and finds the same from the saved index');

my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT malachi.offset_for_time($range, '-infinity')");
like($err, qr/segment $segs[0] is corrupt at offset 0/,
	'a search that needs the damaged batch reports it');

# A batch in doubt holds a head's readable end back, while the index of
# the head reaches past it (to the synced edge): the answer is never past
# the readable end.
my $q = topic_range($node, 'q');
produce_calls($node, 'q', 1, 8, 1000);
my ($holder, $tx, $waits) =
  commit_held($node, q{SELECT malachi.produce('q', 'k', 'in doubt'::text)});
ok($waits, 'a COMMIT waits after its batch was written');
produce_calls($node, 'q', 40, 8, 1000);
my $qmid = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
produce_calls($node, 'q', 40, 8, 1000);
is($node->safe_psql('postgres', "SELECT malachi.offset_for_time($q, '$qmid')"),
	'8', 'behind a batch in doubt the answer is the readable end');
$holder->quit;
$tx->quit;
is($node->safe_psql('postgres', "SELECT malachi.offset_for_time($q, '$qmid')"),
	'329', 'once it committed, the first record after the time');

# A backend that cached segment indexes before the extension was dropped
# and created again, with the segment files deleted in between (as
# operations.md says): segment ids start again, and the new segments must
# not be searched with the old indexes of their ids.
my $pooled = $node->background_psql('postgres');
$pooled->query_safe("SELECT malachi.offset_for_time($range, '$mid')");
$node->safe_psql('postgres', 'DROP EXTENSION malachi');
unlink glob(sprintf('%s/malachi/*.{seg,idx}', $node->data_dir));
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
my $again = topic_range($node, 'again');
$node->safe_psql('postgres',
	q{SELECT malachi.alter_topic('again', '{"segment_max_bytes": 262144}')});
produce_calls($node, 'again', 80, 8, 1000);
my $amid = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
produce_calls($node, 'again', 80, 8, 1000);
is($node->safe_psql('postgres',
		"SELECT min(segment_id) FROM malachi.segments WHERE range_id = $again"),
	$node->safe_psql('postgres', 'SELECT 1'),
	'the new segment ids start again at 1');
is($pooled->query_safe("SELECT malachi.offset_for_time($again, '$amid')"),
	'640', 'a backend that cached the old segments\' indexes finds the new answer');
$pooled->quit;

$node->stop;
done_testing();
