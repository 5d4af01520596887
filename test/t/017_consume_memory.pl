# 017_consume_memory.pl: a consume() long poll that keeps trying to claim
# a range another consumer of its group holds.
#
# Every attempt runs a few queries.  SPI keeps each result table until the
# call's end unless it is freed, so an hour-long poll against a held range
# grew by a result table every few milliseconds.  The poller's memory
# contexts, logged while it waits, show how many result tables it holds;
# when the holder lets go, the poll claims the range and returns its
# record.
#
# The same for the children of a split range whose parent another consumer
# holds: each attempt to derive a child's start from its parent allocated
# a little in the call's memory, which grew for as long as the poll
# waited (about 24 kB a second here).  Two logs of its memory contexts,
# 4 seconds apart, must show the call's memory (its SPI Proc contexts: the
# call's, and the one of the attempt or turn it is in) within 16 kB.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('consume_memory', qq{
malachi.produce_mode = 'immediate'
});
topic_range($node, 't');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'a', '1'::text)});

# a consumer of the group holds the range, its transaction open
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN});
is($holder->query_safe(q{SELECT count(*) FROM malachi.consume('t', 'g', 1)}), '1',
	'the holder claims the range');

# another consumer of the group long-polls: it retries the claim
my $poller = $node->background_psql('postgres');
$poller->query_safe(q{SET application_name = 'poller'});
$poller->query_until(qr/started/, q{\echo started
SELECT string_agg(convert_from(value, 'UTF8'), ' ') FROM malachi.consume('t', 'g', 10, '1 minute');
});
my $pid = session_in_state($node, 'poller', 'active')
  ? $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'poller'})
  : die 'the poll did not start';

# let it try for a while (every 50 ms: about 60 attempts), then look
sleep 3;
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
$node->wait_for_log(qr/level: 0; TopMemoryContext/, $offset);
$node->wait_for_log(qr/Grand total:/, $offset);
my $log = slurp_file($node->logfile, $offset);
my $tables = () = $log =~ /SPI TupTable/g;
note "result tables held by the waiting poll: $tables";
cmp_ok($tables, '<', 10, 'the waiting poll does not keep a result table per attempt');

# the holder lets go: the poll claims the range and returns its record
$holder->query_safe(q{ROLLBACK});
ok(session_in_state($node, 'poller', 'idle'),
	'the poll returns once the holder lets go');
$holder->quit;
$poller->quit;
is($node->safe_psql('postgres', q{SELECT "offset" FROM malachi.committed_offsets('g', 't')}),
	'1', 'the poll read and committed the record');

# a split range whose parent a consumer of the group holds
my $parent = topic_range($node, 'm');
$node->safe_psql('postgres', q{SELECT malachi.produce('m', 'a', '1'::text)});
$holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN});
is($holder->query_safe(q{SELECT count(*) FROM malachi.consume('m', 'g', 1)}), '1',
	'the holder claims the parent range');
$node->safe_psql('postgres', "SELECT count(*) FROM malachi.split_range($parent)");
$poller = $node->background_psql('postgres');
$poller->query_safe(q{SET application_name = 'poller_m'});
$poller->query_until(qr/started/, q{\echo started
SELECT count(*) FROM malachi.consume('m', 'g', 10, '1 minute');
});
$pid = session_in_state($node, 'poller_m', 'active')
  ? $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'poller_m'})
  : die 'the poll on the children did not start';

# the bytes of the poll's SPI Proc contexts, as its memory log shows them
sub spi_bytes
{
	my $from = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	$node->wait_for_log(qr/Grand total:/, $from);
	my $bytes = 0;
	$bytes += $1 for slurp_file($node->logfile, $from) =~ /SPI Proc: (\d+) total/g;
	return $bytes;
}
sleep 1;
my $before = spi_bytes();
sleep 4;    # about 80 attempts to claim each child
my $after = spi_bytes();
note "SPI Proc bytes of the waiting poll: $before, 4 s later $after";
cmp_ok($after - $before, '<', 16384,
	"the call's memory does not grow while it retries the children");

$holder->query_safe(q{ROLLBACK});
ok(session_in_state($node, 'poller_m', 'idle'),
	'the poll on the children returns once the holder lets go');
$holder->quit;
$poller->quit;

$node->stop;
done_testing();
