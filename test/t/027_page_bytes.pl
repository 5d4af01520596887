# 027_page_bytes.pl: a page returned as one malachi.record[] ends at 64 MB
# of records (keys, values, headers), whatever max_records says.
#
# 100 records of 1,000,000 bytes: read_consume and stream_history with
# max_records 1000 return them as pages of 67 and 33, every record once,
# in order.  Before, the one page of 100 MB took several times that in
# memory; at 1,000 records of 1 MiB it failed with 54000 (an array is at
# most 1 GB) on every retry, and the consumer could not go on.  (A page
# always takes its first record, however large.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('page_bytes');
my $r = topic_range($node, 'big');
for my $b (1 .. 10)
{
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('big', array_agg('k' || i), array_agg(repeat(chr(64 + $b), 1000000)))
		  FROM generate_series(1, 10) i});
}

for my $fn ('read_consume', 'stream_history')
{
	my $pages = $node->safe_psql('postgres', qq{
		WITH RECURSIVE p(n, cursor, counts, firsts) AS (
			SELECT 0, NULL::text, ARRAY[]::int[], ARRAY[]::bigint[]
			UNION ALL
			SELECT n + 1, x.next_cursor, counts || cardinality(x.records),
			       firsts || (x.records[1])."offset"
			  FROM p, malachi.$fn($r, p.cursor, 1000) x
			 WHERE n < 4 AND (n = 0 OR p.cursor IS NOT NULL)
		)
		SELECT array_to_string(counts, ',') || ' from ' || array_to_string(firsts, ',')
		  FROM p ORDER BY n DESC LIMIT 1});
	like($pages, qr/^67,33(,0)* from 0,67$/,
		"$fn: pages of 67 and 33 records ($pages), in order");
}

is( $node->safe_psql('postgres', qq{
		SELECT count(*), count(DISTINCT "offset"), max("offset")
		  FROM malachi.read_history($r)}),
	'100|100|99', 'read_history returns all 100, once each');

$node->stop;
done_testing();
