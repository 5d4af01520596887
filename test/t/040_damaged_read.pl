# 040_damaged_read.pl: one damaged batch of a sealed segment fails only the
# reads that reach it.
#
# A sealed segment of three batches (offsets 0-49, 50-99, 100-149) whose
# index file is gone loses a bit of its second batch's header while the
# node is down.  The first read of a sealed segment walks its headers to
# build the index; that walk stopped at the damage with data_corrupted, so
# every read of the segment failed, the records before the damage too, and
# a consumer positioned there could not drain them.  Now the walk keeps
# the points before the damage: reads before it return their records,
# reads that reach it fail with data_corrupted naming its offset, and so
# does offset_for_time when its answer may lie past it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('damaged_read');
my $r = topic_range($node, 'dr');
for my $b (1 .. 3)
{
	$node->safe_psql('postgres', qq{
		SET malachi.produce_mode = 'immediate';
		SELECT malachi.produce_batch('dr', array_agg('k'::text), array_agg(repeat('x', 200) || i))
		  FROM generate_series(1, 50) i});
}
my $seg = $node->safe_psql('postgres', "SELECT malachi.roll($r)");
my $path = segment_file($node, $seg);
$node->stop;

# no index file (a restore that did not copy it), and the second batch's
# header damaged
unlink($path =~ s/\.seg$/.idx/r);
my $second = 64 + unpack('V', file_bytes($path, 24, 4));
flip_byte($path, $second + 40);
$node->start;

is($node->safe_psql('postgres', "SELECT count(*), min(\"offset\"), max(\"offset\") FROM malachi.read($r, 0, 50)"),
	'50|0|49', 'the records before the damaged batch read');
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($r, 10, 5)"),
	'5', 'from inside the first batch too');
for my $q ("SELECT count(*) FROM malachi.read($r, 0, 1000)",
	"SELECT count(*) FROM malachi.read($r, 120, 5)",
	"SELECT malachi.offset_for_time($r, 'infinity')")
{
	my ($ret, $out, $err) = $node->psql('postgres', $q,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	isnt($ret, 0, "reaching the damage fails: $q");
	like($err, qr/XX001.*segment $seg is corrupt at offset 50 \(position $second\)/s,
		"with data_corrupted at the damaged batch: $q");
}
is($node->safe_psql('postgres', "SELECT malachi.offset_for_time($r, '-infinity')"),
	'0', 'offset_for_time answers from before the damage');
ok(!-e ($path =~ s/\.seg$/.idx/r), 'no index file was saved for the damaged segment');

$node->stop;
done_testing();
