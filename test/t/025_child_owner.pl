# 025_child_owner.pl: a declared child runs as its owner, never as more;
# the supervisor's own slips.
#
#   1. A child declared by alice (a NOLOGIN role, malachi_admin and
#      malachi_consumer) inserts its records into a table with a deferred
#      constraint trigger.  The trigger fires at the child's commit: it
#      runs as alice, and its ALTER ROLE alice SUPERUSER is refused.  (The
#      child connects as the bootstrap superuser; before the fix its commit
#      ran as that superuser.)
#   2. A child registered by a supervisor that then exits, and undeclared
#      before it started: when it starts, the next supervisor has freed its
#      slot, and it stops instead of consuming forever.  The child is held
#      at the pause point child-starting (advisory lock 77000011).
#   3. clear_declared before the supervisor has loaded its evidence (here:
#      malachi.database names no database, so the workers never connect)
#      still outbids the evidence file: once the supervisor runs again the
#      hub is not parked.
#   4. A manifest copy whose entry names no owner is not restored (the
#      supervisor runs as a superuser and never guesses an owner); with the
#      owner it is restored, running as that owner.  Nor is a copy that
#      another OS user could have written: in a directory, or a file, that
#      others may write to (before, either was restored).
#   5. The child's own query qualifies every name: an aggregate
#      public.array_agg(malachi.record) that a consumer-only role created
#      is never run by the superuser's child (before, it was: an exact
#      match wins over pg_catalog's polymorphic array_agg).
#   6. A running child reloads the configuration: its function sees a
#      work_mem set by ALTER SYSTEM and pg_reload_conf() (before, children
#      ignored SIGHUP).
#   7. A supervisor pass that fails (here: pg_cancel_backend) is logged and
#      the next pass runs: the supervisor and its children go on (before,
#      the supervisor exited, and its successor stopped every child).
#   8. A manifest copy is of the lists the supervisor's pass read and
#      checked: an older version committed by hand while the pass waits
#      at pause point manifest-writing (77000020) is not what it copies
#      (before, the copy was read anew and got the older version, which
#      then overwrote the good copy).
#   9. DROP EXTENSION and CREATE EXTENSION on the running server: the
#      supervisor restores none of the dropped installation's hubs from
#      their copies, then or after a restart (before, it restored every
#      one of them); adopt_manifest still takes such a copy.
use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('child_owner', q{
max_worker_processes = 16
malachi.supervisor_interval = '1s'
malachi.inject_wait = 'manifest-writing'
});
my $dir = $node->basedir . '/manifests';
mkdir $dir or die "mkdir $dir: $!";

$node->safe_psql('postgres', q{
CREATE ROLE alice NOLOGIN;
GRANT malachi_admin, malachi_consumer TO alice;
CREATE SCHEMA app AUTHORIZATION alice;
SELECT malachi.create_topic('t');
SET ROLE alice;
CREATE TABLE app.seen ("offset" bigint NOT NULL);
CREATE TABLE app.audit (who name NOT NULL, escalated bool NOT NULL);
CREATE FUNCTION app.handle(batch malachi.record[]) RETURNS void
LANGUAGE sql AS $$ INSERT INTO app.seen SELECT r."offset" FROM unnest(batch) r $$;
CREATE FUNCTION app.audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	escalated bool := true;
BEGIN
	BEGIN
		ALTER ROLE alice SUPERUSER;
	EXCEPTION WHEN insufficient_privilege THEN
		escalated := false;
	END;
	INSERT INTO app.audit VALUES (current_user, escalated);
	RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER seen_audit AFTER INSERT ON app.seen
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION app.audit();
});

# declare(HUB, CHILD, GROUP): alice declares a consumer child of topic t
sub declare
{
	my ($hub, $child, $group) = @_;
	return $node->safe_psql('postgres', qq{
		SET ROLE alice;
		SELECT malachi.declare_child('$hub', '$child',
			'{"kind": "consumer", "topic": "t", "group": "$group",
			  "function": "app.handle", "wait": "100ms"}')});
}

sub child_pids
{
	return $node->safe_psql('postgres',
		q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
		   WHERE backend_type = 'malachi child'});
}

sub supervisor_pid
{
	return $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'malachi supervisor'});
}

#---- 1. the child's commit runs as its owner ----

declare('h1', 'c1', 'g1');
$node->safe_psql('postgres',
	q{SELECT malachi.produce_batch('t', ARRAY['a', 'b', 'c'], ARRAY['1', '2', '3']::text[])});
ok( $node->poll_query_until('postgres', q{SELECT count(*) = 3 FROM app.audit}),
	'owner: the deferred trigger fired for each record');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(DISTINCT who || ':' || escalated, ',') FROM app.audit}),
	'alice:false',
	'owner: the trigger ran at commit as alice, and ALTER ROLE SUPERUSER was refused');
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'alice'}),
	'f', 'owner: alice is not a superuser');
is($node->safe_psql('postgres', q{SELECT count(*) FROM app.seen}),
	'3', 'owner: the batch committed once');
$node->safe_psql('postgres', q{SET ROLE alice; SELECT malachi.undeclare_child('h1', 'c1')});
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'malachi child'}), 'owner: undeclared, the child stops');

#---- 2. a child registered by a supervisor that exited ----

$node->safe_psql('postgres', q{
	ALTER SYSTEM SET malachi.inject_wait = 'child-starting';
	SELECT pg_reload_conf();});
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(77000011)');
declare('h2', 'c2', 'g2');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE backend_type = 'malachi child' AND wait_event_type = 'Lock'}),
	'orphan: the child waits at child-starting');
my $orphan = child_pids();
my $old_supervisor = supervisor_pid();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_supervisor)");
ok( $node->poll_query_until('postgres', qq{
		SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $old_supervisor)}),
	'orphan: the supervisor that registered it is gone');
$node->safe_psql('postgres', q{SET ROLE alice; SELECT malachi.undeclare_child('h2', 'c2')});
my $offset = -s $node->logfile;
ok( $node->poll_query_until('postgres', qq{
		SELECT EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'malachi supervisor'
		                  AND pid <> $old_supervisor)
		   AND NOT EXISTS (SELECT FROM malachi.children WHERE hub = 'h2')}),
	'orphan: a new supervisor runs, and h2 has no child');
$holder->query_safe('SELECT pg_advisory_unlock(77000011)');
$holder->quit;
ok( $node->poll_query_until('postgres', qq{
		SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $orphan)}),
	'orphan: released, the child of the old supervisor stops');
ok($node->log_contains(qr/a child in slot \d+ stops before it started: its slot is no longer its own/, $offset),
	'orphan: the log says why');
$node->safe_psql('postgres',
	q{SELECT malachi.produce_batch('t', ARRAY['d'], ARRAY['4']::text[])});
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.committed_offsets('g2', 't')}),
	'0', 'orphan: the undeclared child consumed nothing');
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET malachi.inject_wait;
	SELECT pg_reload_conf();});

#---- 3. clear_declared before the supervisor loaded its evidence ----

declare('h3', 'c3', 'g3');
$node->safe_psql('postgres', q{SET ROLE alice; SELECT malachi.undeclare_child('h3', 'c3')});
is(declare('h3', 'c3', 'g3'), '3', 'evidence: hub h3 at version 3');
my $evidence = $node->data_dir . '/malachi/declared.evidence';
my $line = unpack('H*', 'h3') . ' 3';
ok(wait_for(sub { -e $evidence && slurp_file($evidence) =~ /^\Q$line\E$/m }),
	'evidence: the supervisor saved version 3 of h3');
$node->safe_psql('postgres', q{
	DELETE FROM malachi.declared_children WHERE hub = 'h3';
	DELETE FROM malachi.declared_hubs WHERE hub = 'h3';});
$node->stop;
$node->append_conf('postgresql.conf', "malachi.database = 'no_such_database'\n");
$node->start;
is($node->safe_psql('postgres', q{SELECT malachi.clear_declared('h3')}),
	'4', 'evidence: with no supervisor running, clear_declared outbids the evidence file');
$node->stop;
$node->append_conf('postgresql.conf', "malachi.database = 'postgres'\n");
$node->start;
declare('h4', 'c4', 'g4');
ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h4' AND state = 'running')}),
	'evidence: the supervisor runs again');
is($node->safe_psql('postgres', q{SELECT malachi.declared_parked('h3')}),
	'f', 'evidence: the cleared hub is not parked');
$node->safe_psql('postgres', q{SET ROLE alice; SELECT malachi.undeclare_child('h4', 'c4')});

#---- 4. a manifest copy restores owners it names, and guesses none ----

$node->safe_psql('postgres', qq{
	ALTER SYSTEM SET malachi.manifest_directory = '$dir';
	SELECT pg_reload_conf();});
my $file5 = "$dir/hub-" . unpack('H*', 'h5') . '.json';
my $file6 = "$dir/hub-" . unpack('H*', 'h6') . '.json';
declare('h5', 'c5', 'g5');
declare('h6', 'c6', 'g6');
ok(wait_for(sub { -e $file5 && -e $file6 }), 'manifest: copies of h5 and h6 written');
my $m = decode_json(slurp_file($file5));
is($m->{entries}[0]{owner}, 'alice', 'manifest: the copy names the owner');
delete $m->{entries}[0]{owner};
write_file($file5, encode_json($m) . "\n");
$node->safe_psql('postgres', q{
	DELETE FROM malachi.declared_children WHERE hub IN ('h5', 'h6');
	DELETE FROM malachi.declared_hubs WHERE hub IN ('h5', 'h6');});
# a copy another OS user could have written is not restored: a directory
# others may write to, then a copy others may write to
# refused_at_restart(PATH, WHAT): after a restart the log says the copies
# at PATH may have been written by others, and h6 is not restored
sub refused_at_restart
{
	my ($path, $what) = @_;
	my $off = -s $node->logfile;
	$node->restart;
	ok( wait_for(sub {
			$node->log_contains(
				qr/did not restore declared lists from "\Q$path\E": operating system users other than the server's may write to it/,
				$off) }),
		"manifest: $what others may write to is refused, and the log says why");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.declared_children WHERE hub = 'h6'}),
		'0', 'manifest: h6 is not restored from it');
	return;
}
chmod 0777, $dir or die "chmod $dir: $!";
refused_at_restart($dir, 'a directory');
# nor does it write a copy there, once the directory is fixed it does
my $filew = "$dir/hub-" . unpack('H*', 'hw') . '.json';
declare('hw', 'cw', 'gw');
ok( wait_for(sub {
		$node->log_contains(
			qr/did not write manifest copies to "\Q$dir\E": operating system users other than the server's may write to it/,
			$offset) }),
	'manifest: no copy is written into a directory others may write to, and the log says why');
ok(!-e $filew, 'manifest: hw has no copy there');
chmod 0700, $dir or die "chmod $dir: $!";
ok(wait_for(sub { -e $filew }), 'manifest: the copy of hw is written once the directory is fixed');
$node->safe_psql('postgres', q{SET ROLE alice; SELECT malachi.undeclare_child('hw', 'cw')});
chmod 0666, $file6 or die "chmod $file6: $!";
refused_at_restart($file6, 'a copy');
chmod 0600, $file6 or die "chmod $file6: $!";
$offset = -s $node->logfile;
$node->restart;
ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h6' AND state = 'running')}),
	'manifest: h6 restored from its copy, its child runs');
is($node->safe_psql('postgres', q{SELECT owner FROM malachi.declared_children WHERE hub = 'h6'}),
	'alice', 'manifest: as the owner the copy names');
is($node->safe_psql('postgres', q{SELECT count(*) FROM malachi.declared_children WHERE hub = 'h5'}),
	'0', 'manifest: h5, whose entry names no owner, is not restored');
ok($node->log_contains(qr/did not restore the declared list of hub "h5"/, $offset),
	'manifest: the log says so');

#---- 5. the child's own query names nothing another role can replace ----

# eve may only consume, but can create in public (a database carried over
# from PostgreSQL 14 or older grants that to everyone): her aggregate
# public.array_agg(malachi.record) is an exact match for the child's
# array_agg(r), preferred to pg_catalog's polymorphic one, and would run
# as the child's owner, here the superuser
$node->safe_psql('postgres', q{
CREATE ROLE eve NOLOGIN;
GRANT malachi_consumer TO eve;
GRANT CREATE ON SCHEMA public TO eve;
CREATE TABLE public.hijacked (who name);
GRANT INSERT ON public.hijacked TO eve;
SET ROLE eve;
CREATE FUNCTION public.grab(state malachi.record[], r malachi.record)
RETURNS malachi.record[] LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.hijacked VALUES (current_user);
	RETURN state || r;
END $$;
CREATE AGGREGATE public.array_agg(malachi.record)
	(sfunc = public.grab, stype = malachi.record[], initcond = '{}');
RESET ROLE;
CREATE TABLE public.su_seen ("offset" bigint, work_mem text);
CREATE FUNCTION public.su_handle(batch malachi.record[]) RETURNS void
LANGUAGE sql AS $$
	INSERT INTO public.su_seen SELECT r."offset", current_setting('work_mem') FROM unnest(batch) r
$$;
SELECT malachi.create_topic('su');
SELECT malachi.declare_child('h7', 'c7',
	'{"kind": "consumer", "topic": "su", "group": "su", "function": "public.su_handle", "wait": "100ms"}');
SELECT malachi.produce_batch('su', ARRAY['a', 'b'], ARRAY['1', '2']::text[]);});
ok( $node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM public.su_seen}),
	'search_path: the superuser\'s child consumed its records');
is($node->safe_psql('postgres', q{SELECT count(*) FROM public.hijacked}),
	'0', 'search_path: eve\'s array_agg never ran in the child');

#---- 6. a running child reloads the configuration ----

my $pid7 = $node->safe_psql('postgres', q{SELECT pid FROM malachi.children WHERE hub = 'h7'});
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET work_mem = '7MB';
	SELECT pg_reload_conf();});
ok( $node->poll_query_until('postgres', q{
		SELECT malachi.produce('su', 'k', 'w'::text) IS NOT NULL
		   AND EXISTS (SELECT FROM public.su_seen WHERE work_mem = '7MB')}),
	'reload: the running child\'s function sees the reloaded work_mem');
is($node->safe_psql('postgres', q{SELECT pid FROM malachi.children WHERE hub = 'h7'}),
	$pid7, 'reload: without a restart of the child');

#---- 7. an error in a supervisor pass ends neither it nor its children ----

my $sup = supervisor_pid();
$offset = -s $node->logfile;
$node->safe_psql('postgres', qq{SELECT pg_cancel_backend($sup)});
ok($node->wait_for_log(qr/canceling statement due to user request/, $offset),
	'cancel: the supervisor was interrupted');
# a new declaration: a pass must run it
$node->safe_psql('postgres', q{
	SELECT malachi.declare_child('h8', 'c8',
		'{"kind": "consumer", "topic": "su", "group": "su8", "function": "public.su_handle", "wait": "100ms"}')});
ok( $node->poll_query_until('postgres',
		q{SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h8' AND state = 'running')}),
	'cancel: the next pass runs a new child');
is(supervisor_pid(), $sup, 'cancel: the same supervisor goes on');
is($node->safe_psql('postgres', q{SELECT pid FROM malachi.children WHERE hub = 'h7'}),
	$pid7, 'cancel: the running child was not stopped');
ok($node->log_contains(qr/malachi supervisor: a pass failed: canceling statement/, $offset),
	'cancel: the log says the pass failed');

#---- 8. a manifest copy is of the list the pass checked ----

# pause point manifest-writing (set in postgresql.conf above; passed
# through while nobody holds its lock): the supervisor about to write a
# copy, the lists read and judged
my $key = 77000020;
my $file8 = "$dir/hub-" . unpack('H*', 'h8') . '.json';
ok( wait_for(sub {
		-e $file8 && decode_json(slurp_file($file8))->{version} ==
		  $node->safe_psql('postgres', q{SELECT version FROM malachi.declared_hubs WHERE hub = 'h8'}) }),
	'snapshot: every copy is written (h8\'s last)');
$holder = $node->background_psql('postgres');
$holder->query_safe("SELECT pg_advisory_lock($key)");
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT malachi.declare_child('hs', 'a',
		'{"kind": "consumer", "topic": "su", "group": "hsa", "function": "public.su_handle", "wait": "100ms"}');
	SELECT malachi.declare_child('hs', 'b',
		'{"kind": "consumer", "topic": "su", "group": "hsb", "function": "public.su_handle", "wait": "100ms"}');
	COMMIT;});
$sup = supervisor_pid();
ok( $node->poll_query_until('postgres', qq{
		SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = $key
		                  AND NOT granted AND pid = $sup)}),
	'snapshot: the supervisor waits to write the copy of hs at version 2');
# by hand, behind its back: an older version
$node->safe_psql('postgres', q{UPDATE malachi.declared_hubs SET version = 1 WHERE hub = 'hs'});
$holder->query_safe("SELECT pg_advisory_unlock($key)");
$holder->quit;
my $files = "$dir/hub-" . unpack('H*', 'hs') . '.json';
ok(wait_for(sub { -e $files }), 'snapshot: the copy of hs is written');
is(decode_json(slurp_file($files))->{version}, 2,
	'snapshot: it is of the version the pass read, not the older one committed since');
ok( $node->poll_query_until('postgres', q{SELECT malachi.declared_parked('hs')}),
	'snapshot: the next pass parks the older list');
is(decode_json(slurp_file($files))->{version}, 2, 'snapshot: and does not copy it');

#---- 9. a new installation restores nothing from the copies ----

$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	DROP EXTENSION malachi CASCADE;
	CREATE EXTENSION malachi;
	SELECT malachi.create_topic('again');
	CREATE FUNCTION public.again_handle(batch malachi.record[]) RETURNS void
	LANGUAGE sql AS $$ SELECT $$;
	SELECT malachi.declare_child('h9', 'c9',
		'{"kind": "consumer", "topic": "again", "group": "g9", "function": "public.again_handle", "wait": "100ms"}');});
ok( $node->poll_query_until('postgres',
		q{SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h9' AND state = 'running')}),
	'reinstall: the new installation\'s child runs');
ok($node->log_contains(qr/malachi was installed again/, $offset),
	'reinstall: the supervisor saw the new installation');
is($node->safe_psql('postgres', q{SELECT string_agg(hub, ',' ORDER BY hub) FROM malachi.declared_hubs}),
	'h9', 'reinstall: no hub of the dropped installation came back from its copy');
# nor when the supervisor starts again: a copy names its installation
$offset = -s $node->logfile;
$node->restart;
ok( $node->poll_query_until('postgres',
		q{SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h9' AND state = 'running')}),
	'reinstall, restart: the child of h9 runs again');
ok($node->log_contains(qr/did not restore the declared list of hub "h8"/, $offset),
	'reinstall, restart: the copy of h8 is not restored, and the log says so');
is($node->safe_psql('postgres', q{SELECT string_agg(hub, ',' ORDER BY hub) FROM malachi.declared_hubs}),
	'h9', 'reinstall, restart: still no hub of the dropped installation');
# an operator can still adopt such a copy (its installation and owners ignored)
is( $node->safe_psql('postgres', qq{
		CREATE FUNCTION public.su_handle(batch malachi.record[]) RETURNS void
		LANGUAGE sql AS \$\$ SELECT \$\$;
		SELECT malachi.adopt_manifest('h8', pg_read_file('$file8')::jsonb)}),
	'adopted', 'reinstall: the old copy of h8 can be adopted by hand');

$node->stop;
done_testing();

# wait_for(CODE): poll CODE for up to the default timeout; its last answer.
sub wait_for
{
	my ($code) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		return 1 if $code->();
		select(undef, undef, undef, 0.1);
	}
	return 0;
}
