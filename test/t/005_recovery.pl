# 005_recovery.pl: what a restart finds in segment files.
#
# - A fence that reached the file (seal trailer) but not the control plane
#   before a crash is recorded with the file's answer, and producing goes on
#   in a new head.
# - A flipped byte inside a sealed segment makes reads of it fail with
#   data_corrupted (XX001), naming the segment; other segments still read.
# - A head whose file cannot be read after a restart makes reads of its
#   range fail with metadata_unavailable (MA015) instead of an empty page;
#   other ranges still read, and the range reads again once the file does.
# - A head whose file is missing is not silently recreated empty (which
#   would lose acknowledged records and reuse their offsets).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MalachiTest;

my $node = PostgreSQL::Test::Cluster->new('recovery');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'malachi'");
# what a restart finds by itself: no sweeper pass completes fences meanwhile
$node->append_conf('postgresql.conf', "malachi.sweep_interval = '1d'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION malachi');

#---- a fence in the file, not in the control plane ----

my $r = $node->safe_psql('postgres', q{SELECT malachi.create_topic('fence')});
$node->safe_psql('postgres', qq{
	SELECT malachi.produce_batch('fence', array_agg('k' || i), array_agg('v' || i))
	  FROM generate_series(1, 50) i});
my $seg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $r AND state = 'active'");

# crash between the roll's fence and recording its seal
crash_at_seal_fenced($node, $r);
$node->start;

is($node->safe_psql('postgres',
	"SELECT state FROM malachi.segment_meta WHERE segment_id = $seg"),
	'active', 'the crash came before the seal was recorded');
is($node->safe_psql('postgres', "SELECT count(*), max(\"offset\") FROM malachi.read($r, 0, 1000)"),
	'50|49', 'the fenced head reads to its fence');
is($node->safe_psql('postgres', q{SELECT malachi.produce('fence', 'k', 'after the crash'::text) IS NOT NULL}),
	't', 'producing goes on');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(format('%s:%s-%s:%s', seq, base_offset, end_offset, state), ' ' ORDER BY seq)
	  FROM malachi.segments WHERE range_id = $r}),
	'0:0-50:sealed 1:50-51:active',
	'the fence found in the file was recorded with its end; a new head follows it');
is($node->safe_psql('postgres', "SELECT \"offset\", convert_from(value, 'UTF8') FROM malachi.read($r, 50, 10)"),
	'50|after the crash', 'the new record lands right after the fence');

#---- a flipped byte in a sealed segment ----

my $c = $node->safe_psql('postgres', q{SELECT malachi.create_topic('corrupt')});
for my $b (1 .. 2)
{
	$node->safe_psql('postgres', qq{
		SELECT malachi.produce_batch('corrupt', array_agg('k'::text), array_agg(repeat('x', 200) || i))
		  FROM generate_series(1, 100) i});
	$node->safe_psql('postgres', "SELECT malachi.roll($c)");
}
my ($bad, $good) = split /\n/, $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $c ORDER BY seq");

# flip one byte in the middle of the first segment's payload
flip_byte(segment_file($node, $bad), 64 + 5000);

my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM malachi.read($c, 0, 1000)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'reading the damaged segment fails');
like($err, qr/XX001/, 'with data_corrupted');
like($err, qr/segment $bad is corrupt at offset \d+/, 'naming the segment and offset');
is($node->safe_psql('postgres', "SELECT count(*), min(\"offset\") FROM malachi.read($c, 100, 1000)"),
	'100|100', 'the other sealed segment still reads');

#---- a head whose file cannot be read ----

my $u = $node->safe_psql('postgres', q{SELECT malachi.create_topic('unreadable')});
my $o = $node->safe_psql('postgres', q{SELECT malachi.create_topic('other')});
$node->safe_psql('postgres', q{SELECT malachi.produce('unreadable', 'k', 'v'::text)});
$node->safe_psql('postgres', q{SELECT malachi.produce('other', 'k', 'v'::text)});
my $useg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $u AND state = 'active'");
$node->stop;
chmod(0000, segment_file($node, $useg)) or die "chmod: $!";
$node->start;

($ret, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM malachi.read($u, 0, 10)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'a head that cannot be recovered is not read as empty');
like($err, qr/MA015/, 'metadata_unavailable');
like($err, qr/end of segment $useg is unknown/, 'naming the segment');
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($o, 0, 10)"),
	'1', 'other ranges still read');

chmod(0600, segment_file($node, $useg)) or die "chmod: $!";
is($node->safe_psql('postgres', "SELECT count(*) FROM malachi.read($u, 0, 10)"),
	'1', 'the range reads again once its file does');

#---- a head whose file is gone ----

my $g = $node->safe_psql('postgres', q{SELECT malachi.create_topic('gone')});
$node->safe_psql('postgres', q{SELECT malachi.produce('gone', 'k', 'acknowledged'::text)});
my $gseg = $node->safe_psql('postgres',
	"SELECT segment_id FROM malachi.segments WHERE range_id = $g AND state = 'active'");
$node->stop;
unlink(segment_file($node, $gseg)) or die "unlink: $!";
$node->start;

($ret, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM malachi.read($g, 0, 10)",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/MA015/, 'a head whose file is missing is unreadable, not empty');
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT malachi.produce('gone', 'k', 'would reuse offset 0'::text)});
isnt($ret, 0, 'producing does not recreate the missing file and reuse its offsets');
like($err, qr/could not open segment file/, 'naming the missing file');

$node->stop;
done_testing();
