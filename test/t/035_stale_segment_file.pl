# 035_stale_segment_file.pl: a new head whose id has a file already does not
# take that file's records for its own.
#
# DROP EXTENSION keeps segment files; a dump restored afterwards sets
# malachi.segment_id_seq back to where it was when the dump was taken, so
# new heads get ids whose files are still there.  The writer opened such a
# file as it was: its batches carry the same segment id and base offset,
# so the new head loaded them as its own, and the new topic read an old
# topic's records.  The test sets the sequence back by hand, as the dump
# does.  Now the file is emptied (with a LOG line) and only the new
# records read back.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('stale_file');
my $r = topic_range($node, 'old');
$node->safe_psql('postgres', q{
	SELECT malachi.produce_batch('old', array_agg('k'::text), array_agg('old ' || i))
	  FROM generate_series(1, 10) i});
my $seg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $r");
ok(-s segment_file($node, $seg), 'the old head has a file');

$node->safe_psql('postgres', 'DROP EXTENSION malachi');
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
# what a restored dump does to the sequence
$node->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $seg, false)");

my $n = topic_range($node, 'new');
$node->safe_psql('postgres', q{SELECT malachi.produce('new', 'k', 'new 1'::text)});
is($node->safe_psql('postgres',
		"SELECT segment_id FROM malachi.segments WHERE range_id = $n"),
	$seg, 'the new head got the old file\'s id');
is($node->safe_psql('postgres', qq{
		SELECT string_agg("offset" || ':' || convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
		  FROM malachi.read($n, 0, 100)}),
	'0:new 1', 'the new topic reads only its own record');
like(slurp_file($node->logfile), qr/segment file "[^"]*" exists already; emptying it/,
	'the log says the file was emptied');

$node->stop;
done_testing();
