# 022_head_index.pl: a head's recovery scans from its index's last point.
#
# The sweeper saves each loaded head's index up to the head's settled
# prefix (every batch before it durable and decided).  After a restart the
# head is scanned from the last point of that index, not from the start of
# the file:
#
# - damage in the head before that point (a batch's header) is not taken
#   for a torn tail (a scan from the start would cut the file there and
#   lose everything after it): the records after it still read (readers
#   of the head start from its index file too), and a read of the damaged
#   batch fails with data_corrupted;
# - a transactional batch still in doubt bounds the prefix, so that a
#   crash before its commit still voids it at the restart;
# - the head's index, once the head is sealed, is completed by its first
#   reader;
# - an index whose last point holds no valid batch makes the recovery scan
#   the whole file, and is removed when it points past the data found;
# - an index file a crash left half written is removed by the sweeper.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('head_index', qq{
malachi.produce_mode = 'immediate'
});

# index_file(SEGMENT_ID): whether its index is complete, and its points'
# [first offset, position] pairs (segindex.c: a 24-byte head, 24-byte points)
sub index_file
{
	my ($id) = @_;
	my $data = slurp_file(sprintf('%s/malachi/%016x.idx', $node->data_dir, $id));
	my (undef, undef, $n, $complete) = unpack('L L L L', $data);
	my @points =
	  map { [ unpack('q Q', substr($data, 24 + 24 * $_, 16)) ] } 0 .. $n - 1;
	return ($complete, @points);
}

sub head_of
{
	my ($range) = @_;
	return $node->safe_psql('postgres',
		"SELECT segment_id FROM malachi.segments WHERE range_id = $range AND state = 'active'"
	);
}

sub maintenance
{
	return $node->safe_psql('postgres',
		"SELECT malachi.run_maintenance() ->> 'heads_indexed'");
}

#---- damage before the last point ----

my $h = topic_range($node, 'h');
produce_calls($node, 'h', 4, 1000, 1024);
is(maintenance(), '1', 'the sweeper saves the head\'s index');
my $hseg = head_of($h);
my ($complete, @points) = index_file($hseg);
is($complete, 0, 'a head\'s index is not complete');
cmp_ok($points[-1][0], '>=', 3000, 'it reaches the head\'s last batch (offset 3000)');

$node->stop('immediate');
flip_byte(segment_file($node, $hseg), 24);    # the first batch's payload length
my $log_pos = -s $node->logfile;
$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($h, 3990, 100)"),
	'10', 'after a restart the records after the damage still read');
unlike(slurp_file($node->logfile, $log_pos), qr/truncating torn tail/,
	'the damage before the last point is not taken for a torn tail');
my ($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM malachi.read($h, 0, 10)");
like($err, qr/segment $hseg is corrupt at offset 0/,
	'a read of the damaged batch fails with data_corrupted');
is($node->safe_psql('postgres', "SELECT malachi.produce('h', 'k', 'next'::text)"),
	$h, 'producing continues');
is($node->safe_psql('postgres', qq{
	SELECT "offset" FROM malachi.read($h, 3999, 10) WHERE convert_from(value, 'UTF8') = 'next'}),
	'4000', 'at the offset after the last record');

# sealed: its first reader completes the index from the head's
$node->safe_psql('postgres', "SELECT malachi.roll($h)");
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($h, 3995, 10)"),
	'6', 'the sealed segment reads');
($complete, @points) = index_file($hseg);
is($complete, 1, 'and its index is complete');

#---- a batch in doubt bounds the prefix ----

my $d = topic_range($node, 'd');
produce_calls($node, 'd', 2, 1000, 1024);
my ($holder, $tx, $waits) = commit_held($node, q{
	SELECT malachi.produce_batch('d', array_fill('k'::text, ARRAY[100]),
								 array_fill(repeat('x', 1024), ARRAY[100]))});
ok($waits, 'a COMMIT waits after its batch was written');
produce_calls($node, 'd', 2, 1000, 1024);
is(maintenance(), '1', 'the sweeper saves the index of the head behind it');
($complete, @points) = index_file(head_of($d));
cmp_ok($points[-1][0], '<=', 2000,
	'the index stops at the batch in doubt (offset 2000)');

kill9_node($node, label => 'in doubt');
$node->start;
$_->{run}->kill_kill for $holder, $tx;
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE convert_from(value, 'UTF8') LIKE 'x%') || ' '
			|| count(*) FROM malachi.read($d, 0, 100000)}),
	'0 4000',
	'after the crash the batch of the transaction that never committed is void');

#---- an index that does not match its file ----

my $m = topic_range($node, 'm');
produce_calls($node, 'm', 3, 1000, 1024);
cmp_ok(maintenance(), '>=', 1, 'the sweeper saves the index of another head');
my $mseg = head_of($m);
($complete, @points) = index_file($mseg);
is($points[-1][0], '2000', 'its last point is the batch at offset 2000');
$node->stop('immediate');
flip_byte(segment_file($node, $mseg), $points[-1][1] + 64 + 100);
$log_pos = -s $node->logfile;
$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($m, 0, 10000)"),
	'2000', 'a damaged batch at the last point: the whole file is scanned, and cut there');
like(slurp_file($node->logfile, $log_pos),
	qr/the index of segment $mseg does not match its file; scanning the whole file/,
	'the log says the index did not match');
ok(!-e sprintf('%s/malachi/%016x.idx', $node->data_dir, $mseg),
	'and the index pointing past the data is removed');

#---- an index a crash left half written ----

my $tmp = sprintf('%s/malachi/%016x.idx.4242.tmp', $node->data_dir, $mseg);
write_file($tmp, 'half');
$node->safe_psql('postgres',
	'SET malachi.orphan_grace = 0; SELECT malachi.run_maintenance()');
ok(!-e $tmp, 'the orphan step removes an index file a crash left half written');

$node->stop;
done_testing();
