# 032_sealed_damage.pl: a fenced head damaged in the middle is not cut.
#
# A roll is held between its fence (seal trailer written and synced) and
# recording the seal, and the node is killed there.  While it is down, a
# byte of the head's first batch flips.  Its load after the restart
# stopped at that batch and took it for a torn tail: it cut the file there,
# trailer and all, and loaded an empty, unfenced head, so the next produce
# was handed offset 0 again while every later acknowledged batch was gone.
# A trailer at the end of the file proves that everything before it was
# written whole: the head now loads fenced at its trailer, its records
# stay in the file (reads through the damaged batch fail with
# data_corrupted), and producing goes on after the fence.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('sealed_damage');
my $r = topic_range($node, 'dmg');
for my $b (1 .. 2)
{
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('dmg', array_agg('k'::text), array_agg(repeat('x', 200) || i))
		  FROM generate_series(1, 50) i});
}
my $seg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $r AND state = 'active'");
my $path = segment_file($node, $seg);

# hold a roll between its fence and recording the seal (seal-fenced,
# advisory lock 77000006), and crash there
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(77000006)');
my $roller = $node->background_psql('postgres', on_error_stop => 0);
$roller->query_safe(q{SET malachi.inject_wait = 'seal-fenced'});
$roller->query_until(qr/started/, qq{\\echo started\nSELECT malachi.roll($r);\n});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_locks
	 WHERE locktype = 'advisory' AND objid = 77000006 AND NOT granted})
  or die 'the roll did not reach its pause point';
kill9_node($node, seconds => 60);
my $size = -s $path;
flip_byte($path, 64 + 100);
$node->start;
$roller->{run}->kill_kill;
$holder->{run}->kill_kill;

my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM malachi.read($r, 0, 1000)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'reading the damaged batch fails');
like($err, qr/XX001/, 'with data_corrupted');
is(-s $path, $size, 'the file was not cut');
$node->safe_psql('postgres', q{SELECT malachi.produce('dmg', 'k', 'after'::text)});
is($node->safe_psql('postgres', "SELECT \"offset\", convert_from(value, 'UTF8') FROM malachi.read($r, 100, 10)"),
	'100|after', 'producing goes on after the fence, never at an offset handed out before');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(format('%s-%s:%s', base_offset, end_offset, state), ' ' ORDER BY seq)
	  FROM malachi.segments WHERE range_id = $r}),
	'0-100:sealed 100-101:active', 'the fence was recorded with its end');
like(slurp_file($node->logfile), qr/segment $seg is damaged at position 0 \(offset 0\)/,
	'the load warned about the damage');

$node->stop;
done_testing();
