# 016_consume_split.pl: a consume() long poll whose range is split under it.
#
# A consumer caught up on a one-range topic waits in consume() with a long
# wait.  When another session splits the range, the consumer's claimed
# range is sealed and read to its end: waiting cannot bring it records any
# more (its children are the next call's).  The call must return then,
# empty, instead of spinning until its deadline; the next call reads on
# in the children, and nothing is lost or read twice.
#
# The same on a topic of two ranges, the other range held by another
# consumer of the group: the poll must not go on waiting for that range
# while it still holds the sealed one, which keeps the group off its
# children (another consumer could not read them until its deadline).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('consume_split', qq{
malachi.produce_mode = 'immediate'
});
my $range = topic_range($node, 't');
$node->safe_psql('postgres', q{
	SELECT malachi.produce_batch('t', ARRAY['a', 'b'], ARRAY['1', '2'])});

# catch the group up
my $consume = q{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY value)
	  FROM malachi.consume('t', 'g', 100, '%s')};
is($node->safe_psql('postgres', sprintf($consume, '0')), '1 2', 'the group reads the first records');

# a long poll, then a split under it
my $poller = $node->background_psql('postgres');
$poller->query_safe(q{SET application_name = 'poller'});
$poller->query_until(qr/started/,
	"\\echo started\n" . sprintf($consume, '1 minute') . ";\n");
session_asleep($node, 'poller')
  or die 'the poll did not start';
my $t0 = time;
$node->safe_psql('postgres', "SELECT count(*) FROM malachi.split_range($range)");
ok(session_in_state($node, 'poller', 'idle'),
	'the long poll returns once its range is sealed and read to its end');
cmp_ok(time - $t0, '<', 50, 'well before its one-minute wait is over');
$poller->quit;

$node->safe_psql('postgres', q{
	SELECT malachi.produce_batch('t', ARRAY['a', 'b', 'c'], ARRAY['3', '4', '5'])});
is($node->safe_psql('postgres', sprintf($consume, '0')), '3 4 5',
	'the next call reads on in the children: nothing lost, nothing twice');

# two ranges; a consumer of the group holds the first (a claim is a lock
# on the group's row for the range)
$node->safe_psql('postgres', q{
	SELECT malachi.create_topic('t2', 2);
	SELECT malachi.produce_batch('t2', ARRAY['a', 'b', 'c', 'd'], ARRAY['1', '2', '3', '4'])});
is($node->safe_psql('postgres', sprintf($consume =~ s/'t'/'t2'/r, '0')), '1 2 3 4',
	'two ranges: the group reads the first records');
my ($first, $second) = split /\n/, $node->safe_psql('postgres', q{
	SELECT range_id FROM malachi.ranges WHERE topic = 't2' ORDER BY range_id});
my $holder = $node->background_psql('postgres');
$holder->query_safe(qq{BEGIN;
	SELECT 1 FROM malachi.group_positions WHERE range_id = $first FOR UPDATE});

$poller = $node->background_psql('postgres');
$poller->query_safe(q{SET application_name = 'poller2'});
$poller->query_until(qr/started/,
	"\\echo started\n" . sprintf($consume =~ s/'t'/'t2'/r, '1 minute') . ";\n");
session_asleep($node, 'poller2')
  or die 'the second poll did not start';
$t0 = time;
$node->safe_psql('postgres', "SELECT count(*) FROM malachi.split_range($second)");
ok(session_in_state($node, 'poller2', 'idle'),
	'two ranges: the long poll returns once its range is sealed and read to its end');
cmp_ok(time - $t0, '<', 50, 'two ranges: well before its wait is over, the other range still held');
$poller->quit;

# another consumer reads the split range's children (the held range is
# skipped): what was produced to them after the split
$node->safe_psql('postgres', qq{
	CREATE TABLE landed AS
	SELECT 'v' || i AS value, malachi.produce('t2', 'k' || i, 'v' || i) AS range_id
	  FROM generate_series(1, 20) i});
is($node->safe_psql('postgres', sprintf($consume =~ s/'t'/'t2'/r, '0')),
	$node->safe_psql('postgres', qq{
		SELECT string_agg(value, ' ' ORDER BY value) FROM landed WHERE range_id <> $first}),
	'another consumer reads the children at once');
$holder->query_safe('ROLLBACK');
$holder->quit;

$node->stop;
done_testing();
