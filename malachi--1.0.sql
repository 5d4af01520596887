/* malachi--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION malachi" to load this file. \quit

/*
 * Malachi must be preloaded (its shared memory and workers exist only then)
 * and lives in exactly one database per node (malachi.database), the one its
 * background workers connect to.
 */
DO $guard$
BEGIN
	IF current_setting('malachi.database', true) IS NULL THEN
		RAISE EXCEPTION 'malachi must be loaded via shared_preload_libraries'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Add malachi to shared_preload_libraries in postgresql.conf and restart the server.';
	END IF;
	IF current_database() <> current_setting('malachi.database') THEN
		RAISE EXCEPTION 'malachi can only be created in database "%"',
				current_setting('malachi.database')
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('The current database is "%s".', current_database()),
				  HINT = 'Connect to that database, or set malachi.database and restart the server.';
	END IF;
END
$guard$;

/* Roles are cluster-wide: create them only when absent. */
DO $roles$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['malachi_admin', 'malachi_producer', 'malachi_consumer']
	LOOP
		IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
			EXECUTE format('CREATE ROLE %I NOLOGIN', r);
		END IF;
	END LOOP;
END
$roles$;

GRANT USAGE ON SCHEMA malachi TO malachi_admin, malachi_producer, malachi_consumer;

/*---- control plane: tables ----*/

CREATE SEQUENCE malachi.topic_id_seq;
CREATE SEQUENCE malachi.range_id_seq;

CREATE TABLE malachi.policy_meta (
	policy		text PRIMARY KEY
				CHECK (policy <> '' AND octet_length(policy) <= 249),
	definition	jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(definition) = 'object'),
	created_at	timestamptz NOT NULL DEFAULT now(),
	updated_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE malachi.policy_meta IS
	'Named storage policies: settings that topics bound to them inherit';

CREATE TABLE malachi.topic_meta (
	topic_id	bigint PRIMARY KEY DEFAULT nextval('malachi.topic_id_seq')
				CHECK (topic_id > 0 AND topic_id < 2147483648),
	topic		text NOT NULL UNIQUE
				CHECK (topic <> '' AND octet_length(topic) <= 249),
	settings	jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(settings) = 'object'),
	created_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE malachi.topic_meta IS
	'Topics: named logs, with their per-topic setting overrides';

CREATE TABLE malachi.topic_policy (
	topic_id	bigint PRIMARY KEY
				REFERENCES malachi.topic_meta ON DELETE CASCADE,
	policy		text NOT NULL
				REFERENCES malachi.policy_meta ON DELETE RESTRICT
);
CREATE INDEX topic_policy_policy_idx ON malachi.topic_policy (policy);
COMMENT ON TABLE malachi.topic_policy IS
	'Bindings of topics to policies (at most one policy per topic)';

/*
 * A range owns the slice [key_lo, key_hi) of its topic's keyspace.  Slices
 * are nodes of the halving tree of [0, 2^32): a power-of-two width, aligned.
 * The exclusion constraint forbids two active ranges of one topic from
 * overlapping (topic_id * 2^32 + key maps every topic to its own stretch of
 * bigint); the deferred trigger below checks that they cover everything.
 */
CREATE TABLE malachi.range_meta (
	range_id	bigint PRIMARY KEY DEFAULT nextval('malachi.range_id_seq'),
	topic_id	bigint NOT NULL REFERENCES malachi.topic_meta ON DELETE CASCADE,
	key_lo		bigint NOT NULL,
	key_hi		bigint NOT NULL,
	state		text NOT NULL DEFAULT 'active'
				CHECK (state IN ('active', 'sealed')),
	parents		bigint[] NOT NULL DEFAULT '{}',
	created_at	timestamptz NOT NULL DEFAULT now(),
	sealed_at	timestamptz,
	CONSTRAINT range_slice_bounds
		CHECK (key_lo >= 0 AND key_hi <= 4294967296 AND key_lo < key_hi),
	CONSTRAINT range_slice_aligned
		CHECK (((key_hi - key_lo) & (key_hi - key_lo - 1)) = 0
			   AND key_lo % (key_hi - key_lo) = 0),
	CONSTRAINT range_sealed_at
		CHECK ((state = 'sealed') = (sealed_at IS NOT NULL)),
	CONSTRAINT range_active_no_overlap
		EXCLUDE USING gist (
			int8range(topic_id * 4294967296 + key_lo,
					  topic_id * 4294967296 + key_hi) WITH &&)
		WHERE (state = 'active')
);
CREATE INDEX range_meta_active_idx ON malachi.range_meta (topic_id, key_lo)
	WHERE state = 'active';
COMMENT ON TABLE malachi.range_meta IS
	'Ranges: slices of a topic''s keyspace; active ones tile [0, 2^32)';

/*
 * A range keeps its topic, slice and parents for life, and a sealed range
 * never becomes active again: history that readers follow through parents
 * must not move under them.
 */
CREATE FUNCTION malachi.check_range_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.range_id <> OLD.range_id OR NEW.topic_id <> OLD.topic_id
	   OR NEW.key_lo <> OLD.key_lo OR NEW.key_hi <> OLD.key_hi
	   OR NEW.parents IS DISTINCT FROM OLD.parents THEN
		RAISE EXCEPTION 'range % cannot change its topic, slice or parents', OLD.range_id
			USING ERRCODE = 'MA011',
				  HINT = 'Split or merge the range instead.';
	END IF;
	IF OLD.state = 'sealed' AND NEW.state = 'active' THEN
		RAISE EXCEPTION 'sealed range % cannot become active again', OLD.range_id
			USING ERRCODE = 'MA011';
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION malachi.check_range_update() IS
	'Trigger: ranges never change their slice, and sealed ranges stay sealed';

CREATE TRIGGER range_immutable BEFORE UPDATE ON malachi.range_meta
	FOR EACH ROW EXECUTE FUNCTION malachi.check_range_update();

/*
 * Tiling: at commit, the active ranges of every topic a transaction touched
 * must cover exactly 2^32 hashes.  With no overlap (the exclusion constraint)
 * and every slice inside [0, 2^32) (the checks), that is a perfect tiling.
 * Only rows that enter or leave the active set fire the check.
 */
CREATE FUNCTION malachi.check_tiling() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	t bigint := CASE WHEN TG_OP = 'DELETE' THEN OLD.topic_id ELSE NEW.topic_id END;
	covered numeric;
BEGIN
	IF NOT EXISTS (SELECT FROM malachi.topic_meta WHERE topic_id = t) THEN
		RETURN NULL;			-- the topic is gone with all its ranges
	END IF;
	SELECT coalesce(sum(key_hi - key_lo), 0) INTO covered
	  FROM malachi.range_meta WHERE topic_id = t AND state = 'active';
	IF covered <> 4294967296 THEN
		RAISE EXCEPTION 'active ranges of topic % do not tile the keyspace', t
			USING ERRCODE = 'MA010',
				  DETAIL = format('They cover %s of 4294967296 key hashes.', covered),
				  HINT = 'Change ranges with malachi.split_range and malachi.merge_ranges only.';
	END IF;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION malachi.check_tiling() IS
	'Constraint trigger: active ranges of a topic tile [0, 2^32) at commit';

CREATE CONSTRAINT TRIGGER range_tiling_insert
	AFTER INSERT ON malachi.range_meta
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.state = 'active')
	EXECUTE FUNCTION malachi.check_tiling();
CREATE CONSTRAINT TRIGGER range_tiling_update
	AFTER UPDATE OF state ON malachi.range_meta
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION malachi.check_tiling();
CREATE CONSTRAINT TRIGGER range_tiling_delete
	AFTER DELETE ON malachi.range_meta
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state = 'active')
	EXECUTE FUNCTION malachi.check_tiling();

/* TRUNCATE fires no row triggers: refuse it while any topic needs ranges. */
CREATE FUNCTION malachi.check_range_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT FROM malachi.topic_meta) THEN
		RAISE EXCEPTION 'cannot truncate malachi.range_meta while topics exist'
			USING ERRCODE = 'MA010',
				  HINT = 'Drop topics with malachi.drop_topic instead.';
	END IF;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION malachi.check_range_truncate() IS
	'Trigger: truncating ranges would leave topics untiled';

CREATE TRIGGER range_truncate BEFORE TRUNCATE ON malachi.range_meta
	FOR EACH STATEMENT EXECUTE FUNCTION malachi.check_range_truncate();

/* Every change to the control plane bumps the metadata epoch at commit. */
CREATE FUNCTION malachi.note_metadata_change() RETURNS trigger
	AS 'MODULE_PATHNAME', 'malachi_note_metadata_change'
	LANGUAGE C;
COMMENT ON FUNCTION malachi.note_metadata_change() IS
	'Trigger: invalidate cached metadata in every backend when this transaction commits';

CREATE TRIGGER policy_meta_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON malachi.policy_meta FOR EACH STATEMENT
	EXECUTE FUNCTION malachi.note_metadata_change();
CREATE TRIGGER topic_meta_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON malachi.topic_meta FOR EACH STATEMENT
	EXECUTE FUNCTION malachi.note_metadata_change();
CREATE TRIGGER topic_policy_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON malachi.topic_policy FOR EACH STATEMENT
	EXECUTE FUNCTION malachi.note_metadata_change();
CREATE TRIGGER range_meta_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON malachi.range_meta FOR EACH STATEMENT
	EXECUTE FUNCTION malachi.note_metadata_change();

SELECT pg_catalog.pg_extension_config_dump('malachi.topic_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.range_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.policy_meta', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.topic_meta', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.topic_policy', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.range_meta', '');

/*---- views ----*/

CREATE VIEW malachi.ranges AS
	SELECT r.range_id, t.topic, r.key_lo, r.key_hi, r.state, r.parents,
		   r.created_at, r.sealed_at
	  FROM malachi.range_meta r
	  JOIN malachi.topic_meta t USING (topic_id);
COMMENT ON VIEW malachi.ranges IS
	'Every range of every topic: its slice [key_lo, key_hi), state and parents';

/*---- topics and policies ----*/

CREATE FUNCTION malachi.create_topic(topic text, ranges int DEFAULT 1,
									 replication_factor int DEFAULT NULL,
									 policy text DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_create_topic'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.create_topic(text, int, int, text) IS
	'Create a topic whose keyspace is pre-split into a power of two of ranges; returns the root range id';

CREATE FUNCTION malachi.drop_topic(topic text) RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_drop_topic'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.drop_topic(text) IS
	'Drop a topic with all its ranges';

CREATE FUNCTION malachi.alter_topic(topic text, settings jsonb) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'malachi_alter_topic'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.alter_topic(text, jsonb) IS
	'Merge per-topic setting overrides (a null value removes one); returns the effective settings';

CREATE FUNCTION malachi.topic_settings(topic text) RETURNS jsonb
	AS 'MODULE_PATHNAME', 'malachi_topic_settings'
	LANGUAGE C STABLE;
COMMENT ON FUNCTION malachi.topic_settings(text) IS
	'Effective settings of a topic: topic overrides, then its policy, then server defaults';

CREATE FUNCTION malachi.create_policy(policy text, definition jsonb) RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_create_policy'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.create_policy(text, jsonb) IS
	'Create a named storage policy';

CREATE FUNCTION malachi.alter_policy(policy text, definition jsonb) RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_alter_policy'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.alter_policy(text, jsonb) IS
	'Replace a policy''s definition';

CREATE FUNCTION malachi.drop_policy(policy text) RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_drop_policy'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.drop_policy(text) IS
	'Drop a policy; refused while a topic is bound to it';

CREATE FUNCTION malachi.bind_topic_policy(topic text, policy text) RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_bind_topic_policy'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.bind_topic_policy(text, text) IS
	'Bind a topic to a policy; NULL detaches it';

CREATE FUNCTION malachi.topic_policy_name(topic text) RETURNS text
	AS 'MODULE_PATHNAME', 'malachi_topic_policy_name'
	LANGUAGE C STABLE;
COMMENT ON FUNCTION malachi.topic_policy_name(text) IS
	'The policy a topic is bound to, or NULL';

CREATE FUNCTION malachi.topics_bound_to(policy text) RETURNS SETOF text
	AS 'MODULE_PATHNAME', 'malachi_topics_bound_to'
	LANGUAGE C STABLE;
COMMENT ON FUNCTION malachi.topics_bound_to(text) IS
	'Topics bound to a policy, sorted by name';

/*---- ranges ----*/

CREATE FUNCTION malachi.key_hash(key text) RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_key_hash'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION malachi.key_hash(text) IS
	'Stable 32-bit hash of a key''s UTF-8 bytes (MurmurHash3 x86_32, seed 0), in [0, 2^32)';

CREATE FUNCTION malachi.route(topic text, key text) RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_route'
	LANGUAGE C STABLE;
COMMENT ON FUNCTION malachi.route(text, text) IS
	'The active range of a topic that owns a key';

CREATE FUNCTION malachi.active_range_ids(topic text) RETURNS SETOF bigint
	AS 'MODULE_PATHNAME', 'malachi_active_range_ids'
	LANGUAGE C STABLE;
COMMENT ON FUNCTION malachi.active_range_ids(text) IS
	'Active ranges of a topic, ordered by key_lo';

CREATE FUNCTION malachi.split_range(range_id bigint)
	RETURNS TABLE(left_id bigint, right_id bigint)
	AS 'MODULE_PATHNAME', 'malachi_split_range'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.split_range(bigint) IS
	'Seal an active range and replace it by its two halves';

CREATE FUNCTION malachi.merge_ranges(a bigint, b bigint) RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_merge_ranges'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.merge_ranges(bigint, bigint) IS
	'Seal two active buddy ranges and replace them by their union; returns the child id';

/*---- privileges ----*/

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA malachi FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA malachi FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA malachi FROM PUBLIC;

GRANT SELECT ON ALL TABLES IN SCHEMA malachi
	TO malachi_admin, malachi_producer, malachi_consumer;
GRANT INSERT, UPDATE, DELETE ON malachi.policy_meta, malachi.topic_meta,
	malachi.topic_policy, malachi.range_meta TO malachi_admin;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA malachi TO malachi_admin;

GRANT EXECUTE ON FUNCTION
	malachi.key_hash(text),
	malachi.route(text, text),
	malachi.active_range_ids(text),
	malachi.topic_settings(text),
	malachi.topic_policy_name(text),
	malachi.topics_bound_to(text)
	TO malachi_admin, malachi_producer, malachi_consumer;

GRANT EXECUTE ON FUNCTION
	malachi.create_topic(text, int, int, text),
	malachi.drop_topic(text),
	malachi.alter_topic(text, jsonb),
	malachi.create_policy(text, jsonb),
	malachi.alter_policy(text, jsonb),
	malachi.drop_policy(text),
	malachi.bind_topic_policy(text, text),
	malachi.split_range(bigint),
	malachi.merge_ranges(bigint, bigint)
	TO malachi_admin;
