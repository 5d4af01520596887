-- schema.sql: the objects malachi--1.0.sql creates, exactly as the SQL
-- contract names them: tables with their keys, the ranges view, every
-- function's signature and return type, roles, dump registration, comments.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS malachi;

BEGIN;
-- The test role may be called "malachi" too, making "$user" resolve to the
-- schema; keep regclass/regproc output schema-qualified whoever runs this.
SET LOCAL search_path = public;
SELECT plan(103);

---- schema, tables, primary keys ----------------------------------------

SELECT has_schema('malachi');
SELECT results_eq($$
	SELECT extnamespace::regnamespace::text, extrelocatable, extversion COLLATE "default"
	  FROM pg_extension WHERE extname = 'malachi'
$$, $$ VALUES ('malachi', false, '1.0') $$,
	'extension malachi 1.0 lives in schema malachi and is not relocatable');

SELECT tables_are('malachi',
       ARRAY['policy_meta', 'range_meta', 'topic_meta', 'topic_policy']);

SELECT has_pk('malachi', t, 'table malachi.' || t || ' has a primary key')
  FROM unnest(ARRAY['policy_meta', 'range_meta', 'topic_meta', 'topic_policy']::name[]) t;

SELECT col_is_pk('malachi', 'policy_meta', 'policy', 'policy_meta is keyed by policy');
SELECT col_is_pk('malachi', 'topic_meta', 'topic_id', 'topic_meta is keyed by topic_id');
SELECT col_is_pk('malachi', 'topic_policy', 'topic_id', 'topic_policy is keyed by topic_id');
SELECT col_is_pk('malachi', 'range_meta', 'range_id', 'range_meta is keyed by range_id');
SELECT col_is_unique('malachi', 'topic_meta', 'topic', 'topic names are unique');

-- every table in the schema (including any added later) has a primary key
SELECT is_empty($$
	SELECT c.oid::regclass::text FROM pg_class c
	 WHERE c.relnamespace = 'malachi'::regnamespace
	   AND c.relkind IN ('r', 'p')
	   AND NOT EXISTS (SELECT FROM pg_constraint k
	                    WHERE k.conrelid = c.oid AND k.contype = 'p')
$$, 'every table of schema malachi has a primary key');

SELECT columns_are('malachi', 'policy_meta',
       ARRAY['policy', 'definition', 'created_at', 'updated_at']);
SELECT columns_are('malachi', 'topic_meta',
       ARRAY['topic_id', 'topic', 'settings', 'created_at']);
SELECT columns_are('malachi', 'topic_policy', ARRAY['topic_id', 'policy']);
SELECT columns_are('malachi', 'range_meta',
       ARRAY['range_id', 'topic_id', 'key_lo', 'key_hi', 'state', 'parents',
             'created_at', 'sealed_at']);

SELECT fk_ok('malachi', 'topic_policy', 'topic_id', 'malachi', 'topic_meta', 'topic_id');
SELECT fk_ok('malachi', 'topic_policy', 'policy', 'malachi', 'policy_meta', 'policy');
SELECT fk_ok('malachi', 'range_meta', 'topic_id', 'malachi', 'topic_meta', 'topic_id');

SELECT results_eq($$
	SELECT conname::text COLLATE "default", contype::text FROM pg_constraint
	 WHERE conrelid = 'malachi.range_meta'::regclass AND contype IN ('c', 'x')
	 ORDER BY conname
$$, $$ VALUES ('range_active_no_overlap', 'x'), ('range_meta_state_check', 'c'),
              ('range_sealed_at', 'c'), ('range_slice_aligned', 'c'),
              ('range_slice_bounds', 'c') $$,
	'range_meta has its slice checks and the active no-overlap exclusion');

SELECT sequences_are('malachi', ARRAY['range_id_seq', 'topic_id_seq']);

---- the ranges view -------------------------------------------------------

SELECT views_are('malachi', ARRAY['ranges']);
SELECT results_eq($$
	SELECT attname::text COLLATE "default", format_type(atttypid, atttypmod) FROM pg_attribute
	 WHERE attrelid = 'malachi.ranges'::regclass AND attnum > 0 AND NOT attisdropped
	 ORDER BY attnum
$$, $$ VALUES ('range_id', 'bigint'), ('topic', 'text'), ('key_lo', 'bigint'),
              ('key_hi', 'bigint'), ('state', 'text'), ('parents', 'bigint[]'),
              ('created_at', 'timestamp with time zone'),
              ('sealed_at', 'timestamp with time zone') $$,
	'view malachi.ranges has columns range_id, topic, key_lo, key_hi, state, parents, created_at, sealed_at, in order');

---- functions: exact signatures and return types --------------------------

SELECT functions_are('malachi', ARRAY[
	'active_range_ids', 'alter_policy', 'alter_topic', 'bind_topic_policy',
	'check_range_truncate', 'check_range_update', 'check_tiling',
	'create_policy', 'create_topic', 'drop_policy', 'drop_topic', 'key_hash',
	'merge_ranges', 'note_metadata_change', 'route', 'split_range',
	'topic_policy_name', 'topic_settings', 'topics_bound_to']);

-- the whole contract at once: argument names, defaults, result, volatility,
-- strictness, parallel safety, language; no overloads, nothing extra
SELECT results_eq($$
	SELECT p.proname::text COLLATE "default", pg_get_function_arguments(p.oid),
	       pg_get_function_result(p.oid), p.provolatile::text,
	       p.proisstrict, p.proparallel::text, l.lanname::text COLLATE "default"
	  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
	 WHERE p.pronamespace = 'malachi'::regnamespace
	 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
$$, $$ VALUES
	('active_range_ids', 'topic text', 'SETOF bigint', 's', false, 'u', 'c'),
	('alter_policy', 'policy text, definition jsonb', 'void', 'v', false, 'u', 'c'),
	('alter_topic', 'topic text, settings jsonb', 'jsonb', 'v', false, 'u', 'c'),
	('bind_topic_policy', 'topic text, policy text', 'void', 'v', false, 'u', 'c'),
	('check_range_truncate', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('check_range_update', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('check_tiling', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('create_policy', 'policy text, definition jsonb', 'void', 'v', false, 'u', 'c'),
	('create_topic', 'topic text, ranges integer DEFAULT 1, replication_factor integer DEFAULT NULL::integer, policy text DEFAULT NULL::text', 'bigint', 'v', false, 'u', 'c'),
	('drop_policy', 'policy text', 'void', 'v', false, 'u', 'c'),
	('drop_topic', 'topic text', 'void', 'v', false, 'u', 'c'),
	('key_hash', 'key text', 'bigint', 'i', true, 's', 'c'),
	('merge_ranges', 'a bigint, b bigint', 'bigint', 'v', false, 'u', 'c'),
	('note_metadata_change', '', 'trigger', 'v', false, 'u', 'c'),
	('route', 'topic text, key text', 'bigint', 's', false, 'u', 'c'),
	('split_range', 'range_id bigint', 'TABLE(left_id bigint, right_id bigint)', 'v', false, 'u', 'c'),
	('topic_policy_name', 'topic text', 'text', 's', false, 'u', 'c'),
	('topic_settings', 'topic text', 'jsonb', 's', false, 'u', 'c'),
	('topics_bound_to', 'policy text', 'SETOF text', 's', false, 'u', 'c')
$$, 'malachi functions have exactly the contract''s signatures, results and attributes');

-- one by one, so that a failure names the function
SELECT has_function('malachi', f, args::name[],
                    format('function malachi.%s(%s) exists', f, array_to_string(args, ', ')))
  FROM (VALUES
	('create_topic', '{text,integer,integer,text}'::text[]),
	('drop_topic', '{text}'), ('alter_topic', '{text,jsonb}'),
	('topic_settings', '{text}'), ('create_policy', '{text,jsonb}'),
	('alter_policy', '{text,jsonb}'), ('drop_policy', '{text}'),
	('bind_topic_policy', '{text,text}'), ('topic_policy_name', '{text}'),
	('topics_bound_to', '{text}'), ('key_hash', '{text}'),
	('route', '{text,text}'), ('active_range_ids', '{text}'),
	('split_range', '{bigint}'), ('merge_ranges', '{bigint,bigint}'),
	('check_range_update', '{}'), ('check_tiling', '{}'),
	('check_range_truncate', '{}'), ('note_metadata_change', '{}')
  ) AS v(f, args);

SELECT function_returns('malachi', f, args::name[], ret,
                        format('malachi.%s(%s) returns %s', f, array_to_string(args, ', '), ret))
  FROM (VALUES
	('create_topic', '{text,integer,integer,text}'::text[], 'bigint'),
	('drop_topic', '{text}', 'void'), ('alter_topic', '{text,jsonb}', 'jsonb'),
	('topic_settings', '{text}', 'jsonb'), ('create_policy', '{text,jsonb}', 'void'),
	('alter_policy', '{text,jsonb}', 'void'), ('drop_policy', '{text}', 'void'),
	('bind_topic_policy', '{text,text}', 'void'), ('topic_policy_name', '{text}', 'text'),
	('topics_bound_to', '{text}', 'setof text'), ('key_hash', '{text}', 'bigint'),
	('route', '{text,text}', 'bigint'), ('active_range_ids', '{text}', 'setof bigint'),
	('split_range', '{bigint}', 'setof record'), ('merge_ranges', '{bigint,bigint}', 'bigint'),
	('check_range_update', '{}', 'trigger'), ('check_tiling', '{}', 'trigger'),
	('check_range_truncate', '{}', 'trigger'), ('note_metadata_change', '{}', 'trigger')
  ) AS v(f, args, ret);

-- split_range's result columns, by name and type
SELECT results_eq($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = 'malachi.split_range(bigint)'::regprocedure AND m = 't'
$$, $$ VALUES ('left_id', 'bigint'), ('right_id', 'bigint') $$,
	'split_range returns TABLE(left_id bigint, right_id bigint)');

---- triggers --------------------------------------------------------------

SELECT results_eq($$
	SELECT tgrelid::regclass::text, tgname::text COLLATE "default", tgfoid::regproc::text,
	       tgdeferrable, tginitdeferred
	  FROM pg_trigger
	 WHERE tgrelid IN (SELECT oid FROM pg_class
	                    WHERE relnamespace = 'malachi'::regnamespace)
	   AND NOT tgisinternal
	 ORDER BY 1, 2
$$, $$ VALUES
	('malachi.policy_meta', 'policy_meta_changed', 'malachi.note_metadata_change', false, false),
	('malachi.range_meta', 'range_immutable', 'malachi.check_range_update', false, false),
	('malachi.range_meta', 'range_meta_changed', 'malachi.note_metadata_change', false, false),
	('malachi.range_meta', 'range_tiling_delete', 'malachi.check_tiling', true, true),
	('malachi.range_meta', 'range_tiling_insert', 'malachi.check_tiling', true, true),
	('malachi.range_meta', 'range_tiling_update', 'malachi.check_tiling', true, true),
	('malachi.range_meta', 'range_truncate', 'malachi.check_range_truncate', false, false),
	('malachi.topic_meta', 'topic_meta_changed', 'malachi.note_metadata_change', false, false),
	('malachi.topic_policy', 'topic_policy_changed', 'malachi.note_metadata_change', false, false)
$$, 'control-plane triggers: immutability, deferred tiling, truncate guard, epoch bump');

---- roles -----------------------------------------------------------------

SELECT has_role(r) FROM unnest(ARRAY['malachi_admin', 'malachi_producer', 'malachi_consumer']::name[]) r;
SELECT results_eq($$
	SELECT rolname::text COLLATE "default", rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls
	  FROM pg_roles
	 WHERE rolname IN ('malachi_admin', 'malachi_producer', 'malachi_consumer')
	 ORDER BY rolname
$$, $$ VALUES ('malachi_admin', false, false, false, false, false),
              ('malachi_consumer', false, false, false, false, false),
              ('malachi_producer', false, false, false, false, false) $$,
	'malachi roles are plain NOLOGIN group roles');
SELECT ok(has_schema_privilege(r, 'malachi', 'USAGE'), r || ' has USAGE on schema malachi')
  FROM unnest(ARRAY['malachi_admin', 'malachi_producer', 'malachi_consumer']) r;

---- pg_dump: configuration tables and sequences ----------------------------

-- every table and sequence of the schema is dumped with its data, once
SELECT results_eq($$
	SELECT c::regclass::text FROM pg_extension e, unnest(e.extconfig) c
	 WHERE e.extname = 'malachi' ORDER BY 1
$$, $$
	SELECT c.oid::regclass::text FROM pg_class c
	 WHERE c.relnamespace = 'malachi'::regnamespace AND c.relkind IN ('r', 'p', 'S')
	 ORDER BY 1
$$, 'pg_extension.extconfig lists every table and sequence of schema malachi exactly once');
SELECT results_eq($$
	SELECT c::regclass::text FROM pg_extension e, unnest(e.extconfig) c
	 WHERE e.extname = 'malachi' ORDER BY 1
$$, $$ VALUES ('malachi.policy_meta'), ('malachi.range_id_seq'), ('malachi.range_meta'),
              ('malachi.topic_id_seq'), ('malachi.topic_meta'), ('malachi.topic_policy') $$,
	'extconfig names the four tables and two sequences');
SELECT is((SELECT array_length(extconfig, 1) = array_length(extcondition, 1)
                  AND '' = ALL (extcondition)
             FROM pg_extension WHERE extname = 'malachi'),
          true, 'every configuration relation is dumped in full (empty condition)');

---- comments and membership -------------------------------------------------

-- every function, table and view of the extension has a comment
SELECT is_empty($$
	SELECT pg_describe_object(d.classid, d.objid, 0)
	  FROM pg_depend d
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'malachi'
	  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	   AND (d.classid = 'pg_proc'::regclass
	        OR (d.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p', 'v', 'm')))
	   AND obj_description(d.objid, d.classid::regclass::name) IS NULL
$$, 'every function, table and view of malachi has a COMMENT');
SELECT is((SELECT count(*)::int FROM pg_depend d
            WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'malachi')
              AND d.deptype = 'e'
              AND (d.classid = 'pg_proc'::regclass
                   OR (d.classid = 'pg_class'::regclass
                       AND (SELECT relkind FROM pg_class WHERE oid = d.objid) IN ('r', 'v')))),
          24, 'the comment check covers 19 functions, 4 tables and 1 view');
SELECT ok(obj_description(p.oid, 'pg_proc') IS NOT NULL
          AND obj_description(p.oid, 'pg_proc') <> '',
          p.oid::regprocedure::text || ' has a comment')
  FROM pg_proc p WHERE p.pronamespace = 'malachi'::regnamespace
 ORDER BY p.proname;
SELECT ok(obj_description(('malachi.' || t)::regclass, 'pg_class') <> '',
          'malachi.' || t || ' has a comment')
  FROM unnest(ARRAY['policy_meta', 'range_meta', 'ranges', 'topic_meta', 'topic_policy']) t;

-- everything in the schema is a member of the extension (nothing dangling)
SELECT is_empty($$
	SELECT c.oid::regclass::text FROM pg_class c
	 WHERE c.relnamespace = 'malachi'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
	   AND NOT EXISTS (SELECT FROM pg_depend d
	                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
	                      AND d.deptype = 'e')
	UNION ALL
	SELECT p.oid::regprocedure::text FROM pg_proc p
	 WHERE p.pronamespace = 'malachi'::regnamespace
	   AND NOT EXISTS (SELECT FROM pg_depend d
	                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	                      AND d.deptype = 'e')
$$, 'every relation and function of schema malachi belongs to the extension');

SELECT * FROM finish();
ROLLBACK;
