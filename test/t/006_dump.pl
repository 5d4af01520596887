# 006_dump.pl: pg_dump carries the control plane (pg_extension_config_dump),
# and a restore into a fresh node is accepted, whatever order the rows of
# segment_meta come out in (the segment tiling check runs at commit).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = PostgreSQL::Test::Cluster->new('dump_src');
$src->init;
$src->append_conf('postgresql.conf', "shared_preload_libraries = 'malachi'");
$src->start;
$src->safe_psql('postgres', 'CREATE EXTENSION malachi');
$src->safe_psql('postgres', q{
	SELECT malachi.create_policy('keep', '{"retention": "7 days"}');
	SELECT malachi.create_topic('d', 4, NULL, 'keep');
	SELECT malachi.alter_topic('d', '{"segment_max_bytes": 4096}');
});
# many segments per range, sealed one by one, then shuffled on disk by
# updates and a vacuum so that COPY emits them out of seq order
for my $i (1 .. 20)
{
	$src->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('d', array_agg('k' || j), array_agg(repeat('v', 300)))
		  FROM generate_series(1, 8) j});
}
$src->safe_psql('postgres', q{
	UPDATE malachi.segment_meta SET replicas = replicas WHERE seq % 2 = 0;
	VACUUM malachi.segment_meta});
my $order = $src->safe_psql('postgres',
	q{SELECT string_agg(seq::text, ',') FROM (SELECT seq FROM malachi.segment_meta) s});
isnt($order, join(',', sort { $a <=> $b } split /,/, $order),
	'segment rows are stored out of seq order');

my $summary = q{
	SELECT (SELECT count(*) FROM malachi.topic_meta),
	       (SELECT string_agg(format('%s:%s-%s:%s', range_id, key_lo, key_hi, state), ' ' ORDER BY range_id) FROM malachi.ranges),
	       (SELECT string_agg(format('%s/%s:%s-%s:%s', range_id, seq, base_offset, end_offset, state), ' ' ORDER BY range_id, seq) FROM malachi.segment_meta),
	       (SELECT malachi.topic_policy_name('d')),
	       (SELECT malachi.topic_settings('d')::text)};
my $before = $src->safe_psql('postgres', $summary);

my $dump = $src->basedir . '/malachi.sql';
$src->command_ok([ 'pg_dump', '-d', $src->connstr('postgres'), '-f', $dump ],
	'pg_dump of a database with malachi');

my $dst = PostgreSQL::Test::Cluster->new('dump_dst');
$dst->init;
$dst->append_conf('postgresql.conf', "shared_preload_libraries = 'malachi'");
$dst->start;
$dst->command_ok(
	[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-q', '-d', $dst->connstr('postgres'), '-f', $dump ],
	'the dump restores into a fresh node');
is($dst->safe_psql('postgres', $summary), $before,
	'topics, ranges, segments, bindings and settings came back the same');
my $routes = q{SELECT string_agg(malachi.route('d', 'k' || j)::text, ',' ORDER BY j)
	FROM generate_series(1, 8) j};
is($dst->safe_psql('postgres', $routes), $src->safe_psql('postgres', $routes),
	'the restored topic routes each key to the same range');

$src->stop;
$dst->stop;
done_testing();
