# 012_standby.pl: declared lists on a streaming standby.
#
# The list is changed only on the control-plane primary.  On a standby:
# - the list reads (declared_children, declared_child, declared_manifest,
#   declared_parked) and shows what the primary committed;
# - every mutation (declare_child, undeclare_child, adopt_manifest,
#   clear_declared) fails with read_only_sql_transaction (25006) and a
#   message naming the primary, and changes nothing;
# - no child runs (the supervisor starts once recovery ends).
# Promoted, the former standby runs the declared child and takes changes.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'malachi'
malachi.supervisor_interval = '1s'
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION malachi;
	CREATE SCHEMA app;
	CREATE FUNCTION app.handle(malachi.record[]) RETURNS void LANGUAGE sql AS 'SELECT';
	SELECT malachi.create_topic('t');
});
my $spec = '{"kind": "consumer", "topic": "t", "group": "g", "function": "app.handle", "wait": "200ms"}';
is($primary->safe_psql('postgres', "SELECT malachi.declare_child('h', 'c1', '$spec')"),
	'1', 'primary: declare_child, version 1');
ok( $primary->poll_query_until('postgres',
		q{SELECT EXISTS (SELECT FROM malachi.children WHERE hub = 'h' AND state = 'running')}),
	'primary: the child runs');

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

# a change after the backup reaches the standby by streaming
is( $primary->safe_psql('postgres',
		"SELECT malachi.declare_child('h', 'c2', '$spec', '{\"n\": 2}')"),
	'2', 'primary: declare_child c2, version 2');
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
is( $standby->safe_psql('postgres',
		q{SELECT version || '|' || (SELECT string_agg(e ->> 'child_id', ',') FROM jsonb_array_elements(children) e)
		    FROM malachi.declared_children('h')}),
	'2|c1,c2', 'standby: declared_children shows what the primary committed');
is( $standby->safe_psql('postgres', q{SELECT malachi.declared_child('h', 'c2') ->> 'meta'}),
	'{"n": 2}', 'standby: declared_child reads');
is( $standby->safe_psql('postgres', q{SELECT malachi.declared_manifest('h') ->> 'version'}),
	'2', 'standby: declared_manifest reads');
is($standby->safe_psql('postgres', q{SELECT malachi.declared_parked('h')}),
	'f', 'standby: declared_parked reads');

my %mutations = (
	declare_child   => "SELECT malachi.declare_child('h', 'c3', '$spec')",
	undeclare_child => "SELECT malachi.undeclare_child('h', 'c1')",
	adopt_manifest  => q{SELECT malachi.adopt_manifest('h', jsonb_set(malachi.declared_manifest('h'), '{version}', '9'))},
	clear_declared  => q{SELECT malachi.clear_declared('h')},
);
for my $name (sort keys %mutations)
{
	my ($rc, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$mutations{$name}");
	isnt($rc, 0, "standby: $name fails");
	like($err, qr/ERROR:  25006: declared lists can only be changed on the control-plane primary/,
		"standby: $name says read_only_sql_transaction, the primary only");
	like($err, qr/DETAIL:  This server is a standby\./, "standby: $name says why");
}
{
	my ($rc, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT malachi.run_maintenance()");
	like($err, qr/ERROR:  25006: maintenance can only run on the control-plane primary/,
		'standby: run_maintenance fails with read_only_sql_transaction (before, its pass could fence a head in the standby\'s copy of the files)');
}
is( $standby->safe_psql('postgres', q{SELECT version FROM malachi.declared_children('h')}),
	'2', 'standby: the list is unchanged');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM malachi.children}),
	'0', 'standby: no child runs');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'malachi child'}),
	'0', 'standby: no child backend');

# a standby session's view of a topic's ranges follows the primary's
# split: its cache is not kept while the server is in recovery (no trigger
# runs there to move the metadata epoch)
my $viewer = $standby->background_psql('postgres');
is($viewer->query_safe(q{SELECT count(*) FROM malachi.active_range_ids('t')}),
	'1', 'standby: one range before the split');
$primary->safe_psql('postgres',
	q{SELECT malachi.split_range(malachi.route('t', 'k')) IS NOT NULL});
$primary->wait_for_catchup($standby);
is($viewer->query_safe(q{SELECT count(*) FROM malachi.active_range_ids('t')}),
	'2', 'standby: the same session sees the two ranges after the split');
is($viewer->query_safe(q{SELECT malachi.route('t', 'k') = malachi.route('t', 'k') AND
		malachi.route('t', 'k') IN (SELECT malachi.active_range_ids('t'))}),
	't', 'standby: and routes to one of them');
$viewer->quit;

# promoted: it runs the declared children and takes changes
$primary->stop;
$standby->promote;
ok( $standby->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM malachi.children WHERE hub = 'h' AND state = 'running'}),
	'promoted: both declared children run');
is($standby->safe_psql('postgres', q{SELECT malachi.undeclare_child('h', 'c2')}),
	'3', 'promoted: undeclare_child works, version 3');
ok( $standby->poll_query_until('postgres',
		q{SELECT string_agg(child_id, ',') = 'c1' FROM malachi.children WHERE hub = 'h'}),
	'promoted: only c1 runs');

$standby->stop;
done_testing();
