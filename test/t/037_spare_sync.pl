# 037_spare_sync.pl: a spare file whose fsync fails is thrown away; the
# server does not PANIC.
#
# PostgreSQL makes a failed fsync of its own files a PANIC
# (data_sync_elevel): a later fsync may report success over dirty pages
# the failed one dropped.  Nothing depends on a spare's zeros, so the
# writer worker removes the file, logs an ERROR and tries again later.
# Failure point fail-spare-sync (in malachi.inject_wait, which the worker
# reads from the configuration) makes the fsync of a spare it has just
# filled fail with EIO.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = malachi_node('spare_sync', q{
malachi.produce_mode = 'immediate'
malachi.segment_max_bytes = 1048576
malachi.spare_segments = 1
malachi.inject_wait = 'fail-spare-sync'
});
my $spares = q{SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f ~ '^spare-[0-9]'};
my $tmp = q{SELECT count(*) FROM pg_ls_dir('malachi') f WHERE f ~ '\.tmp$'};

ok($node->wait_for_log(qr/could not fsync spare segment file/),
	'the first spare\'s fsync fails, logged');

my $log = slurp_file($node->logfile);
unlike($log, qr/PANIC/, 'no PANIC');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is up');
is($node->safe_psql('postgres', $tmp), '0', 'the unfinished spare was removed');
is($node->safe_psql('postgres', $spares), '0', 'and did not become a spare');

# the worker still serves: new heads, which grow their files
my $range = topic_range($node, 't');
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'k', 'one'::text)});
$node->safe_psql('postgres', qq{SELECT malachi.roll($range)});
$node->safe_psql('postgres', q{SELECT malachi.produce('t', 'k', 'two'::text)});
is( $node->safe_psql('postgres', qq{
	SELECT string_agg(convert_from(value, 'UTF8'), ' ' ORDER BY "offset")
	  FROM malachi.read($range, 0, 10)}),
	'one two', 'producing goes on in a new head');

$node->stop;
done_testing();
