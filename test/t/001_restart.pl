# 001_restart.pl: topics, ranges, settings and routing survive a clean
# restart and a crash (immediate stop, WAL replay), and the id sequences
# never hand out an id twice afterwards.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('restart');
$node->init;
# TEMP_CONFIG normally preloads malachi; say it again in case it does not.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'malachi'");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION malachi');

# three topics: pre-split, reshaped by splits and a merge, bound to a policy
$node->safe_psql(
	'postgres', q{
SELECT malachi.create_topic('four', 4);

SELECT malachi.create_topic('churn') AS root \gset
SELECT left_id AS l, right_id AS r FROM malachi.split_range(:root) \gset
SELECT left_id AS ll, right_id AS lr FROM malachi.split_range(:l) \gset
SELECT malachi.merge_ranges(:ll, :lr);

SELECT malachi.create_policy('gold', '{"retention": "7 days", "compression": "zstd", "zstd_level": 5}');
SELECT malachi.create_topic('bound', 2, 3, 'gold');
SELECT malachi.alter_topic('bound', '{"segment_max_bytes": 1048576, "retention": "36 hours"}');
});

# Everything a client can observe of the control plane, as text.
my $keys = q{(SELECT 'key-' || i AS k FROM generate_series(1, 100) i) keys};
my %queries = (
	ranges => 'SELECT * FROM malachi.ranges ORDER BY range_id',
	settings => q{SELECT topic, malachi.topic_settings(topic),
	                     malachi.topic_policy_name(topic), settings
	                FROM malachi.topic_meta ORDER BY topic},
	policies => 'SELECT * FROM malachi.policy_meta ORDER BY policy',
	active => q{SELECT topic, array(SELECT malachi.active_range_ids(topic))
	              FROM malachi.topic_meta ORDER BY topic},
	routes => qq{SELECT t, k, malachi.route(t, k)
	               FROM unnest(ARRAY['four', 'churn', 'bound']) t CROSS JOIN $keys
	              ORDER BY t, k},);

sub observe
{
	my %state;
	$state{$_} = $node->safe_psql('postgres', $queries{$_}) for keys %queries;
	return \%state;
}

# compare every part of the observed state with a reference
sub same_state
{
	my ($before, $after, $when) = @_;
	is($after->{$_}, $before->{$_}, "$when: $_ unchanged") for sort keys %queries;
}

my $before = observe();

# the reference itself is what was created (not an empty or broken state)
is( $node->safe_psql(
		'postgres', q{
SELECT string_agg(format('%s:%s/%s', topic, active, total), ' ' ORDER BY topic)
  FROM (SELECT topic, count(*) FILTER (WHERE state = 'active') AS active, count(*) AS total
          FROM malachi.ranges GROUP BY topic) t}),
	'bound:2/3 churn:2/6 four:4/7',
	'reference state: active/total ranges per topic');
is( $node->safe_psql(
		'postgres', q{
SELECT malachi.topic_settings('bound') ->> 'retention',
       malachi.topic_settings('bound') ->> 'zstd_level',
       malachi.topic_settings('bound') ->> 'replication_factor',
       malachi.topic_policy_name('bound')}),
	'1 day 12:00:00|5|3|gold',
	'reference state: bound topic settings come from overrides and its policy');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(*), bool_and(malachi.key_hash(k) >= r.key_lo AND malachi.key_hash(k) < r.key_hi
                          AND r.state = 'active' AND r.topic = t)
  FROM unnest(ARRAY['four', 'churn', 'bound']) t CROSS JOIN $keys
  JOIN malachi.ranges r ON r.range_id = malachi.route(t, k)}),
	'300|t',
	'reference state: 300 routes land in active ranges holding the key hash');
is( $node->safe_psql(
		'postgres', qq{
SELECT count(DISTINCT malachi.route('four', k)) FROM $keys}),
	'4', 'reference state: 100 keys spread over all 4 ranges of topic four');

#---- clean restart ----

$node->restart;
same_state($before, observe(), 'after restart');

#---- crash: changes made after the last checkpoint come back from WAL ----

$node->safe_psql(
	'postgres', q{
SELECT malachi.split_range(malachi.route('four', 'key-1'));
SELECT malachi.alter_policy('gold', '{"retention": "3 days"}');
SELECT malachi.create_topic('late', 2);
});
my $before_crash = observe();
isnt($before_crash->{ranges}, $before->{ranges},
	'changes after the restart are visible before the crash');

$node->stop('immediate');
$node->start;
same_state($before_crash, observe(), 'after crash recovery');
is( $node->safe_psql(
		'postgres', q{SELECT malachi.topic_settings('bound') ->> 'retention'}),
	'1 day 12:00:00',
	'after crash recovery: the topic override still beats the altered policy');
is( $node->safe_psql(
		'postgres', q{SELECT malachi.topic_settings('four') ->> 'retention'}),
	'', 'after crash recovery: an unbound topic has no retention (unlimited)');

#---- after the crash: changes work and ids are fresh ----

my ($max_range, $max_topic) = split /\|/,
  $node->safe_psql('postgres',
	'SELECT (SELECT max(range_id) FROM malachi.range_meta), (SELECT max(topic_id) FROM malachi.topic_meta)'
  );

my ($left, $right) = split /\|/,
  $node->safe_psql('postgres',
	q{SELECT left_id, right_id FROM malachi.split_range(malachi.route('churn', 'key-7'))});
cmp_ok($left, '>', $max_range, 'a split after the crash gets a new left id above every old one');
cmp_ok($right, '>', $left, 'and a right id above that');

my $merged = $node->safe_psql('postgres', "SELECT malachi.merge_ranges($left, $right)");
cmp_ok($merged, '>', $right, 'a merge after the crash gets a new id too');

my $new_root = $node->safe_psql('postgres', q{SELECT malachi.create_topic('after_crash', 4)});
cmp_ok($new_root, '>', $merged, 'a topic created after the crash gets new range ids');
cmp_ok(
	$node->safe_psql('postgres',
		q{SELECT topic_id FROM malachi.topic_meta WHERE topic = 'after_crash'}),
	'>', $max_topic,
	'and a new topic id');
is( $node->safe_psql(
		'postgres', q{
SELECT count(*), count(DISTINCT range_id) FROM malachi.range_meta}),
	# four 7 + churn 6 + bound 3, split 2 + late 3 before the crash,
	# split 2 + merge 1 + after_crash 7 after it
	'31|31', 'range ids stay unique: 31 ranges, 31 distinct ids');
is( $node->safe_psql(
		'postgres', qq{
SELECT bool_and(malachi.key_hash(k) >= r.key_lo AND malachi.key_hash(k) < r.key_hi
                AND r.state = 'active' AND r.topic = t)
  FROM unnest(ARRAY['four', 'churn', 'bound', 'late', 'after_crash']) t CROSS JOIN $keys
  JOIN malachi.ranges r ON r.range_id = malachi.route(t, k)}),
	't', 'after the crash every topic routes keys into its active ranges');

# one more restart: the post-crash changes persist as well
my $final = observe();
$node->restart;
same_state($final, observe(), 'after a second restart');

$node->stop;
done_testing();
