# 026_sweep_bad_head.pl: one head that cannot be loaded does not stop the
# sweeper's age rolls and fence completions for the others.
#
# Two topics whose heads are old enough to roll at once (segment_max_age
# 1 microsecond); the first head's file removed while the node is down.
# A pass warns about that head (and counts the error) and still rolls the
# second.  Before, the error ended the step at the first head, on every
# pass.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('sweep_bad_head');
$node->safe_psql('postgres', q{
	SELECT malachi.create_topic('a'), malachi.create_topic('b');
	SELECT malachi.produce('a', 'k', 'a1'::text);
	SELECT malachi.produce('b', 'k', 'b1'::text);});
my ($seg_a, $seg_b) = split /\n/, $node->safe_psql('postgres', q{
	SELECT s.segment_id FROM malachi.segments s JOIN malachi.ranges r USING (range_id)
	 WHERE s.state = 'active' ORDER BY r.topic});
ok($seg_a < $seg_b, 'the broken head comes first in the pass');

$node->stop;
unlink(segment_file($node, $seg_a)) or die "unlink: $!";
$node->start;
$node->safe_psql('postgres', q{
	SELECT malachi.alter_topic(t, '{"segment_max_age": "1 microsecond"}') IS NOT NULL
	  FROM (VALUES ('a'), ('b')) v(t);});

my ($ret, $out, $err) = $node->psql('postgres', q{
	SELECT r -> 'rolled', r -> 'errors' FROM malachi.run_maintenance() r});
is($out, '1|1', 'the pass rolled the good head and counted one error');
like($err, qr/could not sweep head segment $seg_a/, 'a WARNING names the broken head');
is( $node->safe_psql('postgres', qq{SELECT state FROM malachi.segments WHERE segment_id = $seg_b}),
	'sealed', 'the good head is sealed');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(convert_from(value, 'UTF8'), ',') FROM malachi.read(malachi.route('b', 'k'), 0, 10)}),
	'b1', 'its record still reads');
like( $node->safe_psql('postgres', q{SELECT last_error FROM malachi.sweeper_status}),
	qr/^fence completion and age rolls: /, 'sweeper_status names the step that failed');

$node->stop;
done_testing();
