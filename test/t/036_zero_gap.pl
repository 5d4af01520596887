# 036_zero_gap.pl: a batch stranded past a zero gap never comes back.
#
# Producer A reserves a region and pauses before writing it (pause point
# append-reserved, advisory lock 77000002); producer B reserves the next
# region, writes it and waits for A's.  Neither is acknowledged.  A crash
# there leaves zeros where A's batch belongs and B's batch after them.
# The restart's scan stops at the zeros, so B's record is gone, as it
# should be.  But if B's batch stayed in the file, a later batch of the
# same length at A's position would end exactly where B's begins, with the
# next offset equal to B's base, and the restart after that would read
# B's record again, behind the newer one.  So the first load of a head
# after a start cuts the file where its data ends.  A head the writer
# created in this server's life keeps its preallocated space instead.
use strict;
use warnings;

use File::stat;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $segment_bytes = 1024 * 1024;
my $node = malachi_node('zero_gap', qq{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = $segment_bytes
malachi.spare_segments = 2
});
my $dir = $node->data_dir . '/malachi';
$node->poll_query_until('postgres',
	qq{SELECT count(*) = 2 FROM pg_ls_dir('malachi') f WHERE f ~ '^spare-[0-9]'})
  or die 'the writer made no spares';

my $range = topic_range($node, 'zg');
$node->safe_psql('postgres', q{SELECT malachi.produce('zg', 'k', '0000'::text)});
my $head = $node->safe_psql('postgres', qq{
	SELECT segment_id FROM malachi.segments WHERE range_id = $range AND state = 'active'});
my $path = segment_file($node, $head);
is(stat($path)->size, $segment_bytes,
	'a new head keeps the spare it took, preallocated, after its first load');

my $records = qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($range, 0, 100)};

#---- a crash with A's region unwritten and B's written after it ----

my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(77000002)');
my $a = paused_session($node, 'a', 'append-reserved', 77000002,
	q{SELECT malachi.produce('zg', 'k', 'aaaa'::text);});
my $b = $node->background_psql('postgres', on_error_stop => 0);
$b->query_safe(q{SET application_name = 'b'});
$b->query_until(qr/started/,
	qq{\\echo started\nSELECT malachi.produce('zg', 'k', 'bbbb'::text);\n});
ok(session_asleep($node, 'b'), 'b wrote its batch and waits for the region before it');

kill9_node($node, everything => 1, label => 'crash with a zero gap');
eval { $a->quit };
eval { $b->quit };
eval { $holder->quit };
$node->start;

is($node->safe_psql('postgres', $records), '0000',
	'after the crash: neither unacknowledged record is read');
is(stat($path)->size < $segment_bytes, 1,
	'the first load after the start cut the file where its data ends');

#---- a batch of the same length where A's was, then a crash ----

$node->safe_psql('postgres', q{SELECT malachi.produce('zg', 'k', 'cccc'::text)});
is($node->safe_psql('postgres', $records), '0000 cccc', 'the next record follows');
kill9_node($node, label => 'crash after the next record');
$node->start;
is($node->safe_psql('postgres', $records), '0000 cccc',
	'after the next crash: b\'s record does not come back');
$node->safe_psql('postgres', q{SELECT malachi.produce('zg', 'k', 'dddd'::text)});
is($node->safe_psql('postgres', $records), '0000 cccc dddd',
	'and producing goes on at the next offset');

$node->stop;
done_testing();
