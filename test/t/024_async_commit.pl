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
#   3. declare_child committed asynchronously: the supervisor saves the
#      version it saw in its evidence file only once that version is
#      durable (before the fix the evidence could get ahead of the WAL: a
#      crash then lost the declaration while the evidence kept its
#      version, and the hub was parked, its children down, until an
#      operator acted).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use MalachiTest;

my $node = malachi_node('async_commit', qq{
synchronous_commit = off
wal_writer_delay = '10s'
malachi.produce_mode = 'immediate'
malachi.supervisor_interval = '1s'
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

# 3. a child declared asynchronously: by the time the supervisor's evidence
# file holds its version, the declaration is durable.  (A kill -9 cannot
# show the loss reliably: WAL the WAL writer wrote without flushing
# survives the processes, and the supervisor's and the child's own WAL
# soon complete the page.)
$node->safe_psql('postgres', q{
	SET synchronous_commit = on;
	SELECT malachi.create_topic('kids', 1);
	CREATE FUNCTION public.kid(b malachi.record[]) RETURNS void LANGUAGE sql AS 'SELECT';
	CHECKPOINT;});
my $lsn = $node->safe_psql('postgres',
	q{CREATE TABLE public.nudge (); SELECT pg_current_wal_insert_lsn()});
# the WAL writer flushes the first asynchronous commit after its start at
# once, then waits wal_writer_delay: let it flush one first
$node->poll_query_until('postgres', qq{SELECT pg_current_wal_flush_lsn() >= '$lsn'})
  or die 'the WAL writer did not flush';
my $declared = $node->safe_psql('postgres', q{
	SELECT malachi.declare_child('h', 'c1',
		'{"kind": "consumer", "topic": "kids", "group": "g", "function": "public.kid"}');
	SELECT pg_current_wal_insert_lsn();});
$declared = (split /\n/, $declared)[-1];
my $evidence = $node->data_dir . '/malachi/declared.evidence';
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
sleep 0.05 until (-e $evidence && slurp_file($evidence) =~ /^68 1$/m) || time > $deadline;
like(slurp_file($evidence), qr/^68 1$/m, 'the supervisor saved version 1 of hub h as evidence');
is($node->safe_psql('postgres', qq{SELECT pg_current_wal_flush_lsn() >= '$declared'}),
	't', 'the declaration was durable first');
ok( $node->poll_query_until('postgres',
		q{SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h' AND state = 'running')}),
	'and the child runs');

$node->stop;
done_testing();
