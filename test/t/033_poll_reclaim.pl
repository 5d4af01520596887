# 033_poll_reclaim.pl: a long poll holding one range tries again the ranges
# another consumer of its group held.
#
# Topic lp has two ranges.  Session a holds the group's row on range r1
# (commit_offset of where the group stands, in an open transaction), so
# b's consume(..., '20s') claims only r2, where nothing arrives.  a commits
# and a record is produced to r1.  b must claim r1 and return that record:
# before, with a single range claimed, b slept on it for the whole wait
# and returned nothing after 20 s, although r1 was free and had a record.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('poll_reclaim');
$node->safe_psql('postgres', q{SELECT malachi.create_topic('lp', 2)});
my ($r1, $r2) = split /\n/,
  $node->safe_psql('postgres', q{SELECT malachi.active_range_ids('lp') ORDER BY 1});
# a key of each range
my ($k1, $k2) = map {
	$node->safe_psql('postgres', qq{
		SELECT k FROM (SELECT 'k' || i AS k FROM generate_series(1, 100) i) s
		 WHERE malachi.route('lp', k) = $_ LIMIT 1})
} ($r1, $r2);
# a record on each (so each range has a head to wait on), consumed: the
# group's rows on both ranges
$node->safe_psql('postgres', qq{SELECT malachi.produce_batch('lp', ARRAY['$k1', '$k2'], ARRAY['x', 'y'])});
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('lp', 'g', 10)}),
	'2', 'the group consumed both ranges');
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.group_positions WHERE group_name = 'g'}),
	'2', 'the group has a position on both ranges');

my $a = $node->background_psql('postgres');
$a->query_safe('BEGIN');
$a->query_safe(qq{SELECT malachi.commit_offset('g', 'lp', jsonb_build_object('$r1', 1))});

my $b = $node->background_psql('postgres');
$b->query_until(qr/start/, qq{
	\\echo start
	SELECT 'got:' || count(*) FROM malachi.consume('lp', 'g', 10, '20s');
});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE '%consume(''lp'', ''g'', 10, ''20s'')%'
		   AND wait_event_type = 'Extension'}),
	'b long-polls, waiting');
$a->query_safe('COMMIT');
$node->safe_psql('postgres', qq{SELECT malachi.produce('lp', '$k1', 'new'::text)});
my $start = time;
my $out = $b->query_until(qr/got:\d+/, '');
like($out, qr/got:1/, 'b claims the range a let go and returns its record');
note sprintf('b returned %d s after the record was produced', time - $start);
$a->quit;
$b->quit;

$node->stop;
done_testing();
