# 031_fenced_slot.pl: a head sealed between a read's look at the control
# plane and its look at the head's append slot does not keep that slot
# for good.
#
# The reader is held at the pause point head-listed (advisory lock
# 77000014): it has seen the head active.  Meanwhile the head is rolled,
# its slot released, and the slot taken by a new head.  Let go, the reader
# loads the segment into an append slot again (its file says it is
# sealed), and nothing released that slot afterwards: no seal was coming.
# Each such race took one slot of malachi.max_active_segments until the
# next restart, and once they were gone every new head failed with "too
# many active malachi segments".  Now a durably fenced, idle slot is taken
# for a new segment when no slot is free or retired.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('fenced_slot', "malachi.max_active_segments = 16\n");
my $r = topic_range($node, 'old');
$node->safe_psql('postgres', q{SELECT malachi.produce('old', 'k', 'v'::text)});
my $seg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $r AND state = 'active'");

# fill every slot of a topic's 16 heads (keys k0..k999 reach every range)
sub fill_heads
{
	my ($topic) = @_;
	return $node->psql('postgres', qq{
		SELECT malachi.create_topic('$topic', 16);
		SELECT malachi.produce_batch('$topic',
			   array_agg('k' || i), array_agg('v' || i))
		  FROM generate_series(0, 999) i;});
}

my ($holder, $reader, $waiting) =
  read_held_at($node, 'head-listed', 77000014, $r);
ok($waiting, 'the reader has seen the head in the control plane');

$node->safe_psql('postgres', "SELECT malachi.roll($r)");
is(fill_heads('many'), 0, '16 new heads take every slot, the sealed one\'s too');
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('many')});

ok(read_let_go($node, $holder, $reader, 77000014), 'let go, the reader goes on');
is($node->safe_psql('postgres',
		"SELECT fenced FROM malachi.head_state() WHERE segment_id = $seg"),
	't', 'that read loaded the sealed segment into a slot');

is(fill_heads('more'), 0, '16 new heads still find slots: the sealed segment\'s is taken');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM malachi.segments s JOIN malachi.ranges r USING (range_id)
		 WHERE r.topic = 'more' AND s.state = 'active'}),
	'16', 'every range of the new topic has its head');
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($r, 0, 10)"),
	'1', 'the sealed segment still reads');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM malachi.head_state() WHERE segment_id = $seg"),
	'0', 'and no longer holds a slot');

$node->stop;
done_testing();
