-- privileges.sql: who may call what.  PUBLIC gets nothing; producers and
-- consumers may read the control plane and route; producers may produce and
-- consumers may read records and consume them as groups (writing the groups'
-- positions); malachi_admin may do all that, change the control plane,
-- roll segments and change the declared lists (whose children run as the
-- role that declared them), which producers and consumers may only read,
-- as the children's state; nobody but a superuser may call the trigger
-- functions or init_storage.  Checked in the catalogs and by calling the
-- functions as roles created in this (rolled back) transaction.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS malachi;

-- A transaction that changed metadata cannot produce, so the topic the
-- segment-store calls use is committed here, before the pgTAP transaction,
-- and dropped (with its segments) after it.  Produced records stay even when
-- the transaction rolls back.  First the leftovers of an interrupted run.
DO $$ BEGIN
	PERFORM malachi.drop_topic(topic) FROM malachi.topic_meta WHERE topic = 'priv_seg';
END $$;
SELECT malachi.create_topic('priv_seg') AS seg_range \gset

BEGIN;
-- The test role may be called "malachi" too, making "$user" resolve to the
-- schema; keep regclass/regproc output schema-qualified whoever runs this.
SET LOCAL search_path = public;
-- this file rolls back: produce must append at the call to be read back here
SET LOCAL malachi.produce_mode = immediate;
SELECT plan(427);

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
          54, 'PUBLIC cannot execute any of the 54 functions in schema malachi');
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

-- roles: the malachi roles that may execute the function, exactly
CREATE TEMP TABLE api (fn name, args name[], roles name[]);
INSERT INTO api VALUES
	('key_hash', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('route', '{text,text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('active_range_ids', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('topic_settings', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('topic_policy_name', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('topics_bound_to', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('head_state', '{}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('sweeper_state', '{}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('children_state', '{}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('declared_children', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('declared_child', '{text,text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('declared_manifest', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('declared_parked', '{text}', '{malachi_admin,malachi_producer,malachi_consumer}'),
	('produce', '{text,text,bytea,jsonb}', '{malachi_admin,malachi_producer}'),
	('produce', '{text,text,text,jsonb}', '{malachi_admin,malachi_producer}'),
	('produce', '{text,text,jsonb,jsonb}', '{malachi_admin,malachi_producer}'),
	('produce_batch', '{text,text[],bytea[],jsonb[]}', '{malachi_admin,malachi_producer}'),
	('produce_batch', '{text,text[],text[],jsonb[]}', '{malachi_admin,malachi_producer}'),
	('produce_batch', '{text,text[],jsonb[],jsonb[]}', '{malachi_admin,malachi_producer}'),
	('read', '{bigint,bigint,integer}', '{malachi_admin,malachi_consumer}'),
	('offset_for_time', '{bigint,timestamptz}', '{malachi_admin,malachi_consumer}'),
	('read_history', '{bigint}', '{malachi_admin,malachi_consumer}'),
	('stream_history', '{bigint,text,integer}', '{malachi_admin,malachi_consumer}'),
	('read_consume', '{bigint,text,integer}', '{malachi_admin,malachi_consumer}'),
	('consume', '{text,text,integer,interval}', '{malachi_admin,malachi_consumer}'),
	('poll', '{text,text,integer}', '{malachi_admin,malachi_consumer}'),
	('commit_offset', '{text,text,jsonb}', '{malachi_admin,malachi_consumer}'),
	('committed_offsets', '{text,text}', '{malachi_admin,malachi_consumer}'),
	('reset_group', '{text,text,text}', '{malachi_admin,malachi_consumer}'),
	('create_topic', '{text,integer,integer,text}', '{malachi_admin}'),
	('drop_topic', '{text}', '{malachi_admin}'),
	('alter_topic', '{text,jsonb}', '{malachi_admin}'),
	('create_policy', '{text,jsonb}', '{malachi_admin}'),
	('alter_policy', '{text,jsonb}', '{malachi_admin}'),
	('drop_policy', '{text}', '{malachi_admin}'),
	('bind_topic_policy', '{text,text}', '{malachi_admin}'),
	('split_range', '{bigint}', '{malachi_admin}'),
	('merge_ranges', '{bigint,bigint}', '{malachi_admin}'),
	('roll', '{bigint}', '{malachi_admin}'),
	('run_maintenance', '{}', '{malachi_admin}'),
	('delete_segment', '{bigint}', '{malachi_admin}'),
	('declare_child', '{text,text,jsonb,jsonb}', '{malachi_admin}'),
	('undeclare_child', '{text,text}', '{malachi_admin}'),
	('adopt_manifest', '{text,jsonb}', '{malachi_admin}'),
	('clear_declared', '{text}', '{malachi_admin}'),
	-- the check constraint of stored settings, for those who may write them
	('settings_valid', '{jsonb,text}', '{malachi_admin}'),
	-- run by CREATE EXTENSION only
	('init_storage', '{}', '{}');

-- the list above is every function that is not a trigger, overloads included
SELECT set_eq($$
	SELECT oid::regprocedure::text COLLATE "default" FROM pg_proc
	 WHERE pronamespace = 'malachi'::regnamespace AND prorettype <> 'trigger'::regtype
$$, $$
	SELECT format('malachi.%s(%s)', fn, array_to_string(args, ','))::regprocedure::text
	  FROM api
$$, 'the privilege checks below cover every non-trigger function');

SELECT function_privs_are('malachi', fn, args, r,
	CASE WHEN r = ANY (roles) THEN '{EXECUTE}' ELSE '{}' END::name[])
  FROM api, unnest('{malachi_admin,malachi_producer,malachi_consumer}'::name[]) r
 ORDER BY r, cardinality(roles) DESC, fn, args;

-- internal: the trigger functions and init_storage
CREATE TEMP VIEW internal_fn AS
	SELECT p.oid FROM pg_proc p
	 WHERE p.pronamespace = 'malachi'::regnamespace
	   AND (p.prorettype = 'trigger'::regtype
	        OR p.oid = 'malachi.init_storage()'::regprocedure);
GRANT SELECT ON internal_fn TO PUBLIC;

SELECT is_empty($$
	SELECT p.oid::regprocedure::text FROM pg_proc p
	 WHERE p.pronamespace = 'malachi'::regnamespace
	   AND p.oid NOT IN (SELECT oid FROM internal_fn)
	   AND NOT has_function_privilege('malachi_admin', p.oid, 'EXECUTE')
$$, 'malachi_admin can execute every function but the trigger functions and init_storage');

-- trigger functions are called by the triggers only, init_storage by
-- CREATE EXTENSION only: never granted
SELECT is((SELECT count(*)::int FROM internal_fn), 8,
          'internal functions: 7 trigger functions and init_storage');
SELECT is_empty($$
	SELECT r || ' ' || p.oid::regprocedure::text FROM pg_proc p,
	       unnest('{malachi_admin,malachi_producer,malachi_consumer}'::text[]) r
	 WHERE p.oid IN (SELECT oid FROM internal_fn)
	   AND has_function_privilege(r, p.oid, 'EXECUTE')
$$, 'no malachi role may execute a trigger function or init_storage');

---- table and sequence privileges ---------------------------------------------

-- all may read every table and view; malachi_admin may write the four
-- control-plane tables, the two declared-list tables and the groups'
-- positions (consumers write them only through the group functions, which
-- run those writes as a superuser), nobody segment_meta (the writer
-- worker does)
SELECT table_privs_are('malachi', t, r,
	CASE WHEN (r = 'malachi_admin'
	           AND t IN ('policy_meta', 'topic_meta', 'topic_policy', 'range_meta',
	                     'declared_hubs', 'declared_children'))
	       OR (r = 'malachi_admin' AND t = 'group_positions')
	     THEN '{SELECT,INSERT,UPDATE,DELETE}' ELSE '{SELECT}' END::name[])
  FROM unnest('{policy_meta,topic_meta,topic_policy,range_meta,segment_meta,group_positions,declared_hubs,declared_children,ranges,segments,stat_topics,sweeper_status,consumer_lag,children}'::name[]) t,
       unnest('{malachi_admin,malachi_producer,malachi_consumer}'::name[]) r
 ORDER BY r, t;
-- malachi_admin has USAGE on the sequences of the tables it may write;
-- segment ids come only from the writer worker
SELECT sequence_privs_are('malachi', s, r,
	CASE WHEN r = 'malachi_admin' AND s <> 'segment_id_seq' THEN '{USAGE}' ELSE '{}' END::name[])
  FROM unnest('{topic_id_seq,range_id_seq,segment_id_seq}'::name[]) s,
       unnest('{malachi_admin,malachi_producer,malachi_consumer}'::name[]) r
 ORDER BY r, s;

-- nobody else: the ACLs name the owner and the three malachi roles only
SELECT is_empty($$
	SELECT p.oid::regprocedure::text || ' ' || a.grantee::regrole::text FROM pg_proc p,
	       aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
	 WHERE p.pronamespace = 'malachi'::regnamespace AND a.grantee <> p.proowner
	   AND a.grantee::regrole::text NOT IN ('malachi_admin', 'malachi_producer', 'malachi_consumer')
$$, 'no role but the owner and the malachi roles holds a privilege on a function in malachi');
SELECT is_empty($$
	SELECT c.oid::regclass::text || ' ' || a.grantee::regrole::text FROM pg_class c,
	       aclexplode(coalesce(c.relacl,
	                           acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char",
	                                      c.relowner))) a
	 WHERE c.relnamespace = 'malachi'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
	   AND a.grantee <> c.relowner
	   AND a.grantee::regrole::text NOT IN ('malachi_admin', 'malachi_producer', 'malachi_consumer')
$$, 'no role but the owner and the malachi roles holds a privilege on a relation in malachi');

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

CREATE ROLE tap_priv_producer NOLOGIN;
CREATE ROLE tap_priv_consumer NOLOGIN;
CREATE ROLE tap_priv_admin NOLOGIN;
CREATE ROLE tap_priv_nobody NOLOGIN;
GRANT malachi_producer TO tap_priv_producer;
GRANT malachi_consumer TO tap_priv_consumer;
GRANT malachi_admin TO tap_priv_admin;

-- The segment store first: nothing in this transaction may have changed
-- metadata yet.  Topic priv_seg (committed above) has one range, :seg_range.
CREATE TEMP TABLE produces (fn text, what text, stmt text);
INSERT INTO produces VALUES
	('produce', 'produce(bytea)', 'SELECT malachi.produce(''priv_seg'', ''seg-x'', ''\x00''::bytea)'),
	('produce', 'produce(text)', 'SELECT malachi.produce(''priv_seg'', ''seg-x'', ''x''::text)'),
	('produce', 'produce(jsonb)', 'SELECT malachi.produce(''priv_seg'', ''seg-x'', ''{"x": 0}''::jsonb)'),
	('produce_batch', 'produce_batch(bytea[])', 'SELECT malachi.produce_batch(''priv_seg'', ARRAY[''seg-x''], ARRAY[''\x00''::bytea])'),
	('produce_batch', 'produce_batch(text[])', 'SELECT malachi.produce_batch(''priv_seg'', ARRAY[''seg-x''], ARRAY[''x''::text])'),
	('produce_batch', 'produce_batch(jsonb[])', 'SELECT malachi.produce_batch(''priv_seg'', ARRAY[''seg-x''], ARRAY[''{"x": 0}''::jsonb])');
CREATE TEMP TABLE consumes (fn text, stmt text);
INSERT INTO consumes VALUES
	('read', 'SELECT * FROM malachi.read(' || :seg_range || ', 0, 100)'),
	('offset_for_time', 'SELECT malachi.offset_for_time(' || :seg_range || ', now())'),
	('read_history', 'SELECT * FROM malachi.read_history(' || :seg_range || ')'),
	('stream_history', 'SELECT * FROM malachi.stream_history(' || :seg_range || ', NULL, 100)'),
	('read_consume', 'SELECT * FROM malachi.read_consume(' || :seg_range || ', NULL, 100)'),
	('consume', 'SELECT * FROM malachi.consume(''priv_seg'', ''tap_priv_refused'', 100)'),
	('poll', 'SELECT * FROM malachi.poll(''priv_seg'', ''tap_priv_refused'', 100)'),
	('commit_offset', 'SELECT malachi.commit_offset(''tap_priv_refused'', ''priv_seg'', '''
	                  || jsonb_build_object(:seg_range::text, 1)::text || ''')'),
	('committed_offsets', 'SELECT * FROM malachi.committed_offsets(''tap_priv_refused'', ''priv_seg'')'),
	('reset_group', 'SELECT malachi.reset_group(''tap_priv_refused'', ''priv_seg'', ''latest'')');
GRANT SELECT ON produces, consumes TO PUBLIC;

-- a producer produces every value type, and cannot read
SET ROLE tap_priv_producer;
SELECT is(malachi.produce('priv_seg', 'seg-1', '\x01'::bytea), :seg_range::bigint,
          'producer: produce(bytea) returns the key''s range');
SELECT is(malachi.produce('priv_seg', 'seg-2', 'two'::text, '{"h": 2}'), :seg_range::bigint,
          'producer: produce(text) with headers');
SELECT is(malachi.produce('priv_seg', 'seg-3', '{"three": 3}'::jsonb), :seg_range::bigint,
          'producer: produce(jsonb)');
SELECT is(malachi.produce_batch('priv_seg', ARRAY['seg-4', 'seg-5'], ARRAY['\x04', '\x05']::bytea[]),
          2::bigint, 'producer: produce_batch(bytea[]) accepts both records');
SELECT is(malachi.produce_batch('priv_seg', ARRAY['seg-6'], ARRAY['six'], ARRAY['{"h": 6}']::jsonb[]),
          1::bigint, 'producer: produce_batch(text[]) with headers');
SELECT is(malachi.produce_batch('priv_seg', ARRAY['seg-7'], ARRAY['{"seven": 7}']::jsonb[]),
          1::bigint, 'producer: produce_batch(jsonb[])');
SELECT throws_ok(stmt, '42501', 'permission denied for function ' || fn,
                 'producer may not call ' || fn)
  FROM consumes ORDER BY fn;
SELECT throws_ok('INSERT INTO malachi.group_positions (group_name, range_id, topic_id, "offset", pending)'
                 || ' SELECT ''tap_priv_refused'', range_id, topic_id, 0, ''{}'' FROM malachi.range_meta'
                 || ' WHERE range_id = ' || :seg_range, '42501',
                 'permission denied for table group_positions',
                 'producer may not write group positions directly');
RESET ROLE;
SELECT is_empty('SELECT * FROM malachi.group_positions WHERE range_id = ' || :seg_range,
                'the refused consumer calls left no group position');

-- a consumer reads what the producer wrote, and cannot produce
SET ROLE tap_priv_consumer;
SELECT results_eq(
	'SELECT range_id, "offset", key, value, headers FROM malachi.read(' || :seg_range || ', 0, 100)',
	format($$VALUES (%1$s::bigint, 0::bigint, 'seg-1', '\x01'::bytea, NULL::jsonb),
	                (%1$s, 1, 'seg-2', convert_to('two', 'UTF8'), '{"h": 2}'),
	                (%1$s, 2, 'seg-3', convert_to('{"three": 3}', 'UTF8'), NULL),
	                (%1$s, 3, 'seg-4', '\x04', NULL), (%1$s, 4, 'seg-5', '\x05', NULL),
	                (%1$s, 5, 'seg-6', convert_to('six', 'UTF8'), '{"h": 6}'),
	                (%1$s, 6, 'seg-7', convert_to('{"seven": 7}', 'UTF8'), NULL)$$, :seg_range),
	'consumer: read returns the producer''s records in offset order');
SELECT is(malachi.offset_for_time(:seg_range, '-infinity'), 0::bigint,
          'consumer: offset_for_time before everything is the first offset');
SELECT is(malachi.offset_for_time(:seg_range, 'infinity'), 7::bigint,
          'consumer: offset_for_time after everything is the range''s end');
SELECT throws_ok(stmt, '42501', 'permission denied for function ' || fn,
                 'consumer may not call ' || what)
  FROM produces ORDER BY what;

-- a consumer reads the range's stream and consumes the topic as a group
SELECT is((SELECT array_agg(key ORDER BY "offset") FROM malachi.read_history(:seg_range)),
          ARRAY['seg-1', 'seg-2', 'seg-3', 'seg-4', 'seg-5', 'seg-6', 'seg-7'],
          'consumer: read_history returns the range''s stream');
SELECT results_eq(
	'SELECT cardinality(records), next_cursor IS NULL FROM malachi.stream_history(' || :seg_range || ', NULL, 100)',
	$$VALUES (7, true)$$,
	'consumer: stream_history pages the whole stream and ends it');
SELECT next_cursor AS seg_tail FROM malachi.read_consume(:seg_range, NULL, 100) \gset
SELECT results_eq(
	format('SELECT (SELECT array_agg(r.key ORDER BY r."offset") FROM unnest(records) r), next_cursor IS NULL'
	       ' FROM malachi.read_consume(%s, NULL, 100)', :seg_range),
	$$VALUES (ARRAY['seg-1', 'seg-2', 'seg-3', 'seg-4', 'seg-5', 'seg-6', 'seg-7'], false)$$,
	'consumer: read_consume returns the stream and a cursor to tail it');
SELECT results_eq(
	format('SELECT cardinality(records), next_cursor FROM malachi.read_consume(%s, %L, 100)',
	       :seg_range, :'seg_tail'),
	format('VALUES (0, %L)', :'seg_tail'),
	'consumer: a caught-up read_consume page is empty and keeps its cursor');
SELECT is((SELECT array_agg("offset") FROM malachi.poll('priv_seg', 'tap_priv_g', 3)),
          ARRAY[0, 1, 2]::bigint[], 'consumer: a new group polls from the earliest record');
SELECT is_empty($$SELECT * FROM malachi.committed_offsets('tap_priv_g', 'priv_seg')$$,
                'consumer: poll does not advance the group');
SELECT results_eq(
	$$SELECT range_id, "offset", key FROM malachi.consume('priv_seg', 'tap_priv_g', 5)$$,
	format($$VALUES (%1$s::bigint, 0::bigint, 'seg-1'), (%1$s, 1, 'seg-2'), (%1$s, 2, 'seg-3'),
	                (%1$s, 3, 'seg-4'), (%1$s, 4, 'seg-5')$$, :seg_range),
	'consumer: consume returns the group''s next records');
SELECT results_eq($$SELECT * FROM malachi.committed_offsets('tap_priv_g', 'priv_seg')$$,
                  format('VALUES (%s::bigint, 5::bigint)', :seg_range),
                  'consumer: consume advanced the group');
SELECT results_eq(
	$$SELECT "group", topic, range_id, committed, end_offset, lag FROM malachi.consumer_lag
	   WHERE "group" = 'tap_priv_g'$$,
	format($$VALUES ('tap_priv_g'::text, 'priv_seg'::text, %s::bigint, 5::bigint, 7::bigint, 2::bigint)$$,
	       :seg_range),
	'consumer: consumer_lag shows the group two records behind');
SELECT lives_ok(format('SELECT malachi.commit_offset(''tap_priv_g'', ''priv_seg'', %L)',
                       jsonb_build_object(:seg_range::text, 6)),
                'consumer: commit_offset');
SELECT is((SELECT array_agg(key) FROM malachi.poll('priv_seg', 'tap_priv_g', 100)),
          ARRAY['seg-7'], 'consumer: the group resumes at the committed offset');
SELECT lives_ok($$SELECT malachi.reset_group('tap_priv_g', 'priv_seg', 'latest')$$,
                'consumer: reset_group to latest');
SELECT results_eq($$SELECT * FROM malachi.committed_offsets('tap_priv_g', 'priv_seg')$$,
                  format('VALUES (%s::bigint, 7::bigint)', :seg_range),
                  'consumer: reset_group moved the group to the range''s end');
SELECT lives_ok($$SELECT malachi.reset_group('tap_priv_g', 'priv_seg')$$,
                'consumer: reset_group to earliest (the default)');
SELECT results_eq($$SELECT * FROM malachi.committed_offsets('tap_priv_g', 'priv_seg')$$,
                  format('VALUES (%s::bigint, 0::bigint)', :seg_range),
                  'consumer: reset_group to earliest moves the group to the range''s start');
SELECT is((SELECT count(*)::int FROM malachi.consume('priv_seg', 'tap_priv_g', 100)), 7,
          'consumer: after the reset the group consumes everything again');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM malachi.read(:seg_range, 0, 100)), 7,
          'the refused produce calls appended nothing');

-- an admin produces, reads and rolls; nobody writes segment_meta directly
SET ROLE tap_priv_admin;
SELECT is(malachi.produce('priv_seg', 'seg-8', 'eight'::text), :seg_range::bigint,
          'admin: produce');
SELECT is(malachi.produce_batch('priv_seg', ARRAY['seg-9'], ARRAY['nine']), 1::bigint,
          'admin: produce_batch');
SELECT is((SELECT array_agg(key ORDER BY "offset") FROM malachi.read(:seg_range, 7, 100)),
          ARRAY['seg-8', 'seg-9'], 'admin: read');
SELECT is(malachi.offset_for_time(:seg_range, 'infinity'), 9::bigint, 'admin: offset_for_time');
SELECT is((SELECT array_agg("offset") FROM malachi.consume('priv_seg', 'tap_priv_g', 100)),
          ARRAY[7, 8]::bigint[], 'admin: consume continues the consumer''s group');
SELECT results_eq($$SELECT "group", committed, lag FROM malachi.consumer_lag
                     WHERE "group" = 'tap_priv_g'$$,
                  $$VALUES ('tap_priv_g'::text, 9::bigint, 0::bigint)$$,
                  'admin: consumer_lag shows the group caught up');
SELECT isnt(malachi.roll(:seg_range), NULL, 'admin: roll seals the range''s head');
SELECT results_eq(
	'SELECT seq, state, base_offset, end_offset FROM malachi.segments WHERE range_id = ' || :seg_range,
	$$VALUES (0, 'sealed', 0::bigint, 9::bigint)$$,
	'admin: the rolled segment is sealed at the range''s end');
SELECT throws_ok('INSERT INTO malachi.segment_meta (range_id, seq, base_offset, replicas) VALUES ('
                 || :seg_range || ', 1, 9, ''{local}'')', '42501',
                 'permission denied for table segment_meta',
                 'admin may not write segment_meta directly');
SELECT throws_ok('SELECT malachi.init_storage()', '42501',
                 'permission denied for function init_storage',
                 'admin may not call init_storage');
RESET ROLE;

-- fixtures for the control plane, made as the superuser (from here on, this
-- transaction has changed metadata and can no longer produce)
SELECT malachi.create_policy('priv_policy', '{"retention": "2 days"}');
SELECT malachi.create_topic('priv_t', 4, NULL, 'priv_policy') AS priv_root \gset
SELECT id AS priv_first FROM malachi.active_range_ids('priv_t') id LIMIT 1 \gset
SELECT malachi.key_hash('order-42') AS hash_order42,
       malachi.route('priv_t', 'order-42') AS route_order42,
       malachi.route('priv_t', 'customer:1001') AS route_c1001 \gset

-- what every reader may do, and every change refused, as producer and consumer
CREATE TEMP TABLE reads (what text, stmt text);
INSERT INTO reads VALUES
	('key_hash', 'SELECT malachi.key_hash(''order-42'')'),
	('route', 'SELECT malachi.route(''priv_t'', ''order-42'')'),
	('active_range_ids', 'SELECT * FROM malachi.active_range_ids(''priv_t'')'),
	('topic_settings', 'SELECT malachi.topic_settings(''priv_t'')'),
	('topic_policy_name', 'SELECT malachi.topic_policy_name(''priv_t'')'),
	('topics_bound_to', 'SELECT * FROM malachi.topics_bound_to(''priv_policy'')'),
	('head_state', 'SELECT * FROM malachi.head_state()'),
	('ranges view', 'SELECT * FROM malachi.ranges'),
	('segments view', 'SELECT * FROM malachi.segments'),
	('stat_topics view', 'SELECT * FROM malachi.stat_topics'),
	('sweeper_status view', 'SELECT * FROM malachi.sweeper_status'),
	('consumer_lag view', 'SELECT * FROM malachi.consumer_lag'),
	('segment_meta', 'SELECT * FROM malachi.segment_meta'),
	('group_positions', 'SELECT * FROM malachi.group_positions'),
	('declared_children', 'SELECT * FROM malachi.declared_children(''tap_priv_hub'')'),
	('declared_child', 'SELECT malachi.declared_child(''tap_priv_hub'', ''c1'')'),
	('declared_manifest', 'SELECT malachi.declared_manifest(''tap_priv_hub'')'),
	('declared_parked', 'SELECT malachi.declared_parked(''tap_priv_hub'')'),
	('children_state', 'SELECT * FROM malachi.children_state()'),
	('children view', 'SELECT * FROM malachi.children'),
	('declared_hubs table', 'SELECT * FROM malachi.declared_hubs'),
	('declared_children table', 'SELECT * FROM malachi.declared_children');
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
	('merge_ranges', 'SELECT malachi.merge_ranges(' || :priv_first || ', ' || (:priv_first + 1) || ')'),
	('roll', 'SELECT malachi.roll(' || :seg_range || ')'),
	('run_maintenance', 'SELECT malachi.run_maintenance()'),
	('delete_segment', 'SELECT malachi.delete_segment(-1)'),
	('init_storage', 'SELECT malachi.init_storage()'),
	('declare_child', 'SELECT malachi.declare_child(''tap_priv_hub'', ''c9'', ''{}'')'),
	('undeclare_child', 'SELECT malachi.undeclare_child(''tap_priv_hub'', ''c1'')'),
	('adopt_manifest', 'SELECT malachi.adopt_manifest(''tap_priv_hub'', ''{}'')'),
	('clear_declared', 'SELECT malachi.clear_declared(''tap_priv_hub'')');
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
-- priv_t's active ranges have sealed parents: their starts derive from the
-- parents' positions (read FOR SHARE), all as the consumer
SELECT is((SELECT count(*)::int FROM malachi.consume('priv_t', 'tap_priv_g', 100)), 0,
          'consumer: consume on a topic with split ranges (no records yet)');
SELECT set_eq($$SELECT range_id, "offset" FROM malachi.committed_offsets('tap_priv_g', 'priv_t')$$,
              $$SELECT id, 0::bigint FROM malachi.active_range_ids('priv_t') id$$,
              'consumer: the group stands at offset 0 of each active range');
SELECT lives_ok($$SELECT malachi.commit_offset('tap_priv_g', 'priv_t',
                    jsonb_build_object((SELECT min(id) FROM malachi.active_range_ids('priv_t') id)::text, 0))$$,
                'consumer: commit_offset');
SELECT lives_ok($$SELECT malachi.reset_group('tap_priv_g', 'priv_t', 'latest')$$,
                'consumer: reset_group');
-- but not the table itself: a LOCK would stall every group's consumers
SELECT throws_ok('DELETE FROM malachi.group_positions', '42501',
                 'permission denied for table group_positions',
                 'consumer may not write group_positions directly');
SELECT throws_ok('LOCK TABLE malachi.group_positions IN EXCLUSIVE MODE', '42501',
                 'permission denied for table group_positions',
                 'consumer may not lock group_positions');
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

---- declared lists -------------------------------------------------------------

-- a consumer child's spec names an existing topic and a function taking
-- malachi.record[] (made here as the superuser; this transaction rolls
-- back, so the supervisor never sees any of it)
CREATE FUNCTION public.tap_priv_handle(malachi.record[]) RETURNS void
	LANGUAGE sql AS 'SELECT';
CREATE TEMP TABLE child_specs (child_id text, spec jsonb);
INSERT INTO child_specs VALUES
	('c1', '{"kind": "consumer", "topic": "priv_t", "group": "tap_priv_c1", "function": "public.tap_priv_handle"}'),
	('c2', '{"kind": "consumer", "topic": "priv_t", "group": "tap_priv_c2", "function": "public.tap_priv_handle", "batch": 10, "wait": "100ms"}');
GRANT SELECT ON child_specs TO PUBLIC;

-- an admin declares, undeclares, exports, adopts and clears
SET ROLE tap_priv_admin;
SELECT is(malachi.declare_child('tap_priv_hub', 'c1', (SELECT spec FROM child_specs WHERE child_id = 'c1')),
          1::bigint, 'admin: declare_child creates the hub at version 1');
SELECT is(malachi.declare_child('tap_priv_hub', 'c1', (SELECT spec FROM child_specs WHERE child_id = 'c1')),
          1::bigint, 'admin: declare_child of an unchanged child keeps the version');
SELECT is(malachi.declare_child('tap_priv_hub', 'c2', (SELECT spec FROM child_specs WHERE child_id = 'c2'),
                                '{"team": "tap"}'),
          2::bigint, 'admin: declare_child of a second child bumps the version');
SELECT is(malachi.declare_child('tap_priv_hub', 'c3', (SELECT spec FROM child_specs WHERE child_id = 'c1')),
          3::bigint, 'admin: declare_child of a third child');
SELECT is(malachi.undeclare_child('tap_priv_hub', 'c3'), 4::bigint,
          'admin: undeclare_child removes a child and bumps the version');
SELECT results_eq($$SELECT hub, child_id, owner FROM malachi.declared_children WHERE hub = 'tap_priv_hub' ORDER BY child_id$$,
                  $$VALUES ('tap_priv_hub'::text, 'c1'::text, 'tap_priv_admin'::text),
                           ('tap_priv_hub', 'c2', 'tap_priv_admin')$$,
                  'admin: the children run as the role that declared them');
SELECT is(malachi.adopt_manifest('tap_priv_copy', malachi.declared_manifest('tap_priv_hub')), 'adopted',
          'admin: adopt_manifest of a new hub');
SELECT is((SELECT version FROM malachi.declared_children('tap_priv_copy')), 4::bigint,
          'admin: the adopted list has the manifest''s version');
SELECT is(malachi.clear_declared('tap_priv_copy'), 5::bigint,
          'admin: clear_declared empties the list above its version');
SELECT results_eq($$SELECT * FROM malachi.declared_children('tap_priv_copy')$$,
                  $$VALUES (5::bigint, '[]'::jsonb)$$, 'admin: the cleared list is empty');
SELECT is(malachi.declared_parked('tap_priv_hub'), false, 'admin: declared_parked');
SELECT lives_ok('SELECT * FROM malachi.children', 'admin: may read malachi.children');
SELECT lives_ok('UPDATE malachi.declared_hubs SET updated_at = updated_at WHERE hub = ''tap_priv_copy''',
                'admin: may write declared_hubs directly');
SELECT lives_ok('DELETE FROM malachi.declared_children WHERE hub = ''tap_priv_copy''',
                'admin: may write declared_children directly');
SELECT throws_ok(format('UPDATE malachi.declared_children SET owner = %L WHERE hub = ''tap_priv_hub''', rolname),
                 '42501', format('permission denied to declare a child that runs as role "%s"', rolname),
                 'admin: may not make a child run as the bootstrap superuser')
  FROM pg_roles WHERE oid = 10;
SELECT throws_ok('INSERT INTO malachi.declared_children (hub, child_id, spec, owner) '
                 'SELECT ''tap_priv_hub'', ''c9'', spec, ''tap_priv_nobody'' FROM child_specs WHERE child_id = ''c1''',
                 '42501', 'permission denied to declare a child that runs as role "tap_priv_nobody"',
                 'admin: nor insert one that runs as another role');
SELECT throws_ok('UPDATE malachi.declared_children SET owner = ''tap_priv_no_such_role'' WHERE hub = ''tap_priv_hub''',
                 '42704', 'role "tap_priv_no_such_role" does not exist',
                 'admin: nor name a role that does not exist');
SELECT lives_ok('UPDATE malachi.declared_children SET owner = current_user WHERE hub = ''tap_priv_hub''',
                'admin: may keep itself as the owner');
RESET ROLE;

-- what producers and consumers see of the admin's list (version 4: c1, c2)
CREATE TEMP VIEW declared_seen AS
	SELECT d.version,
	       (SELECT array_agg(e ->> 'child_id' ORDER BY e ->> 'child_id')
	          FROM jsonb_array_elements(d.children) e) AS children,
	       malachi.declared_child('tap_priv_hub', 'c2') ->> 'meta' AS c2_meta,
	       malachi.declared_manifest('tap_priv_hub') ->> 'version' AS manifest_version,
	       malachi.declared_parked('tap_priv_hub') AS parked
	  FROM malachi.declared_children('tap_priv_hub') d;
GRANT SELECT ON declared_seen TO PUBLIC;

SET ROLE tap_priv_producer;
SELECT results_eq('SELECT * FROM declared_seen',
                  $$VALUES (4::bigint, ARRAY['c1', 'c2'], '{"team": "tap"}', '4', false)$$,
                  'producer: reads the list with declared_children, declared_child, declared_manifest and declared_parked');
SELECT lives_ok('SELECT * FROM malachi.children', 'producer: may read malachi.children');
SELECT throws_ok(format('SELECT malachi.declare_child(''tap_priv_hub'', ''c9'', %L)',
                        (SELECT spec FROM child_specs WHERE child_id = 'c1')),
                 '42501', 'permission denied for function declare_child',
                 'producer: may not declare a child with a valid spec');
SELECT throws_ok('INSERT INTO malachi.declared_hubs (hub, mutated_by) VALUES (''tap_priv_dml'', ''x'')',
                 '42501', 'permission denied for table declared_hubs',
                 'producer may not write declared_hubs directly');
SELECT throws_ok('DELETE FROM malachi.declared_children', '42501',
                 'permission denied for table declared_children',
                 'producer may not write declared_children directly');
RESET ROLE;

SET ROLE tap_priv_consumer;
SELECT results_eq('SELECT * FROM declared_seen',
                  $$VALUES (4::bigint, ARRAY['c1', 'c2'], '{"team": "tap"}', '4', false)$$,
                  'consumer: reads the list with declared_children, declared_child, declared_manifest and declared_parked');
SELECT lives_ok('SELECT * FROM malachi.children', 'consumer: may read malachi.children');
SELECT throws_ok(format('SELECT malachi.declare_child(''tap_priv_hub'', ''c9'', %L)',
                        (SELECT spec FROM child_specs WHERE child_id = 'c1')),
                 '42501', 'permission denied for function declare_child',
                 'consumer: may not declare a child with a valid spec');
SELECT throws_ok('UPDATE malachi.declared_hubs SET version = version + 1', '42501',
                 'permission denied for table declared_hubs',
                 'consumer may not write declared_hubs directly');
SELECT throws_ok('DELETE FROM malachi.declared_children', '42501',
                 'permission denied for table declared_children',
                 'consumer may not write declared_children directly');
RESET ROLE;
SELECT results_eq($$SELECT version, child_id, owner FROM malachi.declared_hubs JOIN malachi.declared_children USING (hub)
                     WHERE hub = 'tap_priv_hub' ORDER BY child_id$$,
                  $$VALUES (4::bigint, 'c1'::text, 'tap_priv_admin'::text), (4, 'c2', 'tap_priv_admin')$$,
                  'the refused declared-list calls changed nothing');

-- a role holding no malachi role cannot even hash a key
SET ROLE tap_priv_nobody;
SELECT throws_ok('SELECT malachi.key_hash(''k'')', '42501',
                 'permission denied for schema malachi',
                 'a role without a malachi role has no USAGE on the schema');
SELECT throws_ok($$SELECT * FROM malachi.consume('priv_seg', 'tap_priv_nobody')$$, '42501',
                 'permission denied for schema malachi',
                 'a role without a malachi role cannot consume');
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
SELECT throws_ok('SELECT malachi.produce(''priv_seg'', ''k'', ''v''::text)', '42501',
                 'permission denied for function produce',
                 'with USAGE on the schema, produce is still refused');
SELECT throws_ok('SELECT * FROM malachi.read(' || :seg_range || ', 0, 1)', '42501',
                 'permission denied for function read',
                 'with USAGE on the schema, read is still refused');
SELECT throws_ok(stmt, '42501', 'permission denied for function ' || fn,
                 'with USAGE on the schema, ' || fn || ' is still refused')
  FROM consumes WHERE fn <> 'read' ORDER BY fn;
SELECT throws_ok('SELECT * FROM malachi.consumer_lag', '42501',
                 'permission denied for view consumer_lag',
                 'with USAGE on the schema, consumer_lag cannot be read');
SELECT throws_ok('SELECT count(*) FROM malachi.group_positions', '42501',
                 'permission denied for table group_positions',
                 'with USAGE on the schema, group_positions cannot be read');
SELECT throws_ok(stmt, '42501', 'permission denied for function ' || fn,
                 'with USAGE on the schema, ' || fn || ' is still refused')
  FROM (VALUES
	('declared_children', 'SELECT * FROM malachi.declared_children(''tap_priv_hub'')'),
	('declared_child', 'SELECT malachi.declared_child(''tap_priv_hub'', ''c1'')'),
	('declared_manifest', 'SELECT malachi.declared_manifest(''tap_priv_hub'')'),
	('declared_parked', 'SELECT malachi.declared_parked(''tap_priv_hub'')'),
	('children_state', 'SELECT * FROM malachi.children_state()'),
	('declare_child', 'SELECT malachi.declare_child(''tap_priv_hub'', ''c9'', ''{}'')'),
	('undeclare_child', 'SELECT malachi.undeclare_child(''tap_priv_hub'', ''c1'')'),
	('adopt_manifest', 'SELECT malachi.adopt_manifest(''tap_priv_hub'', ''{}'')'),
	('clear_declared', 'SELECT malachi.clear_declared(''tap_priv_hub'')')
  ) AS v(fn, stmt) ORDER BY fn;
SELECT throws_ok('SELECT * FROM malachi.children', '42501',
                 'permission denied for view children',
                 'with USAGE on the schema, malachi.children cannot be read');
SELECT throws_ok('SELECT count(*) FROM malachi.declared_hubs', '42501',
                 'permission denied for table declared_hubs',
                 'with USAGE on the schema, declared_hubs cannot be read');
SELECT throws_ok('SELECT count(*) FROM malachi.declared_children', '42501',
                 'permission denied for table declared_children',
                 'with USAGE on the schema, declared_children cannot be read');
RESET ROLE;

---- malachi's own queries ignore the caller's search_path --------------------------

-- an "=" on text ahead of pg_catalog on the caller's path: none of the
-- queries a read runs may use it (the segment list's did)
CREATE SCHEMA tap_evil;
CREATE FUNCTION tap_evil.text_eq(a text, b text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'tap_evil.= was used';
END $$;
CREATE OPERATOR tap_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_evil.text_eq);
GRANT USAGE ON SCHEMA tap_evil TO tap_priv_consumer;
SELECT malachi.create_topic('priv_path') AS path_range \gset
-- (pgTAP's own functions would use that "=" too: the read runs alone)
CREATE FUNCTION public.tap_path_read(r bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM count(*) FROM malachi.read(r, 0, 10);
	RETURN 'read';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLERRM;
END $$;
SET LOCAL ROLE tap_priv_consumer;
SET LOCAL search_path = tap_evil, pg_catalog, public;
SELECT public.tap_path_read(:path_range) AS path_read \gset
RESET ROLE;
SET LOCAL search_path = public;
SELECT is(:'path_read'::text, 'read'::text,
          'a read with another "=" ahead of pg_catalog on the caller''s path does not use it');

SELECT * FROM finish();
ROLLBACK;

SELECT malachi.drop_topic('priv_seg') \gset
