# 018_void_flags.pl: one head whose void flag cannot be written does not
# keep the sweeper from flagging the others.
#
# Two topics' heads each hold an aborted transaction's batch, void in
# memory only.  The first head's file is made read-only, so flagging it
# fails.  The sweeper's pass reports that head (a WARNING, errors: 1 and
# last_error) and still flags the second head's batch in its file; once
# the file is writable again the next pass flags the first.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('void_flags', qq{
malachi.produce_mode = 'transactional'
});

# per topic: a committed batch, then an aborted one behind it
my %head;
for my $topic ('a', 'b')
{
	$node->safe_psql('postgres', qq{
		SELECT malachi.create_topic('$topic', 1);
		SELECT malachi.produce('$topic', 'k', 'committed')});
	my ($segment, $end) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT segment_id, byte_size FROM malachi.segments s
		  JOIN malachi.ranges r USING (range_id) WHERE r.topic = '$topic'});
	like(produce_aborted($node, $topic, 'k', 'aborted'), qr/fail-after-flush/,
		"topic $topic: the second batch's transaction failed");
	$head{$topic} = { file => segment_file($node, $segment), at => $end };
}

# the VOID flag of a topic's aborted batch
sub head_flag { my ($t) = @_; return void_flag($head{$t}{file}, $head{$t}{at}); }
is(head_flag('a') + head_flag('b'), 0, 'both batches are void in memory only');

chmod(0400, $head{a}{file}) or die "chmod: $!";
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT malachi.run_maintenance() -> 'errors'});
is($out, '1', 'the pass counts one failed head');
like($err, qr/could not flag the void batches of segment/, 'and warns of it');
like($node->safe_psql('postgres', q{SELECT last_error FROM malachi.sweeper_status}),
	qr/^void flags: /, 'sweeper_status shows the failure');
is(head_flag('b'), 1, "the other head's batch is flagged in its file");
is(head_flag('a'), 0, 'the read-only one is not');

chmod(0600, $head{a}{file}) or die "chmod: $!";
is($node->safe_psql('postgres', q{SELECT malachi.run_maintenance() -> 'errors'}), '0',
	'with the file writable again the next pass succeeds');
is(head_flag('a'), 1, 'and flags the first head');
is($node->safe_psql('postgres', q{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ')
	  FROM malachi.read((SELECT range_id FROM malachi.ranges WHERE topic = 'a'), 0, 10)}),
	'committed', 'only the committed record reads back');

$node->stop;
done_testing();
