# 035_stale_segment_file.pl: a new head whose id has a file already does not
# take that file's records for its own.
#
# DROP EXTENSION keeps segment files; a dump restored afterwards sets
# malachi.segment_id_seq back to where it was when the dump was taken, so
# new heads get ids whose files are still there.  The writer opened such a
# file as it was: its batches carry the same segment id and base offset,
# so the new head loaded them as its own, and the new topic read an old
# topic's records.  The test sets the sequence back by hand, as the dump
# does.  Now the file is replaced by an empty one (with a LOG line), and
# only the new records read back.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

# no zero-filled spares: the only spare is the recycled file of part 2
my $node = malachi_node('stale_file', "malachi.spare_segments = 0\n");

# a topic of one range holding 10 records; its range and its head
sub topic_of_ten
{
	my ($topic) = @_;
	my $range = topic_range($node, $topic);
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('$topic', array_agg('k'::text), array_agg('$topic ' || i))
		  FROM generate_series(1, 10) i});
	return ($range, head_of($range));
}

sub head_of
{
	my ($range) = @_;
	return $node->safe_psql('postgres',
		"SELECT segment_id FROM malachi.segments WHERE range_id = $range");
}

# does the range hold exactly one record, value, at offset 0?
sub reads_only
{
	my ($range, $value, $label) = @_;
	is($node->safe_psql('postgres', qq{
			SELECT string_agg("offset" || ':' || convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
			  FROM malachi.read($range, 0, 100)}),
		"0:$value", $label);
}

my ($r, $seg) = topic_of_ten('old');
ok(-s segment_file($node, $seg), 'the old head has a file');

$node->safe_psql('postgres', 'DROP EXTENSION malachi');
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
# what a restored dump does to the sequence
$node->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $seg, false)");

my $n = topic_range($node, 'new');
$node->safe_psql('postgres', q{SELECT malachi.produce('new', 'k', 'new 1'::text)});
is(head_of($n), $seg, 'the new head got the old file\'s id');
reads_only($n, 'new 1', 'the new topic reads only its own record');
like(slurp_file($node->logfile), qr/segment file "[^"]*" exists already; replacing it with an empty one/,
	'the log says the file was replaced');

# part 2: a deleted segment's file, recycled as spare-r<id>, is not given
# to a new head of that same id (its old batches and trailer carry the id)
my ($g, $gseg) = topic_of_ten('gone');
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('gone')});
my $recycled = sprintf('%s/malachi/spare-r%016x', $node->data_dir, $gseg);
ok($node->poll_query_until('postgres', "SELECT (pg_stat_file('$recycled', true)).size IS NOT NULL"),
	'the dropped segment\'s file became a recycled spare');
$node->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $gseg, false)");
my $a = topic_range($node, 'again');
$node->safe_psql('postgres', q{SELECT malachi.produce('again', 'k', 'again 1'::text)});
is(head_of($a), $gseg, 'the new head got the recycled file\'s id');
ok(-e $recycled, 'the recycled spare of that id was not taken');
reads_only($a, 'again 1', 'the new topic reads only its own record');

$node->stop;
done_testing();
