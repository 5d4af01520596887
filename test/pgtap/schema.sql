-- schema.sql: the objects malachi--1.0.sql creates, exactly as the SQL
-- contract names them: tables with their keys and constraints, the record
-- type, the views, every function's signature and return type, triggers,
-- roles, dump registration, comments.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS malachi;

BEGIN;
-- The test role may be called "malachi" too, making "$user" resolve to the
-- schema; keep regclass/regproc output schema-qualified whoever runs this.
SET LOCAL search_path = public;
SELECT plan(256);

-- the columns of a table, view or composite type: name and type, in order
CREATE FUNCTION pg_temp.columns_of(rel regclass) RETURNS TABLE (name text, type text)
LANGUAGE sql AS $$
	SELECT attname::text COLLATE "default", format_type(atttypid, atttypmod) FROM pg_attribute
	 WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped
	 ORDER BY attnum
$$;

---- schema, tables, primary keys ----------------------------------------

SELECT has_schema('malachi');
SELECT results_eq($$
	SELECT extnamespace::regnamespace::text, extrelocatable, extversion COLLATE "default"
	  FROM pg_extension WHERE extname = 'malachi'
$$, $$ VALUES ('malachi', false, '1.0') $$,
	'extension malachi 1.0 lives in schema malachi and is not relocatable');

SELECT tables_are('malachi',
       ARRAY['declared_children', 'declared_hubs', 'group_positions', 'policy_meta',
             'range_meta', 'segment_meta', 'topic_meta', 'topic_policy']);

SELECT has_pk('malachi', t, 'table malachi.' || t || ' has a primary key')
  FROM unnest(ARRAY['declared_children', 'declared_hubs', 'group_positions', 'policy_meta',
                    'range_meta', 'segment_meta', 'topic_meta', 'topic_policy']::name[]) t;

SELECT col_is_pk('malachi', 'policy_meta', 'policy', 'policy_meta is keyed by policy');
SELECT col_is_pk('malachi', 'topic_meta', 'topic_id', 'topic_meta is keyed by topic_id');
SELECT col_is_pk('malachi', 'topic_policy', 'topic_id', 'topic_policy is keyed by topic_id');
SELECT col_is_pk('malachi', 'range_meta', 'range_id', 'range_meta is keyed by range_id');
SELECT col_is_pk('malachi', 'segment_meta', 'segment_id', 'segment_meta is keyed by segment_id');
SELECT col_is_pk('malachi', 'group_positions', ARRAY['group_name', 'range_id']::name[],
                 'group_positions is keyed by (group_name, range_id)');
SELECT col_is_pk('malachi', 'declared_hubs', 'hub', 'declared_hubs is keyed by hub');
SELECT col_is_pk('malachi', 'declared_children', ARRAY['hub', 'child_id']::name[],
                 'declared_children is keyed by (hub, child_id)');
SELECT col_is_unique('malachi', 'topic_meta', 'topic', 'topic names are unique');
SELECT col_is_unique('malachi', 'segment_meta', ARRAY['range_id', 'seq']::name[],
                     'a range''s segments are numbered uniquely (range_id, seq)');

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
             'created_at', 'sealed_at', 'end_offset']);
SELECT results_eq($$
	SELECT attname::text COLLATE "default", format_type(atttypid, atttypmod), attnotnull,
	       pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
	  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE attrelid = 'malachi.segment_meta'::regclass AND attnum > 0 AND NOT attisdropped
	 ORDER BY attnum
$$, $$ VALUES ('segment_id', 'bigint', true, 'nextval(''malachi.segment_id_seq''::regclass)'),
              ('range_id', 'bigint', true, NULL), ('seq', 'integer', true, NULL),
              ('base_offset', 'bigint', true, NULL), ('end_offset', 'bigint', false, NULL),
              ('byte_size', 'bigint', false, NULL),
              ('state', 'text', true, '''active''::text'),
              ('replicas', 'text[]', true, NULL),
              ('created_at', 'timestamp with time zone', true, 'now()'),
              ('sealed_at', 'timestamp with time zone', false, NULL),
              ('scrubbed_at', 'timestamp with time zone', false, NULL),
              ('corrupt', 'text', false, NULL) $$,
	'segment_meta has columns segment_id, range_id, seq, base_offset, end_offset, byte_size, state, replicas, created_at, sealed_at, scrubbed_at, corrupt, in order, with their types, NOT NULLs and defaults');
SELECT results_eq($$
	SELECT attname::text COLLATE "default", format_type(atttypid, atttypmod), attnotnull,
	       pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
	  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE attrelid = 'malachi.group_positions'::regclass AND attnum > 0 AND NOT attisdropped
	 ORDER BY attnum
$$, $$ VALUES ('group_name', 'text', true, NULL), ('range_id', 'bigint', true, NULL),
              ('topic_id', 'bigint', true, NULL), ('offset', 'bigint', true, NULL),
              ('pending', 'bigint[]', true, NULL),
              ('updated_at', 'timestamp with time zone', true, 'now()') $$,
	'group_positions has columns group_name, range_id, topic_id, offset, pending, updated_at, in order, with their types, NOT NULLs and defaults');
SELECT results_eq($$
	SELECT attname::text COLLATE "default", format_type(atttypid, atttypmod), attnotnull,
	       pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
	  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE attrelid = 'malachi.declared_hubs'::regclass AND attnum > 0 AND NOT attisdropped
	 ORDER BY attnum
$$, $$ VALUES ('hub', 'text', true, NULL), ('version', 'bigint', true, '0'),
              ('mutated_by', 'text', true, NULL), ('format', 'integer', true, '1'),
              ('updated_at', 'timestamp with time zone', true, 'now()') $$,
	'declared_hubs has columns hub, version, mutated_by, format, updated_at, in order, with their types, NOT NULLs and defaults');
SELECT results_eq($$
	SELECT attname::text COLLATE "default", format_type(atttypid, atttypmod), attnotnull,
	       pg_get_expr(d.adbin, d.adrelid) COLLATE "default"
	  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE attrelid = 'malachi.declared_children'::regclass AND attnum > 0 AND NOT attisdropped
	 ORDER BY attnum
$$, $$ VALUES ('hub', 'text', true, NULL), ('child_id', 'text', true, NULL),
              ('spec', 'jsonb', true, NULL), ('meta', 'jsonb', true, '''{}''::jsonb'),
              ('owner', 'text', true, NULL) $$,
	'declared_children has columns hub, child_id, spec, meta, owner, in order, with their types, NOT NULLs and defaults');

SELECT fk_ok('malachi', 'topic_policy', 'topic_id', 'malachi', 'topic_meta', 'topic_id');
SELECT fk_ok('malachi', 'topic_policy', 'policy', 'malachi', 'policy_meta', 'policy');
SELECT fk_ok('malachi', 'range_meta', 'topic_id', 'malachi', 'topic_meta', 'topic_id');
SELECT fk_ok('malachi', 'segment_meta', 'range_id', 'malachi', 'range_meta', 'range_id');
SELECT fk_ok('malachi', 'group_positions', 'range_id', 'malachi', 'range_meta', 'range_id');
SELECT fk_ok('malachi', 'group_positions', 'topic_id', 'malachi', 'topic_meta', 'topic_id');
SELECT fk_ok('malachi', 'declared_children', 'hub', 'malachi', 'declared_hubs', 'hub');

-- every foreign key of the schema, with what deleting the referenced row does
-- (c = cascade, r = restrict)
SELECT results_eq($$
	SELECT conrelid::regclass::text, conname::text COLLATE "default",
	       confrelid::regclass::text, confdeltype::text
	  FROM pg_constraint
	 WHERE connamespace = 'malachi'::regnamespace AND contype = 'f'
	 ORDER BY 1, 2
$$, $$ VALUES
	('malachi.declared_children', 'declared_children_hub_fkey', 'malachi.declared_hubs', 'c'),
	('malachi.group_positions', 'group_positions_range_id_fkey', 'malachi.range_meta', 'c'),
	('malachi.group_positions', 'group_positions_topic_id_fkey', 'malachi.topic_meta', 'c'),
	('malachi.range_meta', 'range_meta_topic_id_fkey', 'malachi.topic_meta', 'c'),
	('malachi.segment_meta', 'segment_meta_range_id_fkey', 'malachi.range_meta', 'c'),
	('malachi.topic_policy', 'topic_policy_policy_fkey', 'malachi.policy_meta', 'r'),
	('malachi.topic_policy', 'topic_policy_topic_id_fkey', 'malachi.topic_meta', 'c')
$$, 'foreign keys: topics cascade to ranges, bindings and group positions, ranges to segments and group positions, hubs to their declared children; a bound policy is restricted');

SELECT results_eq($$
	SELECT conname::text COLLATE "default", contype::text FROM pg_constraint
	 WHERE conrelid = 'malachi.range_meta'::regclass AND contype IN ('c', 'x')
	 ORDER BY conname
$$, $$ VALUES ('range_active_no_overlap', 'x'), ('range_end_offset', 'c'),
              ('range_meta_end_offset_check', 'c'), ('range_meta_state_check', 'c'),
              ('range_sealed_at', 'c'), ('range_slice_aligned', 'c'),
              ('range_slice_bounds', 'c') $$,
	'range_meta has its slice and end checks and the active no-overlap exclusion');

SELECT results_eq($$
	SELECT conname::text COLLATE "default", contype::text FROM pg_constraint
	 WHERE conrelid = 'malachi.segment_meta'::regclass AND contype IN ('c', 'u', 'x')
	 ORDER BY conname
$$, $$ VALUES ('segment_end_after_base', 'c'), ('segment_meta_base_offset_check', 'c'),
              ('segment_meta_range_id_seq_key', 'u'), ('segment_meta_seq_check', 'c'),
              ('segment_meta_state_check', 'c'), ('segment_sealed_fields', 'c') $$,
	'segment_meta has its offset, state and sealed-fields checks and unique (range_id, seq)');
-- at most one active segment (the head) per range
SELECT results_eq($$
	SELECT indexrelid::regclass::text, indisunique,
	       pg_get_indexdef(indexrelid, 1, true), pg_get_expr(indpred, indrelid) COLLATE "default"
	  FROM pg_index
	 WHERE indrelid = 'malachi.segment_meta'::regclass AND indpred IS NOT NULL
$$, $$ VALUES ('malachi.segment_meta_one_head', true, 'range_id', '(state = ''active''::text)') $$,
	'segment_meta_one_head: unique range_id among active segments');

SELECT results_eq($$
	SELECT conname::text COLLATE "default", contype::text, pg_get_constraintdef(oid) COLLATE "default"
	  FROM pg_constraint
	 WHERE conrelid = 'malachi.group_positions'::regclass AND contype IN ('c', 'u', 'x')
	 ORDER BY conname
$$, $$ VALUES
	('group_positions_group_name_check', 'c',
	 'CHECK (((group_name <> ''''::text) AND (octet_length(group_name) <= 249)))'),
	('group_positions_offset_check', 'c', 'CHECK (("offset" >= 0))'),
	('group_positions_pending_check', 'c',
	 'CHECK ((((cardinality(pending) % 4) = 0) AND (COALESCE(array_ndims(pending), 1) = 1)))') $$,
	'group_positions checks its group name, offset and pending quadruples');
-- every index of group_positions: the primary key and the per-topic lookup
SELECT results_eq($$
	SELECT indexrelid::regclass::text, indisunique, indisprimary,
	       pg_get_indexdef(indexrelid) COLLATE "default"
	  FROM pg_index
	 WHERE indrelid = 'malachi.group_positions'::regclass
	 ORDER BY 1
$$, $$ VALUES
	('malachi.group_positions_pkey', true, true,
	 'CREATE UNIQUE INDEX group_positions_pkey ON malachi.group_positions USING btree (group_name, range_id)'),
	('malachi.group_positions_topic_idx', false, false,
	 'CREATE INDEX group_positions_topic_idx ON malachi.group_positions USING btree (group_name, topic_id)') $$,
	'group_positions is indexed by its key and by (group_name, topic_id)');

-- the declared lists: names of hubs and children non-empty and at most 249
-- bytes (a manifest file name is hub-<hex>.json), versions not negative,
-- spec and meta objects
SELECT results_eq($$
	SELECT conname::text COLLATE "default", contype::text, pg_get_constraintdef(oid) COLLATE "default"
	  FROM pg_constraint
	 WHERE conrelid = 'malachi.declared_hubs'::regclass AND contype IN ('c', 'u', 'x')
	 ORDER BY conname
$$, $$ VALUES
	('declared_hubs_hub_check', 'c',
	 'CHECK (((hub <> ''''::text) AND (octet_length(hub) <= 120)))'),
	('declared_hubs_version_check', 'c', 'CHECK ((version >= 0))') $$,
	'declared_hubs checks its hub name and version');
SELECT results_eq($$
	SELECT conname::text COLLATE "default", contype::text, pg_get_constraintdef(oid) COLLATE "default"
	  FROM pg_constraint
	 WHERE conrelid = 'malachi.declared_children'::regclass AND contype IN ('c', 'u', 'x')
	 ORDER BY conname
$$, $$ VALUES
	('declared_children_child_id_check', 'c',
	 'CHECK (((child_id <> ''''::text) AND (octet_length(child_id) <= 249)))'),
	('declared_children_meta_check', 'c', 'CHECK ((jsonb_typeof(meta) = ''object''::text))'),
	('declared_children_spec_check', 'c', 'CHECK ((jsonb_typeof(spec) = ''object''::text))') $$,
	'declared_children checks its child id and that spec and meta are objects');
-- the declared lists' only indexes are their primary keys
SELECT results_eq($$
	SELECT indexrelid::regclass::text, indisunique, indisprimary,
	       pg_get_indexdef(indexrelid) COLLATE "default"
	  FROM pg_index
	 WHERE indrelid IN ('malachi.declared_hubs'::regclass, 'malachi.declared_children'::regclass)
	 ORDER BY 1
$$, $$ VALUES
	('malachi.declared_children_pkey', true, true,
	 'CREATE UNIQUE INDEX declared_children_pkey ON malachi.declared_children USING btree (hub, child_id)'),
	('malachi.declared_hubs_pkey', true, true,
	 'CREATE UNIQUE INDEX declared_hubs_pkey ON malachi.declared_hubs USING btree (hub)') $$,
	'declared_hubs and declared_children are indexed by their keys only');

SELECT sequences_are('malachi', ARRAY['range_id_seq', 'segment_id_seq', 'topic_id_seq']);

---- the record type ----------------------------------------------------------

SELECT types_are('malachi', ARRAY['record']);
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of(
	(SELECT typrelid FROM pg_type WHERE oid = 'malachi.record'::regtype)) $$,
	$$ VALUES ('range_id', 'bigint'), ('offset', 'bigint'), ('key', 'text'),
              ('value', 'bytea'), ('headers', 'jsonb'),
              ('produced_at', 'timestamp with time zone') $$,
	'type malachi.record has attributes range_id, offset, key, value, headers, produced_at, in order');

---- views -----------------------------------------------------------------

SELECT views_are('malachi', ARRAY['children', 'consumer_lag', 'ranges', 'segments',
                                  'stat_topics', 'sweeper_status']);
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of('malachi.children') $$,
	$$ VALUES ('hub', 'text'), ('child_id', 'text'), ('node', 'text'), ('pid', 'integer'),
              ('state', 'text'), ('restarts', 'integer'), ('last_error', 'text'),
              ('processed', 'bigint') $$,
	'view malachi.children has columns hub, child_id, node, pid, state, restarts, last_error, processed, in order');
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of('malachi.consumer_lag') $$,
	$$ VALUES ('group', 'text'), ('topic', 'text'), ('range_id', 'bigint'),
              ('committed', 'bigint'), ('end_offset', 'bigint'), ('lag', 'bigint') $$,
	'view malachi.consumer_lag has columns group, topic, range_id, committed, end_offset, lag, in order');
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of('malachi.ranges') $$,
	$$ VALUES ('range_id', 'bigint'), ('topic', 'text'), ('key_lo', 'bigint'),
              ('key_hi', 'bigint'), ('state', 'text'), ('parents', 'bigint[]'),
              ('created_at', 'timestamp with time zone'),
              ('sealed_at', 'timestamp with time zone') $$,
	'view malachi.ranges has columns range_id, topic, key_lo, key_hi, state, parents, created_at, sealed_at, in order');
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of('malachi.segments') $$,
	$$ VALUES ('segment_id', 'bigint'), ('range_id', 'bigint'), ('seq', 'integer'),
              ('base_offset', 'bigint'), ('end_offset', 'bigint'), ('byte_size', 'bigint'),
              ('state', 'text'), ('replicas', 'text[]'),
              ('created_at', 'timestamp with time zone'),
              ('sealed_at', 'timestamp with time zone'),
              ('scrubbed_at', 'timestamp with time zone'), ('corrupt', 'text') $$,
	'view malachi.segments has columns segment_id, range_id, seq, base_offset, end_offset, byte_size, state, replicas, created_at, sealed_at, scrubbed_at, corrupt, in order');
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of('malachi.stat_topics') $$,
	$$ VALUES ('topic', 'text'), ('ranges', 'bigint'), ('segments', 'bigint'),
              ('records', 'bigint'), ('bytes_on_disk', 'bigint'),
              ('oldest', 'timestamp with time zone'), ('newest', 'timestamp with time zone') $$,
	'view malachi.stat_topics has columns topic, ranges, segments, records, bytes_on_disk, oldest, newest, in order');
SELECT results_eq($$ SELECT * FROM pg_temp.columns_of('malachi.sweeper_status') $$,
	$$ VALUES ('passes', 'bigint'), ('last_pass_start', 'timestamp with time zone'),
              ('duration_ms', 'double precision'), ('counts', 'jsonb'),
              ('last_error', 'text') $$,
	'view malachi.sweeper_status has columns passes, last_pass_start, duration_ms, counts, last_error, in order');

---- functions: exact signatures and return types --------------------------

SELECT functions_are('malachi', ARRAY[
	'active_range_ids', 'adopt_manifest', 'alter_policy', 'alter_topic', 'bind_topic_policy',
	'check_declared_owner', 'check_range_truncate', 'check_range_update', 'check_segment_tiling',
	'check_tiling', 'children_state', 'clear_declared', 'commit_offset',
	'committed_offsets', 'consume', 'create_policy', 'create_topic', 'declare_child',
	'declared_child', 'declared_children', 'declared_manifest', 'declared_parked',
	'delete_segment', 'drop_policy', 'drop_topic', 'head_state',
	'init_storage', 'key_hash', 'merge_ranges', 'note_declared_change',
	'note_metadata_change', 'offset_for_time', 'poll', 'produce', 'produce_batch', 'read',
	'read_consume', 'read_history', 'reset_group', 'roll', 'route', 'run_maintenance',
	'settings_valid', 'split_range', 'stream_history', 'sweeper_state', 'topic_policy_name', 'topic_settings',
	'topics_bound_to', 'undeclare_child']);

-- the whole contract at once: argument names, defaults, result, volatility,
-- strictness, parallel safety, language; overloads only where listed (produce
-- and produce_batch, by value type), nothing extra
SELECT results_eq($$
	SELECT p.proname::text COLLATE "default", pg_get_function_arguments(p.oid),
	       pg_get_function_result(p.oid), p.provolatile::text,
	       p.proisstrict, p.proparallel::text, l.lanname::text COLLATE "default"
	  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
	 WHERE p.pronamespace = 'malachi'::regnamespace
	 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
$$, $$ VALUES
	('active_range_ids', 'topic text', 'SETOF bigint', 's', false, 'u', 'c'),
	('adopt_manifest', 'hub text, manifest jsonb', 'text', 'v', false, 'u', 'c'),
	('alter_policy', 'policy text, definition jsonb', 'void', 'v', false, 'u', 'c'),
	('alter_topic', 'topic text, settings jsonb', 'jsonb', 'v', false, 'u', 'c'),
	('bind_topic_policy', 'topic text, policy text', 'void', 'v', false, 'u', 'c'),
	('check_declared_owner', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('check_range_truncate', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('check_range_update', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('check_segment_tiling', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('check_tiling', '', 'trigger', 'v', false, 'u', 'plpgsql'),
	('children_state', 'OUT hub text, OUT child_id text, OUT node text, OUT pid integer, OUT state text, OUT restarts integer, OUT last_error text, OUT processed bigint', 'SETOF record', 'v', false, 'u', 'c'),
	('clear_declared', 'hub text', 'bigint', 'v', false, 'u', 'c'),
	('commit_offset', '"group" text, topic text, offsets jsonb', 'void', 'v', false, 'u', 'c'),
	('committed_offsets', '"group" text, topic text', 'TABLE(range_id bigint, "offset" bigint)', 'v', false, 'u', 'c'),
	('consume', 'topic text, "group" text, max_records integer DEFAULT 100, wait interval DEFAULT ''00:00:00''::interval', 'SETOF malachi.record', 'v', false, 'u', 'c'),
	('create_policy', 'policy text, definition jsonb', 'void', 'v', false, 'u', 'c'),
	('create_topic', 'topic text, ranges integer DEFAULT 1, replication_factor integer DEFAULT NULL::integer, policy text DEFAULT NULL::text', 'bigint', 'v', false, 'u', 'c'),
	('declare_child', 'hub text, child_id text, spec jsonb, meta jsonb DEFAULT ''{}''::jsonb', 'bigint', 'v', false, 'u', 'c'),
	('declared_child', 'hub text, child_id text', 'jsonb', 'v', false, 'u', 'c'),
	('declared_children', 'hub text', 'TABLE(version bigint, children jsonb)', 'v', false, 'u', 'c'),
	('declared_manifest', 'hub text', 'jsonb', 'v', false, 'u', 'c'),
	('declared_parked', 'hub text', 'boolean', 'v', false, 'u', 'c'),
	('delete_segment', 'segment_id bigint', 'void', 'v', false, 'u', 'c'),
	('drop_policy', 'policy text', 'void', 'v', false, 'u', 'c'),
	('drop_topic', 'topic text', 'void', 'v', false, 'u', 'c'),
	('head_state', 'OUT segment_id bigint, OUT visible_offset bigint, OUT visible_bytes bigint, OUT fenced boolean, OUT last_append timestamp with time zone', 'SETOF record', 'v', false, 'u', 'c'),
	('init_storage', '', 'bigint', 'v', false, 'u', 'c'),
	('key_hash', 'key text', 'bigint', 'i', true, 's', 'c'),
	('merge_ranges', 'a bigint, b bigint', 'bigint', 'v', false, 'u', 'c'),
	('note_declared_change', '', 'trigger', 'v', false, 'u', 'c'),
	('note_metadata_change', '', 'trigger', 'v', false, 'u', 'c'),
	('offset_for_time', 'range_id bigint, ts timestamp with time zone', 'bigint', 'v', false, 'u', 'c'),
	('poll', 'topic text, "group" text, max_records integer DEFAULT 100', 'SETOF malachi.record', 'v', false, 'u', 'c'),
	('produce', 'topic text, key text, value bytea, headers jsonb DEFAULT NULL::jsonb', 'bigint', 'v', false, 'u', 'c'),
	('produce', 'topic text, key text, value jsonb, headers jsonb DEFAULT NULL::jsonb', 'bigint', 'v', false, 'u', 'c'),
	('produce', 'topic text, key text, value text, headers jsonb DEFAULT NULL::jsonb', 'bigint', 'v', false, 'u', 'c'),
	('produce_batch', 'topic text, keys text[], "values" bytea[], headers jsonb[] DEFAULT NULL::jsonb[]', 'bigint', 'v', false, 'u', 'c'),
	('produce_batch', 'topic text, keys text[], "values" jsonb[], headers jsonb[] DEFAULT NULL::jsonb[]', 'bigint', 'v', false, 'u', 'c'),
	('produce_batch', 'topic text, keys text[], "values" text[], headers jsonb[] DEFAULT NULL::jsonb[]', 'bigint', 'v', false, 'u', 'c'),
	('read', 'range_id bigint, "offset" bigint, max_records integer', 'SETOF malachi.record', 'v', false, 'u', 'c'),
	('read_consume', 'range_id bigint, cursor text, max_records integer', 'TABLE(records malachi.record[], next_cursor text, skips jsonb)', 'v', false, 'u', 'c'),
	('read_history', 'range_id bigint', 'SETOF malachi.record', 'v', false, 'u', 'c'),
	('reset_group', '"group" text, topic text, "to" text DEFAULT ''earliest''::text', 'void', 'v', false, 'u', 'c'),
	('roll', 'range_id bigint', 'bigint', 'v', false, 'u', 'c'),
	('route', 'topic text, key text', 'bigint', 's', false, 'u', 'c'),
	('run_maintenance', '', 'jsonb', 'v', false, 'u', 'c'),
	('settings_valid', 'settings jsonb, what text', 'boolean', 'i', true, 'u', 'c'),
	('split_range', 'range_id bigint', 'TABLE(left_id bigint, right_id bigint)', 'v', false, 'u', 'c'),
	('stream_history', 'range_id bigint, cursor text, max_records integer', 'TABLE(records malachi.record[], next_cursor text, skips jsonb)', 'v', false, 'u', 'c'),
	('sweeper_state', 'OUT passes bigint, OUT last_pass_start timestamp with time zone, OUT duration_ms double precision, OUT counts jsonb, OUT last_error text', 'record', 'v', false, 'u', 'c'),
	('topic_policy_name', 'topic text', 'text', 's', false, 'u', 'c'),
	('topic_settings', 'topic text', 'jsonb', 's', false, 'u', 'c'),
	('topics_bound_to', 'policy text', 'SETOF text', 's', false, 'u', 'c'),
	('undeclare_child', 'hub text, child_id text', 'bigint', 'v', false, 'u', 'c')
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
	('produce', '{text,text,bytea,jsonb}'), ('produce', '{text,text,text,jsonb}'),
	('produce', '{text,text,jsonb,jsonb}'),
	('produce_batch', '{text,text[],bytea[],jsonb[]}'),
	('produce_batch', '{text,text[],text[],jsonb[]}'),
	('produce_batch', '{text,text[],jsonb[],jsonb[]}'),
	('read', '{bigint,bigint,integer}'),
	('offset_for_time', '{bigint,timestamp with time zone}'),
	('roll', '{bigint}'), ('head_state', '{}'), ('init_storage', '{}'),
	('check_range_update', '{}'), ('check_tiling', '{}'),
	('check_range_truncate', '{}'), ('note_metadata_change', '{}'),
	('check_declared_owner', '{}'),
	('check_segment_tiling', '{}'), ('run_maintenance', '{}'),
	('delete_segment', '{bigint}'), ('sweeper_state', '{}'),
	('read_history', '{bigint}'), ('stream_history', '{bigint,text,integer}'),
	('read_consume', '{bigint,text,integer}'),
	('consume', '{text,text,integer,interval}'), ('poll', '{text,text,integer}'),
	('commit_offset', '{text,text,jsonb}'), ('committed_offsets', '{text,text}'),
	('reset_group', '{text,text,text}'),
	('declare_child', '{text,text,jsonb,jsonb}'), ('undeclare_child', '{text,text}'),
	('declared_children', '{text}'), ('declared_child', '{text,text}'),
	('declared_manifest', '{text}'), ('adopt_manifest', '{text,jsonb}'),
	('clear_declared', '{text}'), ('declared_parked', '{text}'),
	('children_state', '{}'), ('note_declared_change', '{}')
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
	('produce', '{text,text,bytea,jsonb}', 'bigint'), ('produce', '{text,text,text,jsonb}', 'bigint'),
	('produce', '{text,text,jsonb,jsonb}', 'bigint'),
	('produce_batch', '{text,text[],bytea[],jsonb[]}', 'bigint'),
	('produce_batch', '{text,text[],text[],jsonb[]}', 'bigint'),
	('produce_batch', '{text,text[],jsonb[],jsonb[]}', 'bigint'),
	('read', '{bigint,bigint,integer}', 'setof malachi.record'),
	('offset_for_time', '{bigint,timestamp with time zone}', 'bigint'),
	('roll', '{bigint}', 'bigint'), ('head_state', '{}', 'setof record'),
	('init_storage', '{}', 'bigint'),
	('check_range_update', '{}', 'trigger'), ('check_tiling', '{}', 'trigger'),
	('check_range_truncate', '{}', 'trigger'), ('note_metadata_change', '{}', 'trigger'),
	('check_declared_owner', '{}', 'trigger'),
	('check_segment_tiling', '{}', 'trigger'), ('run_maintenance', '{}', 'jsonb'),
	('delete_segment', '{bigint}', 'void'), ('sweeper_state', '{}', 'record'),
	('read_history', '{bigint}', 'setof malachi.record'),
	('stream_history', '{bigint,text,integer}', 'setof record'),
	('read_consume', '{bigint,text,integer}', 'setof record'),
	('consume', '{text,text,integer,interval}', 'setof malachi.record'),
	('poll', '{text,text,integer}', 'setof malachi.record'),
	('commit_offset', '{text,text,jsonb}', 'void'),
	('committed_offsets', '{text,text}', 'setof record'),
	('reset_group', '{text,text,text}', 'void'),
	('declare_child', '{text,text,jsonb,jsonb}', 'bigint'),
	('undeclare_child', '{text,text}', 'bigint'),
	('declared_children', '{text}', 'setof record'),
	('declared_child', '{text,text}', 'jsonb'),
	('declared_manifest', '{text}', 'jsonb'),
	('adopt_manifest', '{text,jsonb}', 'text'),
	('clear_declared', '{text}', 'bigint'),
	('declared_parked', '{text}', 'boolean'),
	('children_state', '{}', 'setof record'),
	('note_declared_change', '{}', 'trigger')
  ) AS v(f, args, ret);

-- split_range's result columns, by name and type
SELECT results_eq($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = 'malachi.split_range(bigint)'::regprocedure AND m = 't'
$$, $$ VALUES ('left_id', 'bigint'), ('right_id', 'bigint') $$,
	'split_range returns TABLE(left_id bigint, right_id bigint)');

-- the result columns of the other TABLE functions, by name and type
SELECT results_eq(format($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = %L::regprocedure AND m = 't'
$$, f), $$ VALUES ('records', 'malachi.record[]'), ('next_cursor', 'text'), ('skips', 'jsonb') $$,
	f || ' returns TABLE(records malachi.record[], next_cursor text, skips jsonb)')
  FROM unnest(ARRAY['malachi.stream_history(bigint,text,integer)',
                    'malachi.read_consume(bigint,text,integer)']) f;
SELECT results_eq($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = 'malachi.committed_offsets(text,text)'::regprocedure AND m = 't'
$$, $$ VALUES ('range_id', 'bigint'), ('offset', 'bigint') $$,
	'committed_offsets returns TABLE(range_id bigint, "offset" bigint)');
SELECT results_eq($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = 'malachi.declared_children(text)'::regprocedure AND m = 't'
$$, $$ VALUES ('version', 'bigint'), ('children', 'jsonb') $$,
	'declared_children returns TABLE(version bigint, children jsonb)');

-- head_state's result columns (OUT parameters), by name and type
SELECT results_eq($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = 'malachi.head_state()'::regprocedure AND m = 'o'
$$, $$ VALUES ('segment_id', 'bigint'), ('visible_offset', 'bigint'),
              ('visible_bytes', 'bigint'), ('fenced', 'boolean'),
              ('last_append', 'timestamp with time zone') $$,
	'head_state returns (segment_id bigint, visible_offset bigint, visible_bytes bigint, fenced boolean, last_append timestamptz)');
SELECT results_eq($$
	SELECT n COLLATE "default", format_type(t, NULL)
	  FROM pg_proc p,
	       unnest(p.proargnames, p.proallargtypes, p.proargmodes) AS a(n, t, m)
	 WHERE p.oid = 'malachi.children_state()'::regprocedure AND m = 'o'
$$, $$ VALUES ('hub', 'text'), ('child_id', 'text'), ('node', 'text'), ('pid', 'integer'),
              ('state', 'text'), ('restarts', 'integer'), ('last_error', 'text'),
              ('processed', 'bigint') $$,
	'children_state returns (hub text, child_id text, node text, pid int, state text, restarts int, last_error text, processed bigint)');

---- triggers --------------------------------------------------------------

-- tgenabled: 'A' fires always (also for changes applied by logical
-- replication in replica mode), 'O' in origin and local mode only
SELECT results_eq($$
	SELECT tgrelid::regclass::text, tgname::text COLLATE "default", tgfoid::regproc::text,
	       tgdeferrable, tginitdeferred, tgenabled::text
	  FROM pg_trigger
	 WHERE tgrelid IN (SELECT oid FROM pg_class
	                    WHERE relnamespace = 'malachi'::regnamespace)
	   AND NOT tgisinternal
	 ORDER BY 1, 2
$$, $$ VALUES
	('malachi.declared_children', 'declared_children_changed', 'malachi.note_declared_change', false, false, 'A'),
	('malachi.declared_children', 'declared_children_owner', 'malachi.check_declared_owner', false, false, 'O'),
	('malachi.declared_hubs', 'declared_hubs_changed', 'malachi.note_declared_change', false, false, 'A'),
	('malachi.policy_meta', 'policy_meta_changed', 'malachi.note_metadata_change', false, false, 'A'),
	('malachi.range_meta', 'range_immutable', 'malachi.check_range_update', false, false, 'O'),
	('malachi.range_meta', 'range_meta_changed', 'malachi.note_metadata_change', false, false, 'A'),
	('malachi.range_meta', 'range_tiling_delete', 'malachi.check_tiling', true, true, 'O'),
	('malachi.range_meta', 'range_tiling_insert', 'malachi.check_tiling', true, true, 'O'),
	('malachi.range_meta', 'range_tiling_update', 'malachi.check_tiling', true, true, 'O'),
	('malachi.range_meta', 'range_truncate', 'malachi.check_range_truncate', false, false, 'O'),
	('malachi.segment_meta', 'segment_tiling', 'malachi.check_segment_tiling', true, true, 'O'),
	('malachi.topic_meta', 'topic_meta_changed', 'malachi.note_metadata_change', false, false, 'A'),
	('malachi.topic_policy', 'topic_policy_changed', 'malachi.note_metadata_change', false, false, 'A')
$$, 'triggers: range immutability, deferred tiling, truncate guard, segment tiling, declared owner; epoch bump and supervisor wake-up enabled ALWAYS');
-- when each fires: timing, events, level and condition
SELECT results_eq($$
	SELECT tgname::text COLLATE "default", pg_get_triggerdef(oid)
	  FROM pg_trigger
	 WHERE tgrelid IN (SELECT oid FROM pg_class
	                    WHERE relnamespace = 'malachi'::regnamespace)
	   AND NOT tgisinternal
	 ORDER BY tgrelid::regclass::text, tgname
$$, $$ VALUES
	('declared_children_changed', 'CREATE TRIGGER declared_children_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON malachi.declared_children FOR EACH STATEMENT EXECUTE FUNCTION malachi.note_declared_change()'),
	('declared_children_owner', 'CREATE TRIGGER declared_children_owner BEFORE INSERT OR UPDATE ON malachi.declared_children FOR EACH ROW EXECUTE FUNCTION malachi.check_declared_owner()'),
	('declared_hubs_changed', 'CREATE TRIGGER declared_hubs_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON malachi.declared_hubs FOR EACH STATEMENT EXECUTE FUNCTION malachi.note_declared_change()'),
	('policy_meta_changed', 'CREATE TRIGGER policy_meta_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON malachi.policy_meta FOR EACH STATEMENT EXECUTE FUNCTION malachi.note_metadata_change()'),
	('range_immutable', 'CREATE TRIGGER range_immutable BEFORE UPDATE ON malachi.range_meta FOR EACH ROW EXECUTE FUNCTION malachi.check_range_update()'),
	('range_meta_changed', 'CREATE TRIGGER range_meta_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON malachi.range_meta FOR EACH STATEMENT EXECUTE FUNCTION malachi.note_metadata_change()'),
	('range_tiling_delete', 'CREATE CONSTRAINT TRIGGER range_tiling_delete AFTER DELETE ON malachi.range_meta DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((old.state = ''active''::text)) EXECUTE FUNCTION malachi.check_tiling()'),
	('range_tiling_insert', 'CREATE CONSTRAINT TRIGGER range_tiling_insert AFTER INSERT ON malachi.range_meta DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((new.state = ''active''::text)) EXECUTE FUNCTION malachi.check_tiling()'),
	('range_tiling_update', 'CREATE CONSTRAINT TRIGGER range_tiling_update AFTER UPDATE OF state ON malachi.range_meta DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state)) EXECUTE FUNCTION malachi.check_tiling()'),
	('range_truncate', 'CREATE TRIGGER range_truncate BEFORE TRUNCATE ON malachi.range_meta FOR EACH STATEMENT EXECUTE FUNCTION malachi.check_range_truncate()'),
	('segment_tiling', 'CREATE CONSTRAINT TRIGGER segment_tiling AFTER INSERT ON malachi.segment_meta DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION malachi.check_segment_tiling()'),
	('topic_meta_changed', 'CREATE TRIGGER topic_meta_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON malachi.topic_meta FOR EACH STATEMENT EXECUTE FUNCTION malachi.note_metadata_change()'),
	('topic_policy_changed', 'CREATE TRIGGER topic_policy_changed AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON malachi.topic_policy FOR EACH STATEMENT EXECUTE FUNCTION malachi.note_metadata_change()')
$$, 'each trigger fires at its timing, on its events, at its level, under its condition');

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
$$, $$ VALUES ('malachi.declared_children'), ('malachi.declared_hubs'),
              ('malachi.group_positions'), ('malachi.policy_meta'), ('malachi.range_id_seq'),
              ('malachi.range_meta'),
              ('malachi.segment_id_seq'), ('malachi.segment_meta'),
              ('malachi.topic_id_seq'), ('malachi.topic_meta'), ('malachi.topic_policy') $$,
	'extconfig names the eight tables and three sequences');
SELECT is((SELECT array_length(extconfig, 1) = array_length(extcondition, 1)
                  AND '' = ALL (extcondition)
             FROM pg_extension WHERE extname = 'malachi'),
          true, 'every configuration relation is dumped in full (empty condition)');

---- comments and membership -------------------------------------------------

-- every function, table, view and composite type of the extension has a comment
SELECT is_empty($$
	SELECT pg_describe_object(d.classid, d.objid, 0)
	  FROM pg_depend d
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'malachi'
	  LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	   AND (d.classid IN ('pg_proc'::regclass, 'pg_type'::regclass)
	        OR (d.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p', 'v', 'm')))
	   AND obj_description(d.objid, d.classid::regclass::name) IS NULL
$$, 'every function, table, view and type of malachi has a COMMENT');
SELECT is((SELECT count(*)::int FROM pg_depend d
            WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'malachi')
              AND d.deptype = 'e'
              AND (d.classid = 'pg_proc'::regclass
                   OR (d.classid = 'pg_class'::regclass
                       AND (SELECT relkind FROM pg_class WHERE oid = d.objid) IN ('r', 'v')))),
          68, 'the comment check covers 54 functions, 8 tables and 6 views');
SELECT is((SELECT array_agg(d.objid::regtype::text ORDER BY 1) FROM pg_depend d
            WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'malachi')
              AND d.deptype = 'e' AND d.classid = 'pg_type'::regclass),
          ARRAY['malachi.record'], 'the comment check covers 1 type, malachi.record');
SELECT ok(obj_description(p.oid, 'pg_proc') IS NOT NULL
          AND obj_description(p.oid, 'pg_proc') <> '',
          p.oid::regprocedure::text || ' has a comment')
  FROM pg_proc p WHERE p.pronamespace = 'malachi'::regnamespace
 ORDER BY p.proname;
SELECT ok(obj_description(('malachi.' || t)::regclass, 'pg_class') <> '',
          'malachi.' || t || ' has a comment')
  FROM unnest(ARRAY['children', 'consumer_lag', 'declared_children', 'declared_hubs',
                    'group_positions', 'policy_meta', 'range_meta', 'ranges',
                    'segment_meta', 'segments', 'stat_topics', 'sweeper_status', 'topic_meta',
                    'topic_policy']) t;
SELECT ok(obj_description('malachi.record'::regtype, 'pg_type') <> '',
          'malachi.record has a comment');

-- everything in the schema is a member of the extension (nothing dangling);
-- array types and the row types of tables and views belong through their owner
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
	UNION ALL
	SELECT t.oid::regtype::text FROM pg_type t
	 WHERE t.typnamespace = 'malachi'::regnamespace
	   AND NOT EXISTS (SELECT FROM pg_type a WHERE a.typarray = t.oid)
	   AND (t.typrelid = 0
	        OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
	   AND NOT EXISTS (SELECT FROM pg_depend d
	                    WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid
	                      AND d.deptype = 'e')
$$, 'every relation, function and type of schema malachi belongs to the extension');

SELECT * FROM finish();
ROLLBACK;
