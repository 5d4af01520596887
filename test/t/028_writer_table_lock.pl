# 028_writer_table_lock.pl: a transaction that holds LOCK TABLE on a
# control-plane table (or ALTER SEQUENCE of the segment ids: before, the
# writer waited for it in nextval) and then produces to a range without a head gets an
# error (object_in_use, after the writer tried for 5 s), not a wait
# forever: the writer worker, which opens heads in transactions of its
# own, waited for that table lock while the backend waited for the worker,
# a cycle no deadlock detector sees.  Once the lock is gone, producing
# works.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use MalachiTest;

my $node = malachi_node('writer_table_lock');
my $r = topic_range($node, 'w');

my %lock = (
	segment_meta => 'LOCK TABLE malachi.segment_meta IN EXCLUSIVE MODE',
	range_meta => 'LOCK TABLE malachi.range_meta IN EXCLUSIVE MODE',
	# the segment id the writer draws: ALTER SEQUENCE blocks nextval
	segment_id_seq => 'ALTER SEQUENCE malachi.segment_id_seq CACHE 1');
for my $table (sort keys %lock)
{
	my $start = time;
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		BEGIN;
		$lock{$table};
		SET LOCAL malachi.produce_mode = immediate;
		SELECT malachi.produce('w', 'k', 'x'::text);
		COMMIT;},
		extra_params => [ '-v', 'VERBOSITY=verbose' ],
		timeout => 60);
	my $took = time - $start;
	isnt($ret, 0, "$table locked: the produce fails");
	like($err, qr/55006: (table|sequence) malachi\.(range_meta|segment_meta|segment_id_seq) is locked by another transaction/,
		"$table locked: with object_in_use");
	like($err, qr/HINT:  Retry once that transaction has ended\./,
		"$table locked: and the writer's hint");
	ok($took >= 4.5 && $took < 30, sprintf("$table locked: after the writer tried for 5 s (%.1f s)", $took));
}

is($node->safe_psql('postgres', q{SELECT malachi.produce('w', 'k', 'y'::text)}),
	$r, 'without the lock, producing works');
is($node->safe_psql('postgres',
		"SELECT string_agg(convert_from(value, 'UTF8'), ',') FROM malachi.read($r, 0, 10)"),
	'y', 'and only that record is there');

$node->stop;
done_testing();
