# 008_sweeper.pl: the sweeper worker, on its own.
#
# - It seals a quiet head older than its topic's segment_max_age within two
#   sweep intervals, with nobody calling anything.
# - Its scrub finds one flipped byte in a sealed segment: logged, shown in
#   malachi.segments.corrupt; reads of that segment fail with
#   data_corrupted while the other segment still reads.
# - kill -9 of the whole node while a pass is in its retention step (held
#   there after its first deletion, at the pause point retention-deleted,
#   advisory lock 77000012): after the restart every
#   segment row has its file and every segment file its row, the range
#   reads on from its first remaining offset, and once the next passes have
#   run the retention is done and producing continues at the range's end.
# - A session that read segments and sits idle does not keep their files
#   allocated after retention deletes them.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use MalachiTest;

my $interval = 2;
my $node = PostgreSQL::Test::Cluster->new('sweeper');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'malachi'
malachi.sweep_interval = '${interval}s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');

is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'malachi sweeper'}),
	'1', 'the sweeper worker runs');

#---- a quiet head is rolled by age ----

my $q = $node->safe_psql('postgres', q{SELECT malachi.create_topic('quiet')});
$node->safe_psql('postgres',
	q{SELECT malachi.alter_topic('quiet', '{"segment_max_age": "1 second"}')});
$node->safe_psql('postgres', q{SELECT malachi.produce('quiet', 'k', 'v'::text)});
my $t0 = time;
ok( $node->poll_query_until('postgres',
		"SELECT state = 'sealed' FROM malachi.segments WHERE range_id = $q AND seq = 0"),
	'the sweeper seals the quiet head by itself');
my $took = time - $t0;
note sprintf('sealed %.2f s after the produce', $took);
# its age (1 s) plus two intervals, and ten seconds for a loaded machine
# (a sweeper that kept another schedule would take far longer)
cmp_ok($took, '<', 1 + 2 * $interval + 10, 'within its max age and two sweep intervals');
is($node->safe_psql('postgres',
		q{SELECT passes > 0 AND last_error IS NULL FROM malachi.sweeper_status}),
	't', 'sweeper_status shows passes and no error');

#---- the scrub finds a flipped byte ----

my $c = $node->safe_psql('postgres', q{SELECT malachi.create_topic('scrub')});
for my $b (1 .. 2)
{
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('scrub', array_agg('k'::text), array_agg(repeat('x', 200) || i))
		  FROM generate_series(1, 100) i});
	$node->safe_psql('postgres', "SELECT malachi.roll($c)");
}
my ($bad, $good) = split /\n/, $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $c ORDER BY seq");

flip_byte(segment_file($node, $bad), 64 + 5000);

ok( $node->poll_query_until('postgres',
		"SELECT corrupt IS NOT NULL FROM malachi.segments WHERE segment_id = $bad"),
	'the scrub marks the damaged segment corrupt');
like($node->safe_psql('postgres',
		"SELECT corrupt FROM malachi.segments WHERE segment_id = $bad"),
	qr/does not check|corrupt/, 'saying what is wrong');
is($node->safe_psql('postgres',
		"SELECT scrubbed_at IS NOT NULL AND corrupt IS NULL FROM malachi.segments WHERE segment_id = $good"),
	't', 'the sound segment is scrubbed and not marked');
ok($node->wait_for_log(qr/segment $bad is corrupt/), 'the damage is logged');
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM malachi.read($c, 0, 1000)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'reading the damaged segment fails');
like($err, qr/XX001/, 'with data_corrupted');
is($node->safe_psql('postgres',
		"SELECT count(*), min(\"offset\") FROM malachi.read($c, 100, 1000)"),
	'100|100', 'the other sealed segment still reads');

#---- kill -9 during a pass ----

my $k = $node->safe_psql('postgres', q{SELECT malachi.create_topic('doomed')});
for my $s (1 .. 20)
{
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('doomed', array_agg('k'::text), array_agg('r' || i))
		  FROM generate_series(1, 10) i});
	$node->safe_psql('postgres', "SELECT malachi.roll($k)");
}
$node->safe_psql('postgres', q{SELECT malachi.produce('doomed', 'k', 'last'::text)});

# hold the pass after its first deletion, inside its transaction
my $script = $node->basedir . '/holder.sql';
MalachiTest::write_file($script, qq{
SELECT pg_advisory_lock(77000012);
\\echo locked
SELECT pg_sleep(600);
});
my $holder = start_client($node, $script);
my ($locked) = wait_for_acks(1, 60, qr/^locked$/, $holder);
is($locked, 1, 'a session holds the pause point retention-deleted');
$node->append_conf('postgresql.conf', "malachi.inject_wait = 'retention-deleted'");
$node->reload;

$node->safe_psql('postgres',
	q{SELECT malachi.alter_topic('doomed', '{"retention_bytes": 1}')});
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE backend_type = 'malachi sweeper' AND wait_event_type = 'Lock'}),
	'the sweeper waits in its retention step');

# no pass after the restart until the checks below have looked
$node->append_conf('postgresql.conf', "malachi.sweep_interval = '1h'\nmalachi.inject_wait = ''");
kill9_node($node, everything => 1, label => 'mid-pass');
$holder->{h}->finish;
$node->start;

# the files and rows agree right after the restart
sub segment_rows
{
	return sort { $a <=> $b } split /\n/,
	  $node->safe_psql('postgres', 'SELECT segment_id FROM malachi.segment_meta');
}
sub segment_files
{
	opendir(my $d, $node->data_dir . '/malachi') or die "opendir: $!";
	my @ids = map { /^([0-9a-f]{16})\.seg$/ ? hex($1) : () } readdir($d);
	closedir($d);
	return sort { $a <=> $b } @ids;
}
my @missing = grep { !-e segment_file($node, $_) } segment_rows();
is_deeply(\@missing, [], 'after the crash every segment row has its file');
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($k, 0, 1000)"),
	'201', 'the interrupted pass deleted nothing: the range reads whole');

# the next passes finish the retention: only the head stays
$node->append_conf('postgresql.conf', "malachi.sweep_interval = '${interval}s'");
$node->reload;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM malachi.segment_meta WHERE range_id = $k"),
	'a later pass deletes the segments past retention');
$node->safe_psql('postgres', 'SET malachi.orphan_grace = 0; SELECT malachi.run_maintenance()');
is_deeply([ segment_files() ], [ segment_rows() ],
	'every segment file has its row and every row its file');
is($node->safe_psql('postgres',
		"SELECT string_agg(\"offset\" || ':' || convert_from(value, 'UTF8'), ',') FROM malachi.read($k, 0, 1000)"),
	'200:last', 'the range reads from its first remaining offset');
is($node->safe_psql('postgres', q{SELECT malachi.produce('doomed', 'k', 'after'::text)}),
	$k, 'producing goes on');
is($node->safe_psql('postgres', "SELECT max(\"offset\") FROM malachi.read($k, 200, 10)"),
	'201', 'at the range\'s end');

#---- deleted files are not kept open ----

# a session that read a range's segments and then sits idle must not keep
# their files allocated once retention deletes them
my $h = $node->safe_psql('postgres', q{SELECT malachi.create_topic('held')});
for my $s (1 .. 5)
{
	$node->safe_psql('postgres',
		q{SELECT malachi.produce('held', 'k', repeat('v', 1000))});
	$node->safe_psql('postgres', "SELECT malachi.roll($h)");
}
# deleted files are unlinked, not renamed for recycling, so that one still
# held open shows as "(deleted)" below
$node->append_conf('postgresql.conf', 'malachi.max_spare_segments = 0');
$node->reload;
my $rscript = $node->basedir . '/reader.sql';
MalachiTest::write_file($rscript, qq{
SELECT count(*) FROM malachi.read($h, 0, 1000);
\\echo read
SELECT pg_sleep(600);
});
my $reader = start_client($node, $rscript);
my ($read) = wait_for_acks(1, 60, qr/^read$/, $reader);
is($read, 1, 'a session read the range and sits idle');
$node->safe_psql('postgres', q{
	SELECT malachi.alter_topic('held', '{"retention_bytes": 1}');
	SELECT malachi.run_maintenance();});
is($node->safe_psql('postgres',
		"SELECT count(*) FROM malachi.segment_meta WHERE range_id = $h"),
	'1', 'retention deleted all but the newest segment');
my ($postmaster) = MalachiTest::file_lines($node->data_dir . '/postmaster.pid');
my @held;
for my $pid (server_pids($node, $postmaster))
{
	for my $fd (glob("/proc/$pid/fd/*"))
	{
		my $target = readlink($fd) // next;
		push @held, "$pid: $target" if $target =~ m{/malachi/[0-9a-f]{16}\.seg \(deleted\)$};
	}
}
is_deeply(\@held, [], 'no server process keeps a deleted segment file open');
kill 'TERM', $reader->{pid};
$reader->{h}->finish;

$node->stop;
done_testing();
