# 029_load_release.pl: a head dropped while a reader loads it (its first
# use after a restart) does not keep its append slot.
#
# The reader is held at the pause point append-loading (advisory lock
# 77000009) with the slot LOADING; drop_topic commits meanwhile, and its
# release of the slot found it not yet loaded and left it.  Released, the
# reader finished the load and the slot stayed taken by a segment that no
# longer exists, until the next restart (each such race one slot fewer of
# malachi.max_active_segments).  Now the loader frees it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('load_release');
my $r = topic_range($node, 'gone');
$node->safe_psql('postgres', q{SELECT malachi.produce('gone', 'k', 'v'::text)});
my $seg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $r AND state = 'active'");
$node->restart;

my ($holder, $reader, $waiting) =
  read_held_at($node, 'append-loading', 77000009, $r);
ok($waiting, 'the reader waits in the middle of loading the head');

$node->safe_psql('postgres', q{SELECT malachi.drop_topic('gone')});
ok(read_let_go($node, $holder, $reader, 77000009), 'released, the reader goes on');

is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.head_state() WHERE segment_id = $seg"),
	'0', 'the dropped head holds no append slot');

$node->stop;
done_testing();
