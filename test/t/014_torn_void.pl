# 014_torn_void.pl: a void mark torn by a crash loses nothing.
#
# Marking an aborted transaction's batch void rewrites its 64-byte header
# in place: the VOID flag (byte 12) and the header CRC (bytes 60-63).  A
# crash or a power loss can tear that write where the header crosses a
# sector boundary, leaving the old flags beside the new CRC.  Recovery
# must take such a header for a void batch, not for a torn tail: cutting
# there would drop every committed batch after it.
#
# Here a committed batch A is sized so that the next batch B starts 40
# bytes before a 512-byte boundary; B is written at pre-commit and its
# transaction then fails (failure point fail-after-flush); C commits after
# it.  The sweeper's pass marks B void on disk (a void kept in memory
# only would, past the commit log's horizon, read as committed after a
# restart).  With the node stopped, B's VOID bit is cleared again (the
# sector holding the flags kept its old bytes, the next one got the new
# CRC), and after the next start A and C read back, B does not, and
# producing goes on.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('torn_void', qq{
malachi.produce_mode = 'transactional'
});

my $gap = 40;	# bytes of B's header before the boundary
my $range;
my $a_end;
my $len = 300;

# A: one committed record whose batch ends $gap bytes before a boundary;
# the batch grows byte for byte with the value, so one retry settles it
for my $try (1 .. 3)
{
	$node->safe_psql('postgres', q{
		SELECT malachi.drop_topic(topic) FROM malachi.stat_topics WHERE topic = 't'});
	$range = topic_range($node, 't');
	$node->safe_psql('postgres', "SELECT malachi.produce('t', 'a', repeat('a', $len))");
	$a_end = $node->safe_psql('postgres',
		"SELECT byte_size FROM malachi.segments WHERE range_id = $range");
	last if $a_end % 512 == 512 - $gap;
	$len += (512 - $gap - $a_end % 512) % 512;
}
is($a_end % 512, 512 - $gap, "batch A ends $gap bytes before a 512-byte boundary");

# B: written at pre-commit, then its transaction fails
like(produce_aborted($node, 't', 'b', 'aborted'), qr/fail-after-flush/,
	'B was appended and its transaction failed');

# C: committed after it
$node->safe_psql('postgres', q{
	SELECT malachi.produce_batch('t', ARRAY['c', 'c'], ARRAY['c1', 'c2'])});

my $records = qq{
	SELECT string_agg("offset" || ':' || key, ' ' ORDER BY "offset")
	  FROM malachi.read($range, 0, 100)};
is($node->safe_psql('postgres', $records), '0:a 2:c 3:c', 'A and C read, B is void');

# B's VOID flag (void_flag: bit 0 of byte 12 of its header)
my $file = segment_file($node, $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $range"));
is(void_flag($file, $a_end), 0, 'B is void in memory only at first');
# the sweeper's pass flags it in the file, the head still active
$node->safe_psql('postgres', 'SELECT malachi.run_maintenance()');
is(void_flag($file, $a_end), 1, "the sweeper's pass marks B void in the file");

$node->restart;
is($node->safe_psql('postgres', $records), '0:a 2:c 3:c', 'after a restart too');
$node->stop;
my $size = -s $file;

# clear B's VOID flag as a tear would
put_bytes($file, $a_end + 12, chr(ord(file_bytes($file, $a_end + 12, 1)) & ~1));

$node->start;
is($node->safe_psql('postgres', $records), '0:a 2:c 3:c',
	'with the void mark torn, A and C still read back and B does not');
is(-s $file, $size, 'recovery cut nothing from the file');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'd', 'd1')});
is($node->safe_psql('postgres', $records), '0:a 2:c 3:c 4:d', 'and producing goes on');

$node->stop;
done_testing();
