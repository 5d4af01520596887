# 010_retention_readers.pl: retention deletes segments while readers read.
#
# A range rolls every 4 KiB and keeps only its newest 8 KiB.  While records
# are produced and passes of the sweeper (run_maintenance) delete old
# segments, two readers run concurrently, one statement per transaction:
#
# - a read_consume reader: every offset of the range is either returned
#   exactly once with its own value, or inside exactly one reported skip,
#   and every skip lies in what retention deleted.  It never errors, even
#   when a segment it listed is deleted before it opens the file.
# - a consumer group: every record it gets is delivered once, with its own
#   value; what it missed was deleted; its committed position ends at the
#   range's end.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use MalachiTest;

my $node = malachi_node('retention_readers', qq{
malachi.produce_mode = 'immediate'
});

my $range = $node->safe_psql('postgres', q{
	SELECT malachi.create_topic('ret');
	SELECT malachi.alter_topic('ret', '{"segment_max_bytes": 4096, "retention_bytes": 8192}');
	SELECT malachi.active_range_ids('ret');
});
$range = (split /\n/, $range)[-1];
$node->safe_psql('postgres', q{
	CREATE TABLE seen (off bigint, ok bool);
	CREATE TABLE skipped (lo bigint, hi bigint);
	CREATE TABLE cur (c text);
	INSERT INTO cur VALUES (NULL);
	CREATE TABLE gseen (off bigint, ok bool);
});

# the readers: one statement (one transaction) per page, until they have
# accounted for every record produced (or run out of pages).  A caught-up
# reader must not use its pages up before the producer is done: the
# read_consume reader pauses 2 ms between pages, the consumer long-polls
# (up to 200 ms) for the next record
my $total = 600;
my $pages = 20000;
my $pad = 'x' x 100;
my $reader_sql = qq{
WITH p AS (SELECT * FROM malachi.read_consume($range, (SELECT c FROM cur), 7)),
	 r AS (INSERT INTO seen
		   SELECT (x)."offset", convert_from((x).value, 'UTF8') = 'v' || (x)."offset" || '$pad'
			 FROM p, unnest(p.records) x),
	 s AS (INSERT INTO skipped
		   SELECT (k ->> 'from_offset')::bigint, (k ->> 'to_offset')::bigint
			 FROM p, jsonb_array_elements(p.skips) k)
UPDATE cur SET c = (SELECT next_cursor FROM p);
SELECT (SELECT count(*) FROM seen) + (SELECT coalesce(sum(hi - lo), 0) FROM skipped)
	   >= $total AS fin \\gset
\\if :fin
\\echo done
\\q
\\endif
SELECT pg_sleep(0.002) \\gset
} x $pages;
my $group_sql = qq{
INSERT INTO gseen SELECT "offset", convert_from(value, 'UTF8') = 'v' || "offset" || '$pad'
  FROM malachi.consume('ret', 'g', 7, '200ms');
SELECT coalesce((SELECT "offset" FROM malachi.committed_offsets('g', 'ret')), 0) >= $total AS fin \\gset
\\if :fin
\\echo done
\\q
\\endif
} x $pages;
my $dir = PostgreSQL::Test::Utils::tempdir;
my ($reader, $group);

# produce 40 batches of 15 records (value 'v<offset>' and padding: one
# range, so the offsets are known) while passes delete old segments; the
# readers start half way, when the oldest records are already gone
my $n = 0;
my $deleted = 0;
for my $b (1 .. 40)
{
	if ($b == 21)
	{
		$reader = start_client($node,
			write_file("$dir/reader.sql", "SET client_min_messages = warning;\n$reader_sql"));
		$group = start_client($node,
			write_file("$dir/group.sql", "SET client_min_messages = warning;\n$group_sql"));
	}
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('ret', array_agg('k' || i), array_agg('v' || i || '$pad'))
		  FROM generate_series($n, $n + 14) i});
	$n += 15;
	$deleted += $node->safe_psql('postgres',
		q{SELECT (malachi.run_maintenance() ->> 'deleted')::int});
	usleep(20_000);
}
note "produced $n records; retention deleted $deleted segments";
is($n, $total, 'all records produced');
cmp_ok($deleted, '>=', 5, 'retention deleted segments while the readers read');

for my $c ($reader, $group)
{
	my $deadline = time + 120;
	usleep(50_000) while pid_running($c->{pid}) && time < $deadline;
}
$reader->{h}->finish;
$group->{h}->finish;
is(slurp_file($reader->{err}), '', 'the read_consume reader never errored');
is(slurp_file($group->{err}), '', 'the consumer never errored');
like(slurp_file($reader->{out}), qr/done/, 'the read_consume reader ran to its end');
like(slurp_file($group->{out}), qr/done/, 'the consumer ran to its end');

my $first = $node->safe_psql('postgres',
	"SELECT min(base_offset) FROM malachi.segments WHERE range_id = $range");
note "the range's first stored offset is now $first";
cmp_ok($first, '>', 0, 'the oldest records are gone');

# read_consume: returned and skipped offsets tile [0, n) exactly once
is($node->safe_psql('postgres', q{SELECT count(*) FROM seen WHERE NOT ok}), '0',
	'every record returned has its own value');
is($node->safe_psql('postgres', qq{
	WITH covered AS (
		SELECT off FROM seen
		UNION ALL
		SELECT generate_series(lo, hi - 1) FROM skipped)
	SELECT count(*) = $n AND count(DISTINCT off) = $n AND min(off) = 0 AND max(off) = $n - 1
	  FROM covered}),
	't', 'every offset was returned or skipped, exactly once');
is($node->safe_psql('postgres', "SELECT count(*) FROM skipped WHERE hi > $first OR lo >= hi"),
	'0', 'every skip lies in what retention deleted');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM skipped}), '>', 0,
	'the reader was told of skips');

# the consumer group: once each, only deleted records missed, at the end
is($node->safe_psql('postgres', q{
	SELECT count(*) = count(DISTINCT off) AND bool_and(ok) FROM gseen}),
	't', 'the group got each record once, with its own value');
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM generate_series(0, $n - 1) o
	 WHERE o NOT IN (SELECT off FROM gseen) AND o >= $first}),
	'0', 'the group missed only records retention deleted');
is($node->safe_psql('postgres', q{SELECT "offset" FROM malachi.committed_offsets('g', 'ret')}),
	$n, 'the group\'s position is at the range\'s end');

$node->stop;
done_testing();
