# 041_startup_heads.pl: the sweeper's first pass after a start loads the
# heads nobody has loaded yet, so that the batches a crash left in doubt in
# a head nobody uses are decided (marked void) while PostgreSQL's commit
# log still holds their transactions.  Before, such a head was loaded only
# by its next produce or read, or once it was segment_max_age old; by then
# vacuum could have truncated the commit log past the transaction, and the
# batch was taken for committed.  The pass loads heads only while half the
# append slots stay free.
#
# With malachi.max_active_segments = 16, 15 topics have a head each; the
# first (lowest segment id) also holds a batch in doubt (its COMMIT held at
# the pause point after-flush) when the node is killed.  After the restart
# nothing touches the topics; the first pass (sweep_interval 1s) loads 8
# heads, the first one's batch marked void in its file, and says it left 7;
# two new topics can still produce (had the pass loaded all 15, the second
# would fail with 53400).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('startup_heads', qq{
malachi.max_active_segments = 16
});
$node->safe_psql('postgres', q{
	SELECT malachi.create_topic('quiet', 1);
	SELECT malachi.create_topic('t' || i, 1) FROM generate_series(1, 14) i;
	SELECT malachi.produce('quiet', 'k', 'committed'::text);
	SELECT malachi.produce('t' || i, 'k', 'committed'::text) FROM generate_series(1, 14) i;});
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.head_state()}),
	'15', 'fifteen heads hold append slots');
my ($segment, $end) = split /\|/, $node->safe_psql('postgres', q{
	SELECT segment_id, byte_size FROM malachi.segments s
	  JOIN malachi.ranges r USING (range_id) WHERE r.topic = 'quiet'});

my ($holder, $session, $waits) =
  commit_held($node, q{SELECT malachi.produce('quiet', 'k', 'in doubt'::text)});
ok($waits, 'a COMMIT is held with its batch written and in doubt');
kill9_node($node, label => 'in doubt', everything => 1);
eval { $holder->quit };
eval { $session->quit };

my $file = segment_file($node, $segment);
is(void_flag($file, $end), 0, 'the batch in doubt is not marked void before the restart');

my $log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "malachi.sweep_interval = '1s'\n");
$node->start;

ok( $node->poll_query_until('postgres', q{
		SELECT passes > 0 FROM malachi.sweeper_status}),
	'the sweeper makes a pass after the restart');
my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/malachi: marked 1 batch\(es\) of segment $segment void/,
	'the first pass decided the batch in doubt, with nothing reading the topic');
is(void_flag($file, $end), 1, 'and marked it void in the file');
is( $node->safe_psql('postgres', q{
		SELECT (counts ->> 'errors') || ' ' || coalesce(last_error, 'none')
		  FROM malachi.sweeper_status}),
	'0 none', 'the pass had no errors');
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.head_state()}),
	'8', 'it loaded 8 heads, half the append slots');
like($log, qr/malachi sweeper: 7 head\(s\) not loaded since the start: no more than half of the 16 append slots are free/,
	'and says it left 7');

my ($ret, $out, $err) = $node->psql('postgres', q{
	SELECT malachi.create_topic('new1', 1), malachi.create_topic('new2', 1);
	SELECT malachi.produce('new1', 'k', 'v'::text) IS NOT NULL,
	       malachi.produce('new2', 'k', 'v'::text) IS NOT NULL;});
is($ret, 0, 'two new topics produce') or diag($err);
is( $node->safe_psql('postgres', q{
		SELECT string_agg(convert_from(value, 'UTF8'), ',' ORDER BY "offset")
		  FROM malachi.read((SELECT range_id FROM malachi.ranges WHERE topic = 'quiet'), 0, 10)}),
	'committed', 'the topic reads its committed record only');

$node->stop;
done_testing();
