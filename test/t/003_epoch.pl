# 003_epoch.pl: a backend's cached routes follow other sessions' committed
# changes (the shared metadata epoch), and only committed ones.
#
# Session A routes keys (filling its cache); session B changes ranges and
# topics.  Every step waits for the previous one to finish: nothing here
# depends on timing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('epoch');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'malachi'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
$node->safe_psql('postgres', q{SELECT malachi.create_topic('ep', 2)});

# A keeps going after an error (the last step expects one)
my $a = $node->background_psql('postgres', on_error_stop => 0);
my $b = $node->background_psql('postgres');

my $key = 'order-42';
my $hash = $node->safe_psql('postgres', "SELECT malachi.key_hash('$key')");

# A's route of the key (through A's cache)
sub route_a
{
	return $a->query_safe("SELECT malachi.route('ep', '$key')");
}

# the active range holding the key, by a query of the table in a new session
sub owner_in_table
{
	return $node->safe_psql(
		'postgres', qq{
SELECT range_id FROM malachi.ranges
 WHERE topic = 'ep' AND state = 'active' AND key_lo <= $hash AND key_hi > $hash});
}

# a range's slice and state, as "lo|hi|state"
sub slice_of
{
	my ($id) = @_;
	return $node->safe_psql('postgres',
		"SELECT key_lo, key_hi, state FROM malachi.ranges WHERE range_id = $id");
}

# B splits a range (in B's current transaction, if any); its two children
sub split_in_b
{
	my ($id) = @_;
	return split /\|/,
	  $b->query_safe("SELECT left_id, right_id FROM malachi.split_range($id)");
}

# A routes the key into one of two children; returns the one it chose
sub a_routes_into
{
	my ($left, $right, $what) = @_;
	my $got = route_a();
	ok($got eq $left || $got eq $right, "$what ($left or $right), got $got");
	return $got;
}

# A must stay one backend throughout (its cache is per backend)
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
my $b_pid = $b->query_safe('SELECT pg_backend_pid()');
isnt($a_pid, $b_pid, 'A and B are two backends');

#---- a committed split reaches A's cache ----

my $r0 = route_a();
is($r0, owner_in_table(), 'A routes the key to the range that owns it');
# route it again: now it is answered from the cache
is(route_a(), $r0, 'A routes it there again');

my ($l1, $r1) = split_in_b($r0);
my $c1 = a_routes_into($l1, $r1,
	"after B's committed split, A routes into a child of $r0");
is($c1, owner_in_table(), 'the child A picks is the one that owns the key');
my ($lo, $hi, $state) = split /\|/, slice_of($c1);
ok($lo <= $hash && $hash < $hi && $state eq 'active',
	"A's new range [$lo,$hi) is active and holds hash $hash");

#---- an open transaction's split is invisible until it commits ----

$b->query_safe('BEGIN');
my ($l2, $r2) = split_in_b($c1);
is(route_a(), $c1, "while B's split of $c1 is uncommitted, A still routes to $c1");
is($a->query_safe(q{SELECT string_agg(id::text, ',') FROM malachi.active_range_ids('ep') id}),
	$node->safe_psql('postgres',
		q{SELECT string_agg(range_id::text, ',' ORDER BY key_lo) FROM malachi.ranges WHERE topic = 'ep' AND state = 'active'}),
	'and A lists the committed active ranges only');
# B sees its own split
my $b_sees = $b->query_safe("SELECT malachi.route('ep', '$key')");
ok($b_sees eq $l2 || $b_sees eq $r2, 'B routes into its own uncommitted children');
$b->query_safe('COMMIT');
my $c2 = a_routes_into($l2, $r2, "after B commits, A routes into a child of $c1");
is($c2, owner_in_table(), 'the one that owns the key');

#---- a rolled back split changes nothing ----

$b->query_safe('BEGIN');
my ($l3, $r3) = split_in_b($c2);
is(route_a(), $c2, "during B's split of $c2, A routes to $c2");
$b->query_safe('ROLLBACK');
is(route_a(), $c2, "after B rolls the split back, A still routes to $c2");
is(owner_in_table(), $c2, "and $c2 still owns the key");
is($node->safe_psql('postgres',
		"SELECT count(*) FROM malachi.ranges WHERE range_id IN ($l3, $r3)"),
	'0', 'the rolled back children do not exist');

#---- a committed merge reaches A's cache too ----

my $buddy = $c2 eq $l2 ? $r2 : $l2;
my $m = $b->query_safe("SELECT malachi.merge_ranges($c2, $buddy)");
is(route_a(), $m, "after B merges $c2 with $buddy, A routes to the merge child $m");

#---- A inside a transaction still follows B's commits ----

$a->query_safe('BEGIN');
is(route_a(), $m, 'A, in a transaction, routes to the merge child');
my ($l4, $r4) = split_in_b($m);
my $c4 = a_routes_into($l4, $r4, "A's open transaction sees B's committed split of $m");
$a->query_safe('COMMIT');
is(route_a(), $c4, 'and keeps routing there after its commit');

#---- a topic dropped and created again under the same name ----

my $old_ids = $a->query_safe(
	q{SELECT string_agg(id::text, ',') FROM malachi.active_range_ids('ep') id});
$b->query_safe(q{SELECT malachi.drop_topic('ep')});
$b->query_safe(q{SELECT malachi.create_topic('ep', 4)});
my $new = route_a();
is($new, owner_in_table(), 'after B drops and recreates ep, A routes into the new topic');
my $new_ids = $node->safe_psql('postgres',
	q{SELECT string_agg(range_id::text, ',' ORDER BY key_lo) FROM malachi.ranges WHERE topic = 'ep' AND state = 'active'});
is($a->query_safe(
		q{SELECT string_agg(id::text, ',') FROM malachi.active_range_ids('ep') id}),
	$new_ids, "A lists the new topic's four active ranges");
ok(!grep({ $_ eq $new } split(/,/, $old_ids)),
	"A's range $new is none of the old topic's ranges ($old_ids)");
is(scalar(split /,/, $new_ids), 4, 'the new topic has 4 active ranges');

is($a->query_safe('SELECT pg_backend_pid()'), $a_pid,
	'A was one backend throughout (one cache)');

#---- a dropped topic is gone for A as well ----

$b->query_safe(q{SELECT malachi.drop_topic('ep')});
my ($out, $failed) = $a->query(q{SELECT malachi.route('ep', 'k')});
ok($failed && $out eq '', "after B drops the topic, A cannot route to it (got '$out')");
like($a->{stderr}, qr/topic "ep" does not exist/, 'A is told the topic does not exist');

$a->quit;
$b->quit;
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the node is still up');
$node->stop;
done_testing();
