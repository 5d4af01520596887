# 030_orphan_new_head.pl: the sweeper's orphan step never removes the file
# of a head being opened.
#
# The writer creates a head's file just before its row commits.  Held
# there (pause point head-created, advisory lock 77000013), a pass with
# malachi.orphan_grace = 0 found the file without a row and removed it:
# the head's row then committed without its file.  Now the writer says
# which file it is creating, and the orphan step reads the row again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('orphan_new_head');
my $r = topic_range($node, 'fresh');

my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(77000013)');
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET malachi.inject_wait = 'head-created';
	SELECT pg_reload_conf();});
my $producer = $node->background_psql('postgres', on_error_stop => 0);
$producer->query_until(qr/start/, q{
	SET malachi.produce_mode = immediate;
	\echo start
	SELECT malachi.produce('fresh', 'k', 'v'::text);
});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE backend_type = 'malachi writer' AND wait_event_type = 'Lock'}),
	'the writer holds the new head, its file created, its row not committed');

is( $node->safe_psql('postgres', q{
		SET malachi.orphan_grace = 0;
		SELECT malachi.run_maintenance() -> 'orphans_removed'}),
	'0', 'a pass meanwhile removes no file');

$holder->query_safe('SELECT pg_advisory_unlock(77000013)');
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET malachi.inject_wait;
	SELECT pg_reload_conf();});
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM malachi.read($r, 0, 10)}),
	'released, the record is there');
is( $node->safe_psql('postgres',
		"SELECT convert_from(value, 'UTF8') FROM malachi.read($r, 0, 10)"),
	'v', 'and reads back');
is( $node->safe_psql('postgres', q{SELECT malachi.produce('fresh', 'k', 'w'::text)}),
	$r, 'producing goes on');
$producer->quit;
$holder->quit;

$node->stop;
done_testing();
