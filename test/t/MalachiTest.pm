# MalachiTest.pm: helpers shared by the TAP tests: a node with malachi
# ready, and what the tests that run psql clients under load and crash the
# node use (004_crash.pl, 005_recovery.pl, 007_transactional.pl).
#
# The runner (test/run-suites.sh) puts test/t on prove's include path, so a
# test says "use MalachiTest;" and gets every helper below.  Helpers that
# touch a node take it as their first argument; none keeps state.
package MalachiTest;

use strict;
use warnings;

use Cwd qw(realpath);
use Exporter 'import';
use IPC::Run;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(
  malachi_node topic_range produce_calls session_in_state session_asleep
  produce_aborted
  commit_held
  seed_random write_file file_lines first_lines segment_file flip_byte
  file_bytes put_bytes
  segment_dir_files void_flag
  start_client wait_for_acks check_client
  pid_running server_pids kill9_node crash_at_seal_fenced
  read_held_at read_let_go paused_session
);

#---- nodes ----

# malachi_node(NAME, CONF): a started node with malachi preloaded and the
# extension created; the sweeper's pass daily (out of the test's way), and
# the lines of CONF added to postgresql.conf.
sub malachi_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'malachi'
malachi.sweep_interval = '1d'
} . ($conf // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
	return $node;
}

# topic_range(NODE, TOPIC): create a topic of one range; its range id.
sub topic_range
{
	my ($node, $topic) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT malachi.create_topic('$topic', 1);
		SELECT malachi.active_range_ids('$topic');}) =~ s/.*\n//sr;
}

# produce_calls(NODE, TOPIC, CALLS, RECORDS, BYTES): CALLS produce_batch
# calls in one statement, each of RECORDS records of key 'k' and a value
# of BYTES bytes.
sub produce_calls
{
	my ($node, $topic, $calls, $records, $bytes) = @_;
	$node->safe_psql('postgres', qq{
		DO \$\$
		BEGIN
			FOR b IN 1 .. $calls LOOP
				PERFORM malachi.produce_batch('$topic',
					array_fill('k'::text, ARRAY[$records]),
					array_fill(repeat('v', $bytes), ARRAY[$records]));
			END LOOP;
		END \$\$;});
	return;
}

# session_in_state(NODE, APPLICATION_NAME, STATE): wait until the one
# session of that application_name is in STATE ('active', 'idle'); false
# after the usual timeout.
sub session_in_state
{
	my ($node, $app, $state) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE application_name = '$app' AND state = '$state'});
}

# session_asleep(NODE, APP): wait until the session named APP is asleep in
# a malachi wait (a long poll on its head's condition variable, say), not
# merely running its statement.  True once it is.
sub session_asleep
{
	my ($node, $app) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE application_name = '$app' AND state = 'active'
		   AND wait_event_type = 'Extension'});
}

# produce_aborted(NODE, TOPIC, KEY, VALUE): a transaction whose record is
# appended at its COMMIT and which then fails (failure point
# fail-after-flush): the batch is written, and void.  Its stderr.
sub produce_aborted
{
	my ($node, $topic, $key, $value) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		BEGIN;
		SET LOCAL malachi.inject_wait = 'fail-after-flush';
		SELECT malachi.produce('$topic', '$key', '$value'::text);
		COMMIT;});
	return $err;
}

# commit_held(NODE, SQL): a session whose transaction runs SQL (a
# transactional produce) and then waits in its COMMIT at the pause point
# after-flush: its batches are written and synced, and in doubt.  Returns
# the holder of the pause point's advisory lock (release or quit it to let
# the COMMIT go on), the session, and whether the COMMIT waits within the
# usual timeout.
sub commit_held
{
	my ($node, $sql) = @_;
	my $key = 77000007;    # advisory lock of pause point after-flush
	my $holder = $node->background_psql('postgres');
	$holder->query_safe("SELECT pg_advisory_lock($key)");
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	$session->query_safe(q{SET malachi.produce_mode = 'transactional'});
	$session->query_safe(q{SET malachi.inject_wait = 'after-flush'});
	$session->query_safe('BEGIN');
	$session->query_safe($sql);
	$session->query_until(qr/committing/, "\\echo committing\nCOMMIT;\n");
	my $waits = $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_locks
		 WHERE locktype = 'advisory' AND objid = $key AND NOT granted});
	return ($holder, $session, $waits);
}

#---- randomness ----

# seed_random(DEFAULT): seed rand() with $MALACHI_CRASH_SEED, else DEFAULT,
# and say which seed it was, so that a failing random schedule can be
# replayed.  Returns the seed.
sub seed_random
{
	my ($default) = @_;
	my $seed = $ENV{MALACHI_CRASH_SEED} // $default;
	srand($seed);
	note "random seed $seed (MALACHI_CRASH_SEED replays another)";
	return $seed;
}

#---- files ----

# write_file(PATH, TEXT): write TEXT to PATH (replacing it) and return
# PATH, so that a script can be written where it is passed.  Dies when the
# file cannot be written: a test must not go on with a partial script.
sub write_file
{
	my ($path, $text) = @_;
	open my $fh, '>', $path or die "cannot write $path: $!";
	print $fh $text;
	close $fh or die "cannot write $path: $!";
	return $path;
}

# file_lines(PATH): the complete lines of a file, none when it does not
# exist yet.  A line still being written (no newline yet) is left out, so
# a client's output can be polled while the client runs.
sub file_lines
{
	my ($path) = @_;
	return () unless -e $path;
	my $text = slurp_file($path);
	$text =~ s/[^\n]*\z//;
	return split /\n/, $text;
}

# first_lines(ITEM...): the first ten items, one a line, so that a failed
# check's diagnostics stay readable however much went wrong.
sub first_lines
{
	my @l = @_;
	return join("\n", @l[ 0 .. ($#l < 9 ? $#l : 9) ]);
}

# segment_dir_files(NODE, RE): the number of files in NODE's segment
# directory whose names match RE.
sub segment_dir_files
{
	my ($node, $re) = @_;
	my $dir = $node->data_dir . '/malachi';
	opendir(my $d, $dir) or die "opendir $dir: $!";
	my $n = grep { /$re/ } readdir($d);
	closedir $d;
	return $n;
}

# segment_file(NODE, SEGMENT_ID): the path of a segment's file, for tests
# that damage, hide or remove it while the node is down.
sub segment_file
{
	my ($node, $id) = @_;
	return sprintf('%s/malachi/%016x.seg', $node->data_dir, $id);
}

# file_bytes(PATH, POSITION, LENGTH): LENGTH bytes of a file at POSITION
# (dies if the file is shorter).
sub file_bytes
{
	my ($path, $where, $len) = @_;
	open(my $fh, '<', $path) or die "open $path: $!";
	binmode $fh;
	seek($fh, $where, 0) or die "seek $path to $where: $!";
	read($fh, my $bytes, $len) == $len or die "read $path at $where: $!";
	close($fh);
	return $bytes;
}

# put_bytes(PATH, POSITION, BYTES): write BYTES over a file at POSITION.
sub put_bytes
{
	my ($path, $where, $bytes) = @_;
	open(my $fh, '+<', $path) or die "open $path: $!";
	binmode $fh;
	seek($fh, $where, 0) or die "seek $path to $where: $!";
	print $fh $bytes or die "write $path at $where: $!";
	close($fh) or die "close $path: $!";
	return;
}

# flip_byte(PATH, POSITION): flip one bit of the byte at POSITION of a
# file, in place: damage a segment the way a failing disk would.
sub flip_byte
{
	my ($path, $where) = @_;
	put_bytes($path, $where, chr(ord(file_bytes($path, $where, 1)) ^ 0x10));
	return;
}

# void_flag(PATH, POSITION): the VOID flag of the batch whose header
# starts at POSITION of a segment file: bit 0 of the header's byte 12.
sub void_flag
{
	my ($path, $where) = @_;
	return ord(file_bytes($path, $where + 12, 1)) & 1;
}

#---- load clients ----

# start_client(NODE, SCRIPT, FIELD => VALUE...): start psql on the script
# file SCRIPT (ON_ERROR_STOP) against database postgres of NODE, in the
# background.  Its stdout, line-buffered so that it can be polled with
# file_lines while psql runs, goes to SCRIPT with .out for .sql, its
# stderr to the same with .err.  Returns a hash of the FIELDs and out,
# err, h (the IPC::Run harness: finish it once the node is down) and pid.
sub start_client
{
	my ($node, $script, %c) = @_;
	my $base = $script =~ s/\.sql$//r;
	$c{out} = "$base.out";
	$c{err} = "$base.err";
	$c{h} = IPC::Run::start(
		[
			'stdbuf', '-oL', 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-f', $script
		],
		'<', \undef, '>', $c{out}, '2>', $c{err});
	$c{pid} = $c{h}->{KIDS}[0]{PID};
	return \%c;
}

# wait_for_acks(TARGET, SECONDS, PATTERN, CLIENT...): poll the clients'
# output until the lines matching PATTERN (the acknowledgements the
# scripts echo) number TARGET, every client stopped, or SECONDS passed;
# the kill point of a crash test.  Returns (acknowledgements seen, clients
# still running).
sub wait_for_acks
{
	my ($target, $seconds, $pattern, @clients) = @_;
	my $deadline = time + $seconds;
	my ($acks, $running);
	while (1)
	{
		$acks = grep { /$pattern/ } map { file_lines($_->{out}) } @clients;
		$running = grep { pid_running($_->{pid}) } @clients;
		last if $acks >= $target || !$running || time > $deadline;
		usleep(10_000);
	}
	return ($acks, $running);
}

# check_client(CLIENT, NAME): a test, NAME, that the client still runs or
# ran its script to the end (it echoes "done" last): psql stops early only
# on an error, whose stderr is shown.  The process is looked at before its
# output: a client that ends between the two has written "done" by then.
sub check_client
{
	my ($c, $name) = @_;
	my $running = pid_running($c->{pid});
	my $done = grep { $_ eq 'done' } file_lines($c->{out});
	ok($running || $done, $name)
	  or diag(slurp_file($c->{err}));
	return;
}

#---- processes ----

# pid_running(PID): the process exists and is not a zombie (kill 0 is true
# for a zombie, which has exited but not been reaped).
sub pid_running
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh> // '';
	close $fh;
	return $stat =~ /^\d+ \(.*\) ([A-Za-z])/s && $1 ne 'Z';
}

# server_pids(NODE, POSTMASTER): live processes of NODE but its postmaster
# POSTMASTER.  Every server process works in the data directory; a cluster
# name, or the parent pid of a postmaster that is gone, may belong to
# another node running meanwhile.
sub server_pids
{
	my ($node, $postmaster) = @_;
	my $pgdata = realpath($node->data_dir);
	return grep {
		$_ != $postmaster
		  && (readlink("/proc/$_/cwd") // '') eq $pgdata
		  && pid_running($_)
	} map { m{^/proc/(\d+)$} ? $1 : () } glob('/proc/[0-9]*');
}

# kill9_node(NODE, OPTION => VALUE...): kill -9 the postmaster of NODE,
# then wait until it is reaped (a start that finds its pid alive, even as
# a zombie, refuses to run) and every other server process has exited
# (they still hold the shared memory).  Alone, the postmaster leaves its
# backends to finish the call they are in: they may still acknowledge.
# Options:
#   everything => 1  kill -9 all its children too, right after it: appends
#                    in flight then die half done, as in a machine crash
#   label => TEXT    test that the processes were gone in time, the test
#                    named "TEXT: the killed server's processes are gone
#                    within Ns" (without a label, no test)
#   seconds => N     how long they may take (default 30)
# Processes still there then are killed and given as long again, so that
# the node can start.  The caller starts it again.
sub kill9_node
{
	my ($node, %opt) = @_;
	my $seconds = $opt{seconds} // 30;
	my $label = $opt{label} // 'crash';
	my ($postmaster) = file_lines($node->data_dir . '/postmaster.pid');
	my @children = server_pids($node, $postmaster);
	note "$label: kill -9 postmaster $postmaster"
	  . ($opt{everything} ? ' and its ' : ', not its ')
	  . scalar(@children)
	  . ' other server processes';
	$node->kill9;
	kill 9, @children if $opt{everything};

	my $deadline = time + $seconds;
	my @left;
	while (1)
	{
		@left =
		  grep { pid_running($_) } @children, server_pids($node, $postmaster);
		last if !kill(0, $postmaster) && !@left;
		last if time > $deadline;
		usleep(20_000);
	}
	my $pm_gone = !kill(0, $postmaster);
	if (defined $opt{label})
	{
		ok($pm_gone && !@left,
			"$label: the killed server's processes are gone within ${seconds}s")
		  or diag("still there: postmaster "
			  . ($pm_gone ? 'gone' : 'present')
			  . ', others: '
			  . join('; ',
				map { "$_ " . ((eval { slurp_file("/proc/$_/cmdline") } // '') =~ tr/\0/ /r) }
				  @left));
	}
	# a wedged server process would keep the next start from running
	kill 9, @left if @left;
	while ((kill(0, $postmaster) || grep { pid_running($_) } @left)
		&& time < $deadline + $seconds)
	{
		usleep(20_000);
	}
	return;
}

# crash_at_seal_fenced(NODE, RANGE): roll RANGE, hold the roll between
# its fence (seal trailer written and synced) and recording the seal (the
# pause point seal-fenced, advisory lock 77000006), and kill -9 the node
# there.  The caller starts it again.
sub crash_at_seal_fenced
{
	my ($node, $range) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('SELECT pg_advisory_lock(77000006)');
	my $roller = $node->background_psql('postgres', on_error_stop => 0);
	$roller->query_safe(q{SET malachi.inject_wait = 'seal-fenced'});
	$roller->query_until(qr/started/, qq{\\echo started\nSELECT malachi.roll($range);\n});
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_locks
		 WHERE locktype = 'advisory' AND objid = 77000006 AND NOT granted})
	  or die 'the roll did not reach its pause point';
	kill9_node($node, seconds => 60);
	$roller->{run}->kill_kill;
	$holder->{run}->kill_kill;
	return;
}

# read_held_at(NODE, POINT, KEY, RANGE): a session reading RANGE (its
# first 10 records), held at the pause point POINT, whose advisory lock KEY
# a second session holds.  Returns (HOLDER, READER, WAITING): WAITING says
# whether the reader was seen waiting at the point.
sub read_held_at
{
	my ($node, $point, $key, $range) = @_;
	my $holder = $node->background_psql('postgres');
	$holder->query_safe("SELECT pg_advisory_lock($key)");
	my $reader = $node->background_psql('postgres', on_error_stop => 0);
	$reader->query_until(qr/start/, qq{
	SET malachi.inject_wait = '$point';
	\\echo start
	SELECT count(*) FROM malachi.read($range, 0, 10);
});
	my $waiting = $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%malachi.read(%'});
	return ($holder, $reader, $waiting);
}

# paused_session(NODE, NAME, POINT, KEY, SQL): a background session named
# NAME that runs SQL with malachi.inject_wait = POINT, once it waits at that
# pause point for advisory lock KEY (which the caller holds).  Dies if it
# does not get there.
sub paused_session
{
	my ($node, $name, $point, $key, $sql) = @_;
	my $p = $node->background_psql('postgres', on_error_stop => 0);
	$p->query_safe(qq{SET application_name = '$name'; SET malachi.inject_wait = '$point'});
	$p->query_until(qr/started/, qq{\\echo started\n$sql\n});
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		 WHERE l.locktype = 'advisory' AND l.objid = $key AND NOT l.granted
		   AND a.application_name = '$name'})
	  or die "$name did not reach $point";
	return $p;
}

# read_let_go(NODE, HOLDER, READER, KEY): release the reader read_held_at
# holds; true once it has gone on.  Both sessions end.
sub read_let_go
{
	my ($node, $holder, $reader, $key) = @_;
	$holder->query_safe("SELECT pg_advisory_unlock($key)");
	my $gone_on = $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%malachi.read(%'});
	$reader->quit;
	$holder->quit;
	return $gone_on;
}

1;
