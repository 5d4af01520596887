# 020_read_memory.pl: reading a whole history does not hold it in memory.
#
# read() and read_history() return their rows through a tuplestore, which
# spills to disk past work_mem.  Each row's values used to be built in the
# call's memory and kept until it returned, so reading 200 MB of records
# grew the backend by as much.  The backend's peak resident size (VmHWM)
# before and after a read of the whole range tells.  Likewise the scratch
# space a very large batch takes to decode is given back after the read
# (it was kept for the backend's life).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('read_memory', qq{
malachi.produce_mode = 'immediate'
work_mem = '4MB'
});
my $range = topic_range($node, 't');
# 100 batches of 1,000 records of 2 KiB: about 200 MB
produce_calls($node, 't', 100, 1000, 2048);

my $reader = $node->background_psql('postgres');
my $pid = $reader->query_safe('SELECT pg_backend_pid()');
# a small read first, so that the backend's caches and buffers exist
$reader->query_safe("SELECT count(*) FROM malachi.read($range, 0, 10)");

# peak resident size of a process, in kB
sub peak_kb
{
	my ($p) = @_;
	my ($kb) = slurp_file("/proc/$p/status") =~ /^VmHWM:\s+(\d+) kB/m;
	return $kb;
}
my $before = peak_kb($pid);
is($reader->query_safe("SELECT count(*) FROM malachi.read_history($range)"),
	'100000', 'read_history returns every record');
is($reader->query_safe("SELECT count(*) FROM malachi.read($range, 0, 200000)"),
	'100000', 'read returns every record');
my $grown = peak_kb($pid) - $before;
note "peak resident size grew by $grown kB reading about 200 MB";
cmp_ok($grown, '<', 64 * 1024, 'the reader does not hold the records it returned');

# one transactional batch of 400,000 tiny records: decoding it takes
# about 40 MB of scratch space, given back once the read is over
my $big = topic_range($node, 'tiny');
$node->safe_psql('postgres', q{
	BEGIN;
	SET LOCAL malachi.produce_mode = 'transactional';
	SELECT malachi.produce_batch('tiny', array_fill(NULL::text, ARRAY[400000]),
								 array_fill('x'::text, ARRAY[400000]));
	COMMIT;});
sub resident_kb
{
	my ($p) = @_;
	my ($kb) = slurp_file("/proc/$p/status") =~ /^VmRSS:\s+(\d+) kB/m;
	return $kb;
}
$before = resident_kb($pid);
is($reader->query_safe("SELECT \"offset\" FROM malachi.read($big, 399999, 1)"),
	'399999', 'the last record of the big batch reads');
my $kept = resident_kb($pid) - $before;
note "resident size after reading one record of the big batch: +$kept kB";
cmp_ok($kept, '<', 16 * 1024, 'the scratch space of a big batch is given back');
$reader->quit;

$node->stop;
done_testing();
