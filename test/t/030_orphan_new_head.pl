# 030_orphan_new_head.pl: the sweeper's orphan step never removes the file
# of a head being opened.
#
# The writer creates a head's file just before its row commits.  Held
# there (pause point head-created, advisory lock 77000013), a pass with
# malachi.orphan_grace = 0 found the file without a row and removed it:
# the head's row then committed without its file.  Now the writer says
# which file it is creating, and the orphan step reads the row again.
#
# Then the writer is terminated while it holds such a file: the file is an
# orphan, and a pass removes it before the restarted writer serves the
# request again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('orphan_new_head');
my $r = topic_range($node, 'fresh');

my $holder = $node->background_psql('postgres');

# hold_new_head(TOPIC, NAME): hold the writer at pause point head-created
# and produce to TOPIC from a new session, which it returns, waiting: the
# writer has created the new head's file and not committed its row.
sub hold_new_head
{
	my ($topic, $name) = @_;
	$holder->query_safe('SELECT pg_advisory_lock(77000013)');
	$node->safe_psql('postgres', q{
		ALTER SYSTEM SET malachi.inject_wait = 'head-created';
		SELECT pg_reload_conf();});
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	$session->query_until(qr/start/, qq{
		SET malachi.produce_mode = immediate;
		\\echo start
		SELECT malachi.produce('$topic', 'k', 'v'::text);
	});
	ok( $node->poll_query_until('postgres', q{
			SELECT count(*) = 1 FROM pg_stat_activity
			 WHERE backend_type = 'malachi writer' AND wait_event_type = 'Lock'}),
		$name);
	return $session;
}

my $producer = hold_new_head('fresh',
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

# The writer terminated while held there: a FATAL exit skips the error
# handling that clears its mark.  Until the postmaster restarts it (after
# 1 s), nothing sets the mark again, and a pass with malachi.orphan_grace
# = 0 removes the given-up head's file (before: the mark stayed until the
# next head the writer served, and the orphan step spared the file).  The
# restarted writer serves the request again, with a new head.
my $segs = q{SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f ~ '[.]seg$'};
my $files_before = $node->safe_psql('postgres', $segs);
my $t = topic_range($node, 'term');
my $p2 = hold_new_head('term', 'terminated: the writer holds a new head of topic term');
is($node->safe_psql('postgres', $segs), $files_before + 1, 'terminated: its file exists');
my $old_writer = $node->safe_psql('postgres', q{
	SELECT pid FROM pg_stat_activity WHERE backend_type = 'malachi writer'});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_writer)");
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $old_writer}),
	'terminated: the writer is gone');
is( $node->safe_psql('postgres', q{
		SET malachi.orphan_grace = 0;
		SELECT malachi.run_maintenance() -> 'orphans_removed'}),
	'1', "terminated: a pass removes the given-up head's file");
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET malachi.inject_wait;
	SELECT pg_reload_conf();});
$holder->query_safe('SELECT pg_advisory_unlock(77000013)');
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM malachi.read($t, 0, 10)}),
	'terminated: the restarted writer serves the produce again');
is($p2->query_safe('SELECT 1'), "$t\n1", 'terminated: the produce returned its range, without error');
is($node->safe_psql('postgres', $segs), $files_before + 1,
	'terminated: one file, the new head\'s');
$p2->quit;
$holder->quit;

$node->stop;
done_testing();
