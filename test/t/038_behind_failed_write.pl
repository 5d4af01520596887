# 038_behind_failed_write.pl: a batch behind another session's failed write
# goes to the next head.
#
# Producer A reserves a region and pauses before writing it (pause point
# append-reserved, advisory lock 77000002); producer B reserves the next
# region, writes it and waits for A's.  A's write then fails: its session's
# "disk" is full (malachi.inject_disk_limit).  The head is fenced before
# A's region, so B's batch can never be part of the log.  B's records go to
# the range's next head and B's call succeeds, in immediate and in
# transactional mode.  Before, B failed with MA014 ("a write before this
# batch failed"): a produce_batch over several ranges had then written
# the others already, and the retry the hint asked for duplicated them; a
# transactional COMMIT rolled back for another session's disk error.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('behind_failed');
my $range = topic_range($node, 't');
$node->safe_psql('postgres', q{
	SET malachi.produce_mode = 'immediate';
	SELECT malachi.produce('t', 'k', 'first'::text)});
my $records = qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($range, 0, 100)};
my $heads = qq{SELECT count(*) FROM malachi.segments WHERE range_id = $range};

my $holder = $node->background_psql('postgres');

# A, whose "disk" is full, held between its reservation and its write; B,
# in MODE, behind it; then A goes on and fails.
sub behind_failed
{
	my ($mode, $value) = @_;
	$holder->query_safe('SELECT pg_advisory_lock(77000002)');
	my $a = paused_session($node, "a_$mode", 'append-reserved', 77000002, q{
		SET malachi.produce_mode = 'immediate';
		SET malachi.inject_disk_limit = 1;
		SELECT malachi.produce('t', 'k', 'lost'::text);});
	my $b = $node->background_psql('postgres', on_error_stop => 0);
	$b->query_safe(qq{SET application_name = 'b_$mode'; SET malachi.produce_mode = '$mode'});
	$b->query_until(qr/started/, qq{\\echo started
BEGIN;
SELECT malachi.produce('t', 'k', '$value'::text) IS NOT NULL AS produced;
COMMIT;
\\echo done
});
	ok(session_asleep($node, "b_$mode"), "$mode: b waits for a's region");
	$holder->query_safe('SELECT pg_advisory_unlock(77000002)');
	$b->query_until(qr/done/, '');
	eval { $a->quit };
	$b->quit;
	return;
}

behind_failed('immediate', 'b1');
is($node->safe_psql('postgres', $records), 'first b1',
	'immediate: b\'s record is in the log, once, and a\'s is not');
is($node->safe_psql('postgres', $heads), '2', 'in the next head');

behind_failed('transactional', 'b2');
is($node->safe_psql('postgres', $records), 'first b1 b2',
	'transactional: b\'s commit went through, its record in the next head');
is($node->safe_psql('postgres', $heads), '3', 'a third head');

$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'k', 'after'::text)});
is($node->safe_psql('postgres', $records), 'first b1 b2 after', 'producing goes on');

$holder->quit;
$node->stop;
done_testing();
