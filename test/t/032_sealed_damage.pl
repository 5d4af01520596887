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
# data_corrupted), and producing goes on after the fence.  The same when
# the damage is a zeroed batch header, which reads as the end of the data
# (the load checked for a trailer only after a batch that did not check).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('sealed_damage');

# damaged(TOPIC, DAMAGE, LABEL): a fenced head of TOPIC, two batches of 50
# records, whose seal is not recorded when the node is killed; DAMAGE(path)
# damages its file while the node is down and returns the position of the
# damaged batch, and offset is that batch's first offset
sub damaged
{
	my ($topic, $damage, $offset, $label) = @_;
	my $r = topic_range($node, $topic);
	for my $b (1 .. 2)
	{
		$node->safe_psql('postgres', qq{
			SELECT malachi.produce_batch('$topic', array_agg('k'::text), array_agg(repeat('x', 200) || i))
			  FROM generate_series(1, 50) i});
	}
	my $seg = $node->safe_psql('postgres',
		"SELECT segment_id FROM malachi.segments WHERE range_id = $r AND state = 'active'");
	my $path = segment_file($node, $seg);

	crash_at_seal_fenced($node, $r);
	my $size = -s $path;
	my $where = $damage->($path);
	$node->start;

	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT count(*) FROM malachi.read($r, 0, 1000)",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "$label: reading through the damaged batch fails");
	like($err, qr/XX001/, "$label: with data_corrupted");
	is(-s $path, $size, "$label: the file was not cut");
	$node->safe_psql('postgres', qq{SELECT malachi.produce('$topic', 'k', 'after'::text)});
	is($node->safe_psql('postgres', "SELECT \"offset\", convert_from(value, 'UTF8') FROM malachi.read($r, 100, 10)"),
		'100|after', "$label: producing goes on after the fence, never at an offset handed out before");
	is($node->safe_psql('postgres', qq{
		SELECT string_agg(format('%s-%s:%s', base_offset, end_offset, state), ' ' ORDER BY seq)
		  FROM malachi.segments WHERE range_id = $r}),
		'0-100:sealed 100-101:active', "$label: the fence was recorded with its end");
	like(slurp_file($node->logfile), qr/segment $seg is damaged at position $where \(offset $offset\)/,
		"$label: the load warned about the damage");
	return;
}

# a byte of the first batch flipped: it does not check
damaged('dmg', sub { flip_byte($_[0], 64 + 100); return 0; }, 0, 'a flipped byte');

# the second batch's header zeroed (a lost block): it reads as the end of
# the data, which was cut there too
damaged('zero', sub {
	my ($path) = @_;
	my $where = 64 + unpack('V', file_bytes($path, 24, 4));
	put_bytes($path, $where, "\0" x 64);
	return $where;
}, 50, 'a zeroed header');

$node->stop;
done_testing();
