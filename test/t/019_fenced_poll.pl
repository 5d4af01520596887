# 019_fenced_poll.pl: a consume() long poll on a head that is fenced but
# whose seal is not recorded yet sleeps; it does not spin.
#
# A roll is held at pause point seal-fenced (advisory lock 77000006): the
# head is fenced at the store, the control plane still says active.  A
# caught-up consumer long-polls meanwhile.  Before, its wait returned at
# once for a fenced head and the call re-read it in a busy loop until the
# seal was recorded (up to its whole wait).  Its process's CPU time over
# two seconds tells which.  Once the roll goes on and a record is produced
# to the next head, the poll returns it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use MalachiTest;

my $node = malachi_node('fenced_poll', qq{
malachi.produce_mode = 'immediate'
});
my $range = topic_range($node, 't');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'a', '1'::text)});
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.consume('t', 'g', 10)}),
	'1', 'the group is caught up');

# the roll, held between its fence and its record
my $ctl = $node->background_psql('postgres');
$ctl->query_safe(q{SELECT pg_advisory_lock(77000006)});
my $roller = $node->background_psql('postgres');
$roller->query_safe(q{SET malachi.inject_wait = 'seal-fenced'});
$roller->query_until(qr/started/, "\\echo started\nSELECT malachi.roll($range);\n");
ok($node->poll_query_until('postgres', q{SELECT bool_or(fenced) FROM malachi.head_state()}),
	'the head is fenced');

# the long poll, meanwhile
my $poller = $node->background_psql('postgres');
$poller->query_safe(q{SET application_name = 'poller'});
$poller->query_until(qr/started/, q{\echo started
SELECT string_agg(convert_from(value, 'UTF8'), ' ') FROM malachi.consume('t', 'g', 10, '1 minute');
});
ok(session_asleep($node, 'poller'), 'the poll waits');
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'poller'});

# CPU seconds (user + system) of a process, from /proc
sub cpu_seconds
{
	my ($p) = @_;
	my $stat = slurp_file("/proc/$p/stat");
	my @f = split ' ', $stat =~ s/^.*\) //sr;
	return ($f[11] + $f[12]) / 100;	# utime, stime in clock ticks
}
my $before = cpu_seconds($pid);
usleep(2_000_000);
my $used = cpu_seconds($pid) - $before;
note "the poll used $used s of CPU in 2 s";
cmp_ok($used, '<', 0.5, 'the poll sleeps while the seal is not recorded');

# the roll goes on; the next record is in the next head
$ctl->query_safe(q{SELECT pg_advisory_unlock(77000006)});
$ctl->quit;
$roller->quit;
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) = 1 FROM malachi.segments WHERE range_id = $range AND state = 'sealed'}),
	'the seal is recorded');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'a', '2'::text)});
ok(session_in_state($node, 'poller', 'idle'),
	'the poll returns the record of the next head');
$poller->quit;
is($node->safe_psql('postgres', q{SELECT "offset" FROM malachi.committed_offsets('g', 't')}),
	'2', 'and committed it');

$node->stop;
done_testing();
