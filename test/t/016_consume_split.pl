# 016_consume_split.pl: a consume() long poll whose range is split under it.
#
# A consumer caught up on a one-range topic waits in consume() with a long
# wait.  When another session splits the range, the consumer's claimed
# range is sealed and read to its end: waiting cannot bring it records any
# more (its children are the next call's).  The call must return then,
# empty, instead of spinning until its deadline; the next call reads on
# in the children, and nothing is lost or read twice.
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
session_in_state($node, 'poller', 'active')
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

$node->stop;
done_testing();
