# 035_stale_segment_file.pl: a new head whose id has a file already does not
# take that file's records for its own.
#
# DROP EXTENSION keeps segment files; a dump restored afterwards sets
# malachi.segment_id_seq back to where it was when the dump was taken, so
# new heads get ids whose files are still there.  The writer opened such a
# file as it was: its batches carry the same segment id and base offset,
# so the new head loaded them as its own, and the new topic read an old
# topic's records.  The test sets the sequence back by hand, as the dump
# does.  Now the writer skips such ids (with a LOG line), the old file is
# left to the sweeper's orphan step, and only the new records read back.
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
	is(read_all($node, $range), "0:$value", $label);
}

# offset:value of every record of a range
sub read_all
{
	my ($nd, $range) = @_;
	my $out = '';
	$nd->psql('postgres', qq{
			SELECT string_agg("offset" || ':' || convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
			  FROM malachi.read($range, 0, 100)}, stdout => \$out);
	return $out;
}

my ($r, $seg) = topic_of_ten('old');
ok(-s segment_file($node, $seg), 'the old head has a file');

$node->safe_psql('postgres', 'DROP EXTENSION malachi');
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');
# what a restored dump does to the sequence
$node->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $seg, false)");

my $n = topic_range($node, 'new');
$node->safe_psql('postgres', q{SELECT malachi.produce('new', 'k', 'new 1'::text)});
isnt(head_of($n), $seg, 'the new head skipped the old file\'s id');
reads_only($n, 'new 1', 'the new topic reads only its own record');
like(slurp_file($node->logfile), qr/skipping segment id $seg: a file of that id exists already/,
	'the log says the id was skipped');
ok(-s segment_file($node, $seg), 'the old file is left to the orphan sweep');
$node->safe_psql('postgres', q{SET malachi.orphan_grace = 0; SELECT malachi.run_maintenance()});
ok(!-e segment_file($node, $seg), 'which removes it');
reads_only($n, 'new 1', 'the new topic still reads its record');

# part 2: a new head does not get the id of a deleted segment whose file
# is recycled as spare-r<id> (its old batches and trailer carry the id);
# a head of another id may take that spare, whose start was zeroed
my ($g, $gseg) = topic_of_ten('gone');
$node->safe_psql('postgres', q{SELECT malachi.drop_topic('gone')});
my $recycled = sprintf('%s/malachi/spare-r%016x', $node->data_dir, $gseg);
ok($node->poll_query_until('postgres', "SELECT (pg_stat_file('$recycled', true)).size IS NOT NULL"),
	'the dropped segment\'s file became a recycled spare');
$node->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $gseg, false)");
my $a = topic_range($node, 'again');
$node->safe_psql('postgres', q{SELECT malachi.produce('again', 'k', 'again 1'::text)});
isnt(head_of($a), $gseg, 'the new head skipped the recycled file\'s id');
reads_only($a, 'again 1', 'the new topic reads only its own record');
$node->stop;

# part 3: a sweeper pass that found an old file of an id an orphan
# (held at pause point orphan-checked, advisory lock 77000017) while a
# new head gets that id: before, the writer replaced the old file with
# the new head's, and the pass then removed the new head's file
my $race = malachi_node('orphan_race', "malachi.spare_segments = 0\n");
my $old = topic_range($race, 'old');
$race->safe_psql('postgres', q{SELECT malachi.produce('old', 'k', 'old 1'::text)});
my $oseg = $race->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $old");
$race->safe_psql('postgres', 'DROP EXTENSION malachi');
$race->safe_psql('postgres', 'CREATE EXTENSION malachi');
$race->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $oseg, false)");
my $ctl = $race->background_psql('postgres');
$ctl->query_safe('SELECT pg_advisory_lock(77000017)');
my $sweep = $race->background_psql('postgres');
$sweep->query_safe(q{SET malachi.orphan_grace = 0});
$sweep->query_safe(q{SET malachi.inject_wait = 'orphan-checked'});
$sweep->query_until(qr/started/, "\\echo started\nSELECT malachi.run_maintenance();\n");
ok($race->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted}),
	'the pass holds at the old file, found an orphan');
my $new = topic_range($race, 'new');
$race->safe_psql('postgres', q{SELECT malachi.produce('new', 'k', 'new 1'::text)});
$ctl->query_safe('SELECT pg_advisory_unlock(77000017)');
$ctl->quit;
$sweep->quit;
ok(!-e segment_file($race, $oseg), 'the pass removed the old file');
$race->psql('postgres', q{SELECT malachi.produce('new', 'k', 'new 2'::text)});
is(read_all($race, $new), '0:new 1 1:new 2', 'the new head kept its file and its records');
$race->stop;

# part 4: a recycled file holds layers.  A head that took spare-r<X> wrote
# only the start of it, and X's later batches stayed after its own; that
# head dropped while active made the file spare-r<N>, N > X.  A head whose
# id a restored dump set back to X then took spare-r<N> (only an equal id
# was refused) and, at its next load, took old X's batches after its own
# for its own: same id, and with batches of the same size, the offsets
# each expected.  Now a head takes spare-r<R> only when R is below its
# id, so that every layer of a file is of an id no greater than its name.
my $lay = malachi_node('layers', q{
malachi.spare_segments = 0
malachi.max_spare_segments = 1
malachi.produce_mode = 'immediate'
});
my $spare_of = sub { sprintf('%s/malachi/spare-r%016x', $lay->data_dir, $_[0]) };
my $head = sub {
	$lay->safe_psql('postgres', "SELECT segment_id FROM malachi.segments WHERE range_id = $_[0]");
};
my $ra = topic_range($lay, 'a');
produce_calls($lay, 'a', 10, 10, 200);
my $x = $head->($ra);
$lay->safe_psql('postgres', q{SELECT malachi.drop_topic('a')});
ok($lay->poll_query_until('postgres', "SELECT (pg_stat_file('" . $spare_of->($x) . "', true)).size IS NOT NULL"),
	'layers: the dropped head\'s file became spare-r<X>');
my $rb = topic_range($lay, 'b');
produce_calls($lay, 'b', 2, 10, 200);
my $nseg = $head->($rb);
ok(!-e $spare_of->($x), "layers: head $nseg took spare-r<X> ($x)");
$lay->safe_psql('postgres', q{SELECT malachi.drop_topic('b')});
ok($lay->poll_query_until('postgres', "SELECT (pg_stat_file('" . $spare_of->($nseg) . "', true)).size IS NOT NULL"),
	'layers: and, dropped while active, became spare-r<N>');
$lay->safe_psql('postgres', q{SET malachi.orphan_grace = 0; SELECT malachi.run_maintenance()});
$lay->safe_psql('postgres', "SELECT setval('malachi.segment_id_seq', $x, false)");
my $rc = topic_range($lay, 'c');
produce_calls($lay, 'c', 6, 10, 200);
is($head->($rc), $x, 'layers: the new head has the old id X');
$lay->restart;
is( $lay->safe_psql('postgres', "SELECT count(*) FROM malachi.read($rc, 0, 1000)"),
	'60', 'layers: after a restart the new head reads its own 60 records, no old one');
$lay->stop;
done_testing();
