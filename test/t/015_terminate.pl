# 015_terminate.pl: a producer terminated mid-append leaves nothing held.
#
# pg_terminate_backend makes a backend exit through FATAL, which skips the
# error cleanup of the code it was in.  A producer terminated while its
# region is reserved but not yet written (pause point append-reserved,
# advisory lock 77000002) must not leave that region in flight forever:
# the segment is fenced before it and producing goes on in a new head.  A
# producer terminated while it waits for an earlier region (pause point
# append-waiting, advisory lock 77000003) must not keep its pin on the
# head's slot: once the head is sealed, the slot is given back.  A reader
# terminated while it loads a head (append-loading, 77000009) must not
# leave the slot loading for ever.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('terminate', qq{
malachi.produce_mode = 'immediate'
});
my $range = topic_range($node, 't');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'k', 'first'::text)});

my $holder = $node->background_psql('postgres');

# start a producer of VALUE paused at POINT (its lock held), named NAME
sub paused_producer
{
	my ($name, $point, $lock, $value) = @_;
	return paused_session($node, $name, $point, $lock,
		qq{SELECT malachi.produce('t', 'k', '$value'::text);});
}

# terminate the session named NAME and wait until it is gone
sub terminate
{
	my ($name) = @_;
	$node->safe_psql('postgres', qq{
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		 WHERE application_name = '$name'});
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = '$name'})
	  or die "$name is still there";
}

my $records = qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($range, 0, 100)};
my $head_sql = qq{
	SELECT segment_id FROM malachi.segments WHERE range_id = $range AND state = 'active'};

#---- terminated between its reservation and its write ----

my $head = $node->safe_psql('postgres', $head_sql);
$holder->query_safe('SELECT pg_advisory_lock(77000002)');
my $reserved = paused_producer('reserved', 'append-reserved', 77000002, 'never');
terminate('reserved');
$holder->query_safe('SELECT pg_advisory_unlock(77000002)');
eval { $reserved->quit };	# its psql lost the server

my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT malachi.produce('t', 'k', 'second'::text)}, timeout => 60);
is($ret, 0, 'the next produce completes');
is($node->safe_psql('postgres', $records), 'first second',
	'it reads after the first record, and the terminated write is not there');
isnt($node->safe_psql('postgres', $head_sql), $head,
	'in a new head: the old one was fenced before the unwritten region');

#---- terminated while it waits for an earlier region ----

$head = $node->safe_psql('postgres', $head_sql);
$holder->query_safe('SELECT pg_advisory_lock(77000002), pg_advisory_lock(77000003)');
my $early = paused_producer('early', 'append-reserved', 77000002, 'early');
my $victim = paused_producer('victim', 'append-waiting', 77000003, 'victim');
terminate('victim');
$holder->query_safe('SELECT pg_advisory_unlock(77000003), pg_advisory_unlock(77000002)');
$early->quit;
eval { $victim->quit };

like($node->safe_psql('postgres', $records), qr/^first second early( victim)?$/,
	'the earlier producer finished (the victim was written, so its record may be there)');
$node->safe_psql('postgres', "SELECT malachi.roll($range)");
is($node->safe_psql('postgres',
	"SELECT count(*) FROM malachi.head_state() WHERE segment_id = $head"), '0',
	'once sealed, the head gives its slot back: the victim held no pin');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'k', 'last'::text)});
like($node->safe_psql('postgres', $records), qr/ last$/, 'and producing goes on');

#---- terminated while it loads a head ----

# after a restart nothing is loaded; a reader paused in the load (pause
# point append-loading, advisory lock 77000009) is terminated: the slot
# it was loading must not stay "loading" for the next reader to wait on
$holder->quit;
$node->restart;
$holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(77000009)');
my $loader = $node->background_psql('postgres', on_error_stop => 0);
$loader->query_safe(q{SET application_name = 'loader'; SET malachi.inject_wait = 'append-loading'});
$loader->query_until(qr/started/,
	qq{\\echo started\nSELECT count(*) FROM malachi.read($range, 0, 100);\n});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
	 WHERE l.locktype = 'advisory' AND l.objid = 77000009 AND NOT l.granted
	   AND a.application_name = 'loader'})
  or die 'the loader did not reach append-loading';
terminate('loader');
eval { $loader->quit };
$holder->query_safe('SELECT pg_advisory_unlock(77000009)');
($ret, $out, $err) = $node->psql('postgres', $records, timeout => 60);
like($out, qr/ last$/, 'the next reader loads the head itself and reads it');

$holder->quit;
$node->stop;
done_testing();
