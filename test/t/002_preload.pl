# 002_preload.pl: malachi works only when preloaded, and only in the
# database malachi.database names.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('preload');
$node->init;
# after TEMP_CONFIG (which preloads malachi), so this wins
$node->append_conf('postgresql.conf', "shared_preload_libraries = ''");
$node->start;

is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'the node starts without malachi preloaded');

# Run SQL expected to fail; return its stderr with the SQLSTATE shown.
sub sql_error
{
	my ($db, $sql) = @_;
	my ($stdout, $stderr);
	my $rc = $node->psql(
		$db, "\\set VERBOSITY verbose\n$sql",
		stdout => \$stdout,
		stderr => \$stderr,
		on_error_stop => 1);
	isnt($rc, 0, "'$sql' in $db fails");
	return $stderr;
}

# CREATE EXTENSION must succeed silently in a database
sub create_extension_ok
{
	my ($db) = @_;
	my ($rc, $stdout, $stderr) =
	  $node->psql($db, 'CREATE EXTENSION malachi', on_error_stop => 1);
	is($rc, 0, "CREATE EXTENSION works in $db");
	is($stderr, '', 'without any message');
}

#---- not preloaded ----

my $err = sql_error('postgres', 'CREATE EXTENSION malachi');
like($err, qr/ERROR:  55000: /, 'CREATE EXTENSION without preloading: SQLSTATE 55000');
like($err, qr/malachi must be loaded via shared_preload_libraries/,
	'CREATE EXTENSION without preloading: the message names shared_preload_libraries');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_extension WHERE extname = 'malachi'}),
	'0', 'no extension was created');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_namespace WHERE nspname = 'malachi'}),
	'0', 'no schema was left behind');

$err = sql_error('postgres', q{LOAD 'malachi'});
like($err, qr/ERROR:  55000: /, 'LOAD without preloading: SQLSTATE 55000');
like($err, qr/shared_preload_libraries/,
	'LOAD without preloading: the message names shared_preload_libraries');

# the library's functions cannot be reached some other way either
$err = sql_error('postgres',
	q{CREATE FUNCTION public.kh(text) RETURNS bigint AS 'malachi', 'malachi_key_hash' LANGUAGE C});
like($err, qr/ERROR:  55000: .*shared_preload_libraries/,
	'binding a C function of the library without preloading: 55000');

# A malachi.database placeholder in the configuration does not pass for
# "loaded": the guard falls through to loading the library, which refuses.
$node->append_conf('postgresql.conf', "malachi.database = 'postgres'");
$node->restart;
$err = sql_error('postgres', 'CREATE EXTENSION malachi');
like($err, qr/ERROR:  55000: .*shared_preload_libraries/,
	'CREATE EXTENSION with only a malachi.database placeholder: 55000 naming shared_preload_libraries');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_extension WHERE extname = 'malachi'}),
	'0', 'still no extension');

#---- preloaded ----

$node->append_conf('postgresql.conf', "shared_preload_libraries = 'malachi'");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'malachi', 'malachi is preloaded after the restart');
create_extension_ok('postgres');
is( $node->safe_psql(
		'postgres', q{
SELECT malachi.create_topic('pre', 2) > 0,
       (SELECT count(*) FROM malachi.active_range_ids('pre'))}),
	't|2', 'and its functions work');
is($node->safe_psql('postgres', q{LOAD 'malachi'; SELECT 1}),
	'1', 'LOAD of the preloaded library is harmless');

#---- malachi.database names another database ----

$node->safe_psql('postgres', 'DROP EXTENSION malachi');
$node->append_conf('postgresql.conf', "malachi.database = 'otherdb'");
$node->restart;
is($node->safe_psql('postgres', 'SHOW malachi.database'),
	'otherdb', 'malachi.database is otherdb after the restart');

$err = sql_error('postgres', 'CREATE EXTENSION malachi');
like($err, qr/ERROR:  55000: /, 'CREATE EXTENSION outside malachi.database: SQLSTATE 55000');
like($err, qr/malachi can only be created in database "otherdb"/,
	'CREATE EXTENSION outside malachi.database: the message names "otherdb"');
like($err, qr/The current database is "postgres"/,
	'CREATE EXTENSION outside malachi.database: the detail names the current database');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_extension WHERE extname = 'malachi'}),
	'0', 'no extension was created in postgres');

$node->safe_psql('postgres', 'CREATE DATABASE otherdb');
create_extension_ok('otherdb');
is( $node->safe_psql(
		'otherdb', q{
SELECT malachi.create_topic('elsewhere', 4) > 0,
       (SELECT count(*) FROM malachi.active_range_ids('elsewhere')),
       malachi.route('elsewhere', 'k') = ANY (ARRAY(SELECT malachi.active_range_ids('elsewhere')))}),
	't|4|t', 'malachi works in otherdb');
# the roles already existed (created with the first extension): reused
is( $node->safe_psql(
		'otherdb', q{
SELECT count(*) FROM pg_roles
 WHERE rolname IN ('malachi_admin', 'malachi_producer', 'malachi_consumer')}),
	'3', 'the cluster-wide roles exist once');

$node->stop;
done_testing();
