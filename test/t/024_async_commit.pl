# 024_async_commit.pl: with synchronous_commit = off, what segment files
# depend on is still durable before it is used.
#
# The node runs with synchronous_commit = off and wal_writer_delay = 10s,
# so an asynchronous commit stays in the WAL buffers (shared memory) until
# something flushes them; kill -9 of every server process then loses it.
#   1. An immediate produce to a range without a head: the writer worker
#      opens the head (a row in segment_meta) and the records are
#      acknowledged once durable in its file.  After kill -9 they read back
#      (before the fix the head's row was lost, and with it the records).
#   2. drop_topic committed asynchronously: its commit removes the
#      segment files, so it is made durable first.  After kill -9 the topic
#      stays dropped (before the fix it came back without its files, and
#      reading it failed).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('async_commit', qq{
synchronous_commit = off
wal_writer_delay = '10s'
malachi.produce_mode = 'immediate'
});

# topics created durably: only what follows is asynchronous
my $acked = topic_range($node, 'acked');
$node->safe_psql('postgres', q{
	SET synchronous_commit = on;
	SELECT malachi.create_topic('dropped', 1);
	SELECT malachi.produce('dropped', 'k', 'old');
	CHECKPOINT;});

# 1. records acknowledged in a head the writer opened just now
$node->safe_psql('postgres', q{
	SELECT malachi.produce_batch('acked', ARRAY['k', 'k', 'k'], ARRAY['a', 'b', 'c'])});
kill9_node($node, everything => 1, label => 'after an immediate produce');
$node->start;
is($node->safe_psql('postgres', qq{
	SELECT string_agg("offset" || '=' || convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($acked, 0, 10)}),
	'0=a 1=b 2=c', 'the acknowledged records read back at their offsets');
$node->safe_psql('postgres', q{SELECT malachi.produce('acked', 'k', 'd')});
is($node->safe_psql('postgres', qq{
	SELECT string_agg("offset" || '=' || convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($acked, 0, 10)}),
	'0=a 1=b 2=c 3=d', 'and producing goes on after them');

# 2. a drop committed asynchronously
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('dropped')});
kill9_node($node, everything => 1, label => 'after drop_topic');
$node->start;
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM malachi.ranges WHERE topic = 'dropped'}),
	'0', 'the dropped topic stays dropped');
is($node->safe_psql('postgres', q{
	SELECT sum((SELECT count(*) FROM malachi.read(range_id, 0, 100)))
	  FROM malachi.ranges}),
	'4', 'every range left reads: the 4 records of the other topic');

$node->stop;
done_testing();
