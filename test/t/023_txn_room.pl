# 023_txn_room.pl: a head that tracks as many transactional batches as it
# can (APPEND_MAX_TXN, 128) behind one still in doubt makes the next
# transactional commit wait for room, and that wait sleeps: it can be
# cancelled, and bounded when the waiter holds batches in doubt elsewhere.
#
# A commit is held in doubt at the pause point after-flush, then 127
# commits to the same range fill the list behind it (committed batches
# leave only from the front).
#   1. A further commit waits, asleep (wait event Extension); a cancel
#      ends it.  Before the fix it spun on the slot's spinlock and could
#      not be cancelled.
#   2. A commit that wrote a batch to another topic first gives up after
#      10 seconds with 55P03, and its other batch does not read.
#   3. Once the held commit finishes, a commit goes through, and exactly
#      the committed records read back.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('txn_room');
my $range = topic_range($node, 'room');
my $other = topic_range($node, 'other');

my ($holder, $held, $waits) = commit_held($node,
	q{SELECT malachi.produce('room', 'k', 'held')});
ok($waits, 'a commit is held in doubt after its flush');

# 127 more transactional commits to the same range, one per statement
$node->safe_psql('postgres', "SET malachi.produce_mode = 'transactional';\n"
	  . join('', map { "SELECT malachi.produce('room', 'k', 'c$_');\n" } 1 .. 127));
is($node->safe_psql('postgres', qq{SELECT count(*) FROM malachi.read($range, 0, 1000)}),
	'0', 'the 127 commits do not read yet: the held batch is in front of them');

# 1. the next commit waits asleep, and a cancel ends it
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_safe(q{SET malachi.produce_mode = 'transactional'});
$waiter->query_safe(q{SET application_name = 'room_waiter'});
$waiter->query_until(qr/producing/,
	"\\echo producing\nSELECT malachi.produce('room', 'k', 'cancelled');\n");
# (still in an Extension wait a second after its statement began: not the
# brief one for its head, asked of the writer worker first)
ok($node->poll_query_until('postgres', q{
	SELECT wait_event_type = 'Extension' AND now() - query_start > interval '1 second'
	  FROM pg_stat_activity
	 WHERE application_name = 'room_waiter' AND state = 'active'}),
	'a further commit waits for room, asleep');
$node->safe_psql('postgres', q{
	SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	 WHERE application_name = 'room_waiter'});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	 WHERE application_name = 'room_waiter' AND state = 'active'}),
	'a cancel ends the wait');
$waiter->quit;
like($waiter->{stderr}, qr/canceling statement due to user request/,
	'the waiter was cancelled');

# 2. holding a batch in doubt in another topic, the wait is bounded
my ($ret, $out, $err) = $node->psql('postgres', q{
	SET malachi.produce_mode = 'transactional';
	BEGIN;
	SELECT malachi.produce('other', 'k', 'first');
	SELECT malachi.produce('room', 'k', 'second');
	COMMIT;}, extra_params => ['-v', 'VERBOSITY=verbose']);
like($err, qr/55P03: timed out waiting for room in segment \d+/,
	'a commit holding a batch in doubt elsewhere gives up with 55P03');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM malachi.read($other, 0, 10)}),
	'0', 'and its batch in the other topic does not read');

# 3. the held commit finishes: everything committed reads, in order
$holder->query_safe('SELECT pg_advisory_unlock_all()');
$held->quit;
$holder->quit;
$node->safe_psql('postgres', q{
	SET malachi.produce_mode = 'transactional';
	SELECT malachi.produce('room', 'k', 'after')});
is($node->safe_psql('postgres', qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($range, 0, 1000)}),
	join(' ', 'held', map({ "c$_" } 1 .. 127), 'after'),
	'the held, the 127 and the last commit read back in order, nothing else');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ') FROM malachi.read($other, 0, 10)}),
	'', 'the timed-out commit left nothing in the other topic');

$node->stop;
done_testing();
