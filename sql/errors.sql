-- errors: every error condition has a stable SQLSTATE (docs/errors.md)
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
DROP SCHEMA IF EXISTS malachi;
RESET client_min_messages;

-- CREATE EXTENSION adopts an existing schema "malachi": one that a role
-- other than a superuser owns, or may create in, is refused (that role
-- could replace what malachi's workers run as a superuser)
CREATE ROLE regress_malachi_squatter;
CREATE SCHEMA malachi AUTHORIZATION regress_malachi_squatter;
-- what it plants there to stand in for built-ins never runs in the check
SET ROLE regress_malachi_squatter;
CREATE FUNCTION malachi.format(text, text) RETURNS text
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked'; END $$;
CREATE FUNCTION malachi.hijacked_eq(oid, int4) RETURNS boolean
	LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked'; END $$;
CREATE OPERATOR malachi.= (LEFTARG = oid, RIGHTARG = int4, FUNCTION = malachi.hijacked_eq);
GRANT USAGE ON SCHEMA malachi TO PUBLIC;
RESET ROLE;
CREATE EXTENSION malachi;
ALTER SCHEMA malachi OWNER TO CURRENT_USER;
GRANT CREATE ON SCHEMA malachi TO regress_malachi_squatter, PUBLIC;
CREATE EXTENSION malachi;
REVOKE CREATE ON SCHEMA malachi FROM regress_malachi_squatter, PUBLIC;
-- its objects there are refused too
CREATE EXTENSION malachi;
DROP OWNED BY regress_malachi_squatter;
DROP ROLE regress_malachi_squatter;
-- a schema only superusers own and create in is fine (a DROP EXTENSION leaves it)
CREATE EXTENSION malachi;

-- run a statement, report its SQLSTATE and message instead of failing
CREATE FUNCTION pg_temp.sqlstate_of(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

SELECT malachi.create_topic('e', 2) AS root \gset
SELECT malachi.create_topic('e4', 4) AS root4 \gset
SELECT malachi.create_policy('ep', '{}');
SELECT malachi.bind_topic_policy('e', 'ep');

SELECT stmt, pg_temp.sqlstate_of(stmt) AS result FROM (VALUES
	-- MA001 no such topic
	($$SELECT malachi.drop_topic('missing')$$),
	($$SELECT malachi.alter_topic('missing', '{}')$$),
	($$SELECT malachi.topic_settings('missing')$$),
	($$SELECT malachi.bind_topic_policy('missing', 'ep')$$),
	($$SELECT malachi.topic_policy_name('missing')$$),
	($$SELECT malachi.route('missing', 'k')$$),
	($$SELECT malachi.active_range_ids('missing')$$),
	-- MA002 topic exists
	($$SELECT malachi.create_topic('e')$$),
	-- MA003 no such range
	($$SELECT malachi.split_range(0)$$),
	($$SELECT malachi.merge_ranges(0, 1)$$),
	-- MA004 range not active
	($$SELECT malachi.split_range($$ || :root || $$)$$),
	($$SELECT malachi.merge_ranges($$ || :root || $$, $$ || (:root + 1) || $$)$$),
	-- MA005 not buddies
	($$SELECT malachi.merge_ranges($$ || (:root + 1) || $$, $$ || (:root + 1) || $$)$$),
	($$SELECT malachi.merge_ranges($$ || (:root4 + 4) || $$, $$ || (:root4 + 5) || $$)$$),
	($$SELECT malachi.merge_ranges($$ || (:root + 1) || $$, $$ || (:root4 + 3) || $$)$$),
	-- MA007 no such policy
	($$SELECT malachi.create_topic('x', 1, NULL, 'missing')$$),
	($$SELECT malachi.alter_policy('missing', '{}')$$),
	($$SELECT malachi.drop_policy('missing')$$),
	($$SELECT malachi.bind_topic_policy('e', 'missing')$$),
	($$SELECT malachi.topics_bound_to('missing')$$),
	-- MA008 policy exists
	($$SELECT malachi.create_policy('ep', '{}')$$),
	-- MA009 policy still bound
	($$SELECT malachi.drop_policy('ep')$$),
	-- MA010 keyspace not tiled, MA011 range immutable (direct DML)
	($$SET CONSTRAINTS ALL IMMEDIATE; DELETE FROM malachi.range_meta WHERE range_id = $$ || (:root + 1)),
	($$TRUNCATE malachi.range_meta CASCADE$$),
	($$UPDATE malachi.range_meta SET key_lo = 0 WHERE range_id = $$ || (:root + 2)),
	-- 22004 null value not allowed
	($$SELECT malachi.create_topic(NULL)$$),
	($$SELECT malachi.create_topic('x', NULL)$$),
	($$SELECT malachi.drop_topic(NULL)$$),
	($$SELECT malachi.alter_topic('e', NULL)$$),
	($$SELECT malachi.topic_settings(NULL)$$),
	($$SELECT malachi.create_policy('x', NULL)$$),
	($$SELECT malachi.alter_policy(NULL, '{}')$$),
	($$SELECT malachi.drop_policy(NULL)$$),
	($$SELECT malachi.bind_topic_policy(NULL, NULL)$$),
	($$SELECT malachi.topic_policy_name(NULL)$$),
	($$SELECT malachi.topics_bound_to(NULL)$$),
	($$SELECT malachi.route(NULL, 'k')$$),
	($$SELECT malachi.route('e', NULL)$$),
	($$SELECT malachi.active_range_ids(NULL)$$),
	($$SELECT malachi.split_range(NULL)$$),
	($$SELECT malachi.merge_ranges(1, NULL)$$),
	-- 22023 invalid parameter value
	($$SELECT malachi.create_topic('x', 6)$$),
	($$SELECT malachi.create_topic('x', 1, 99)$$),
	($$SELECT malachi.create_topic('')$$),
	($$SELECT malachi.create_policy(repeat('p', 250), '{}')$$),
	($$SELECT malachi.alter_topic('e', '{"bogus": 1}')$$),
	($$SELECT malachi.alter_topic('e', '{"zstd_level": "x"}')$$),
	($$SELECT malachi.alter_topic('e', '{"segment_max_age": "x"}')$$),
	($$SELECT malachi.create_policy('x', '[]')$$),
	($$SELECT malachi.route(repeat('t', 250), 'k')$$),
	-- 2202E array subscript error
	($$SELECT malachi.produce_batch('e', ARRAY['a', 'b'], ARRAY['1'])$$),
	($$SELECT malachi.produce_batch('e', ARRAY['a'], ARRAY['1'], ARRAY['{}', '{}']::jsonb[])$$),
	($$SELECT malachi.produce_batch('e', ARRAY[['a']], ARRAY[['1']])$$),
	-- 54000 program limit exceeded: a record over malachi.max_record_bytes
	($$SELECT malachi.produce('e', 'k', repeat('x', 1048576))$$),
	-- 0A000 feature not supported: a manifest of an unknown format
	($$SELECT malachi.adopt_manifest('h', '{"format": 2, "version": 1, "mutated_by": "n", "entries": []}')$$)
) AS t(stmt);

-- MA006 range too small: a width-1 range exists only after 32 splits
DO $$
DECLARE r bigint := malachi.create_topic('tiny');
BEGIN
	FOR i IN 1..32 LOOP
		r := (malachi.split_range(r)).right_id;
	END LOOP;
	PERFORM malachi.split_range(r);
EXCEPTION WHEN SQLSTATE 'MA006' THEN
	RAISE NOTICE 'MA006: %', SQLERRM;
END $$;

-- 55000: PREPARE TRANSACTION after a metadata change
BEGIN;
SELECT malachi.alter_topic('e', '{"zstd_level": 2}') ->> 'zstd_level' AS level;
\set VERBOSITY sqlstate
PREPARE TRANSACTION 'meta';
\set VERBOSITY default
SELECT malachi.topic_settings('e') ->> 'zstd_level' AS level_after;

-- 55P03: a producer whose own transaction locked, by hand, the row of the
-- range whose head the writer worker must open (it asked again forever)
SELECT malachi.create_topic('self') AS self_range \gset
BEGIN;
SELECT range_id = :self_range AS locked FROM malachi.range_meta WHERE range_id = :self_range FOR UPDATE;
SET LOCAL malachi.produce_mode = immediate;
SET LOCAL statement_timeout = '5s';
\set VERBOSITY sqlstate
SELECT malachi.produce('self', 'k', 'v'::text);
\set VERBOSITY default
ROLLBACK;
SELECT malachi.produce('self', 'k', 'v'::text) = :self_range AS produced_after;

-- 55000: CREATE EXTENSION outside malachi.database
CREATE DATABASE malachi_elsewhere;
\c malachi_elsewhere
CREATE EXTENSION malachi;
\c contrib_regression
DROP DATABASE malachi_elsewhere;

-- clean up
SELECT malachi.bind_topic_policy('e', NULL), malachi.drop_policy('ep');
SELECT malachi.drop_topic(topic) FROM malachi.topic_meta ORDER BY topic;
