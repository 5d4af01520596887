# 034_head_cache.pl: a metadata change of another topic does not send a
# backend's cached heads through the writer worker again.
#
# The head cache was checked against the global metadata generation: after
# any create_topic, alter_topic or split anywhere, every backend asked the
# writer again for every head it produced to, one transaction with a
# synchronous commit each, and each answer bumped the segments epoch,
# which made every other backend query the catalog for its heads.  Now a
# cached head is checked in the catalog, and the epoch moves only when a
# head is opened or a seal recorded.  The writer's calls are counted by
# the transaction ids they take (each locks its range's row), with
# autovacuum off so that nothing else takes one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('head_cache', "autovacuum = off\n");
$node->safe_psql('postgres', q{SELECT malachi.create_topic('hc', 8)});

# one session: produce to all 8 ranges, change another topic's metadata,
# produce again; the transaction ids taken by the writer in between
my $out = $node->safe_psql('postgres', q{
	SET malachi.produce_mode = immediate;
	SELECT malachi.produce_batch('hc', array_agg('k' || i), array_agg('v' || i))
	  FROM generate_series(1, 200) i;
	SELECT count(DISTINCT range_id) FROM malachi.segments s
	  JOIN malachi.ranges r USING (range_id) WHERE r.topic = 'hc';
	SELECT malachi.create_topic('other', 1);
	SELECT txid_current() AS before \gset
	SELECT malachi.produce_batch('hc', array_agg('k' || i), array_agg('w' || i))
	  FROM generate_series(1, 200) i;
	SELECT txid_current() - :before - 1;
});
my @lines = split /\n/, $out;
is($lines[1], '8', 'every range has a head');
is($lines[-1], '0', 'no writer call after another topic was created');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM malachi.active_range_ids('hc') r, malachi.read(r, 0, 1000)}),
	'400', 'both batches read back');

$node->stop;
done_testing();
