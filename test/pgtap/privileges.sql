-- privileges.sql: who may call what.  PUBLIC gets nothing; producers and
-- consumers may read and route; malachi_admin may change the control plane.
-- Checked in the catalogs and by calling the functions as roles created in
-- this (rolled back) transaction.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS malachi;

BEGIN;
-- The test role may be called "malachi" too, making "$user" resolve to the
-- schema; keep regclass/regproc output schema-qualified whoever runs this.
SET LOCAL search_path = public;
SELECT plan(136);

---- PUBLIC ----------------------------------------------------------------

-- the ACL, with NULL meaning the default ACL (which grants PUBLIC EXECUTE)
SELECT is_empty($$
	SELECT p.oid::regprocedure::text
	  FROM pg_proc p,
	       aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
	 WHERE p.pronamespace = 'malachi'::regnamespace AND a.grantee = 0
$$, 'PUBLIC holds no privilege on any function in schema malachi (proacl)');
SELECT is((SELECT count(*)::int FROM pg_proc
            WHERE pronamespace = 'malachi'::regnamespace
              AND NOT has_function_privilege('public', oid, 'EXECUTE')),
          19, 'PUBLIC cannot execute any of the 19 functions in schema malachi');
SELECT is_empty($$
	SELECT c.oid::regclass::text
	  FROM pg_class c,
	       aclexplode(coalesce(c.relacl,
	                           acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char",
	                                      c.relowner))) a
	 WHERE c.relnamespace = 'malachi'::regnamespace
	   AND c.relkind IN ('r', 'p', 'v', 'S') AND a.grantee = 0
$$, 'PUBLIC holds no privilege on any table, view or sequence in schema malachi');
SELECT ok(NOT has_schema_privilege('public', 'malachi', 'USAGE'),
          'PUBLIC has no USAGE on schema malachi');

---- function privileges per role ---------------------------------------------

CREATE TEMP TABLE api (fn name, args name[], admin_only bool);
INSERT INTO api VALUES
	('key_hash', '{text}', false),
	('route', '{text,text}', false),
	('active_range_ids', '{text}', false),
	('topic_settings', '{text}', false),
	('topic_policy_name', '{text}', false),
	('topics_bound_to', '{text}', false),
	('create_topic', '{text,integer,integer,text}', true),
	('drop_topic', '{text}', true),
	('alter_topic', '{text,jsonb}', true),
	('create_policy', '{text,jsonb}', true),
	('alter_policy', '{text,jsonb}', true),
	('drop_policy', '{text}', true),
	('bind_topic_policy', '{text,text}', true),
	('split_range', '{bigint}', true),
	('merge_ranges', '{bigint,bigint}', true);

-- the list above is every function that is not a trigger
SELECT set_eq($$
	SELECT proname::text COLLATE "default" FROM pg_proc
	 WHERE pronamespace = 'malachi'::regnamespace AND prorettype <> 'trigger'::regtype
$$, 'SELECT fn::text FROM api',
	'the privilege checks below cover every non-trigger function');

SELECT function_privs_are('malachi', fn, args, r,
	CASE WHEN admin_only AND r <> 'malachi_admin' THEN '{}' ELSE '{EXECUTE}' END::name[])
  FROM api, unnest('{malachi_admin,malachi_producer,malachi_consumer}'::name[]) r
 ORDER BY r, admin_only, fn;

SELECT is_empty($$
	SELECT p.oid::regprocedure::text FROM pg_proc p
	 WHERE p.pronamespace = 'malachi'::regnamespace
	   AND p.prorettype <> 'trigger'::regtype
	   AND NOT has_function_privilege('malachi_admin', p.oid, 'EXECUTE')
$$, 'malachi_admin can execute every function that is not a trigger');

-- trigger functions are called by the triggers only, never granted
SELECT is_empty($$
	SELECT r || ' ' || p.oid::regprocedure::text FROM pg_proc p,
	       unnest('{malachi_admin,malachi_producer,malachi_consumer}'::text[]) r
	 WHERE p.pronamespace = 'malachi'::regnamespace
	   AND p.prorettype = 'trigger'::regtype
	   AND has_function_privilege(r, p.oid, 'EXECUTE')
$$, 'no malachi role is granted a trigger function');

---- table and sequence privileges ---------------------------------------------

SELECT table_privs_are('malachi', t, r,
	CASE WHEN r = 'malachi_admin' AND t <> 'ranges'
	     THEN '{SELECT,INSERT,UPDATE,DELETE}' ELSE '{SELECT}' END::name[])
  FROM unnest('{policy_meta,topic_meta,topic_policy,range_meta,ranges}'::name[]) t,
       unnest('{malachi_admin,malachi_producer,malachi_consumer}'::name[]) r
 ORDER BY r, t;
SELECT sequence_privs_are('malachi', s, r,
	CASE WHEN r = 'malachi_admin' THEN '{USAGE}' ELSE '{}' END::name[])
  FROM unnest('{topic_id_seq,range_id_seq}'::name[]) s,
       unnest('{malachi_admin,malachi_producer,malachi_consumer}'::name[]) r
 ORDER BY r, s;

---- SECURITY DEFINER ----------------------------------------------------------

SELECT is_empty($$
	SELECT p.oid::regprocedure::text FROM pg_proc p
	 WHERE p.pronamespace = 'malachi'::regnamespace AND p.prosecdef
	   AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c
	                    WHERE c LIKE 'search\_path=%')
$$, 'no SECURITY DEFINER function in malachi runs without a pinned search_path');
SELECT is_empty($$
	SELECT p.oid::regprocedure::text FROM pg_proc p, unnest(p.proconfig) c
	 WHERE p.pronamespace = 'malachi'::regnamespace AND p.prosecdef
	   AND c LIKE 'search\_path=%'
	   AND (c LIKE '%$user%' OR c ~ '(=|,)\s*public\s*(,|$)')
$$, 'no SECURITY DEFINER function in malachi puts $user or public on its search_path');

---- calling the functions as each kind of role ---------------------------------

-- fixtures, made as the superuser
SELECT malachi.create_policy('priv_policy', '{"retention": "2 days"}');
SELECT malachi.create_topic('priv_t', 4, NULL, 'priv_policy') AS priv_root \gset
SELECT id AS priv_first FROM malachi.active_range_ids('priv_t') id LIMIT 1 \gset
SELECT malachi.key_hash('order-42') AS hash_order42,
       malachi.route('priv_t', 'order-42') AS route_order42,
       malachi.route('priv_t', 'customer:1001') AS route_c1001 \gset

CREATE ROLE tap_priv_producer NOLOGIN;
CREATE ROLE tap_priv_consumer NOLOGIN;
CREATE ROLE tap_priv_admin NOLOGIN;
CREATE ROLE tap_priv_nobody NOLOGIN;
GRANT malachi_producer TO tap_priv_producer;
GRANT malachi_consumer TO tap_priv_consumer;
GRANT malachi_admin TO tap_priv_admin;

-- what every reader may do, and every change refused, as producer and consumer
CREATE TEMP TABLE reads (what text, stmt text);
INSERT INTO reads VALUES
	('key_hash', 'SELECT malachi.key_hash(''order-42'')'),
	('route', 'SELECT malachi.route(''priv_t'', ''order-42'')'),
	('active_range_ids', 'SELECT * FROM malachi.active_range_ids(''priv_t'')'),
	('topic_settings', 'SELECT malachi.topic_settings(''priv_t'')'),
	('topic_policy_name', 'SELECT malachi.topic_policy_name(''priv_t'')'),
	('topics_bound_to', 'SELECT * FROM malachi.topics_bound_to(''priv_policy'')'),
	('ranges view', 'SELECT * FROM malachi.ranges');
CREATE TEMP TABLE changes (fn text, stmt text);
INSERT INTO changes VALUES
	('create_topic', 'SELECT malachi.create_topic(''priv_new'')'),
	('drop_topic', 'SELECT malachi.drop_topic(''priv_t'')'),
	('alter_topic', 'SELECT malachi.alter_topic(''priv_t'', ''{"zstd_level": 3}'')'),
	('create_policy', 'SELECT malachi.create_policy(''priv_new'', ''{}'')'),
	('alter_policy', 'SELECT malachi.alter_policy(''priv_policy'', ''{}'')'),
	('drop_policy', 'SELECT malachi.drop_policy(''priv_policy'')'),
	('bind_topic_policy', 'SELECT malachi.bind_topic_policy(''priv_t'', NULL)'),
	('split_range', 'SELECT malachi.split_range(' || :priv_first || ')'),
	('merge_ranges', 'SELECT malachi.merge_ranges(' || :priv_first || ', ' || (:priv_first + 1) || ')');
GRANT SELECT ON reads, changes TO PUBLIC;

SET ROLE tap_priv_producer;
SELECT is(current_user::text, 'tap_priv_producer', 'now acting as a producer');
SELECT is(malachi.key_hash('order-42'), :hash_order42::bigint, 'producer: key_hash works');
SELECT is(malachi.route('priv_t', 'order-42'), :route_order42::bigint, 'producer: route works');
SELECT is(malachi.route('priv_t', 'customer:1001'), :route_c1001::bigint, 'producer: route works for another key');
SELECT lives_ok(stmt, 'producer may call ' || what) FROM reads ORDER BY what;
SELECT throws_ok(stmt, '42501', 'permission denied for function ' || fn,
                 'producer may not call ' || fn)
  FROM changes ORDER BY fn;
SELECT throws_ok('INSERT INTO malachi.topic_meta (topic) VALUES (''priv_dml'')', '42501',
                 'permission denied for table topic_meta',
                 'producer may not write the tables directly');
RESET ROLE;

SET ROLE tap_priv_consumer;
SELECT is(malachi.route('priv_t', 'order-42'), :route_order42::bigint, 'consumer: route works');
SELECT lives_ok(stmt, 'consumer may call ' || what) FROM reads ORDER BY what;
SELECT throws_ok(stmt, '42501', 'permission denied for function ' || fn,
                 'consumer may not call ' || fn)
  FROM changes ORDER BY fn;
SELECT throws_ok('UPDATE malachi.range_meta SET state = state', '42501',
                 'permission denied for table range_meta',
                 'consumer may not write the tables directly');
RESET ROLE;
SELECT results_eq('SELECT state COLLATE "default", count(*) FROM malachi.ranges WHERE topic = ''priv_t'' GROUP BY 1 ORDER BY 1',
                  $$VALUES ('active', 4::bigint), ('sealed', 3::bigint)$$,
                  'the refused calls changed nothing');

-- an admin runs the whole control plane
SET ROLE tap_priv_admin;
SELECT lives_ok('SELECT malachi.create_policy(''priv_admin_policy'', ''{"zstd_level": 5}'')',
                'admin: create_policy');
SELECT lives_ok('SELECT malachi.alter_policy(''priv_admin_policy'', ''{"zstd_level": 7, "compression": "zstd"}'')',
                'admin: alter_policy');
SELECT lives_ok('SELECT malachi.create_topic(''priv_admin_t'', 2, 2, ''priv_admin_policy'')',
                'admin: create_topic');
SELECT is(malachi.topic_settings('priv_admin_t') ->> 'zstd_level', '7',
          'admin: the new topic inherits its policy');
SELECT is(malachi.alter_topic('priv_admin_t', '{"zstd_level": 9}') ->> 'zstd_level', '9',
          'admin: alter_topic');
SELECT lives_ok('SELECT malachi.bind_topic_policy(''priv_admin_t'', NULL)',
                'admin: bind_topic_policy');
SELECT is(malachi.topic_policy_name('priv_admin_t'), NULL, 'admin: the topic is detached');
SELECT id AS admin_first FROM malachi.active_range_ids('priv_admin_t') id LIMIT 1 \gset
SELECT left_id AS admin_left, right_id AS admin_right FROM malachi.split_range(:admin_first) \gset
SELECT results_eq(
	'SELECT * FROM malachi.active_range_ids(''priv_admin_t'')',
	format('SELECT unnest(ARRAY[%s, %s, %s]::bigint[])', :admin_left, :admin_right, :admin_first + 1),
	'admin: split_range replaced the range by its halves');
-- run the deferred tiling check now, as the admin (commit would run it)
SELECT lives_ok('SET CONSTRAINTS ALL IMMEDIATE', 'admin: the split passes the tiling check');
SELECT lives_ok('SET CONSTRAINTS ALL DEFERRED', 'deferred again');
SELECT is(malachi.merge_ranges(:admin_left, :admin_right) > :admin_right, true,
          'admin: merge_ranges returns a new child');
SELECT is((SELECT count(*)::int FROM malachi.active_range_ids('priv_admin_t')), 2,
          'admin: the merge restored two active ranges');
SELECT lives_ok('SELECT malachi.drop_topic(''priv_admin_t'')', 'admin: drop_topic');
SELECT lives_ok('SELECT malachi.drop_policy(''priv_admin_policy'')', 'admin: drop_policy');
SELECT lives_ok('SET CONSTRAINTS ALL IMMEDIATE', 'admin: the deferred checks pass');
SELECT lives_ok('SET CONSTRAINTS ALL DEFERRED', 'deferred again');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM malachi.topic_meta WHERE topic = 'priv_admin_t'), 0,
          'the admin''s topic is gone');

-- a role holding no malachi role cannot even hash a key
SET ROLE tap_priv_nobody;
SELECT throws_ok('SELECT malachi.key_hash(''k'')', '42501',
                 'permission denied for schema malachi',
                 'a role without a malachi role has no USAGE on the schema');
RESET ROLE;
GRANT USAGE ON SCHEMA malachi TO tap_priv_nobody;
SET ROLE tap_priv_nobody;
SELECT throws_ok('SELECT malachi.key_hash(''k'')', '42501',
                 'permission denied for function key_hash',
                 'with USAGE on the schema, key_hash is still refused');
SELECT throws_ok('SELECT malachi.route(''priv_t'', ''k'')', '42501',
                 'permission denied for function route',
                 'with USAGE on the schema, route is still refused');
SELECT throws_ok('SELECT count(*) FROM malachi.range_meta', '42501',
                 'permission denied for table range_meta',
                 'with USAGE on the schema, range_meta cannot be read');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
