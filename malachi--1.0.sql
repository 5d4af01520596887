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
	IF pg_catalog.current_setting('malachi.database', true) IS NULL THEN
		RAISE EXCEPTION 'malachi must be loaded via shared_preload_libraries'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Add malachi to shared_preload_libraries in postgresql.conf and restart the server.';
	END IF;
	IF pg_catalog.current_database()::pg_catalog.text OPERATOR(pg_catalog.<>)
	   pg_catalog.current_setting('malachi.database') THEN
		RAISE EXCEPTION 'malachi can only be created in database "%"',
				pg_catalog.current_setting('malachi.database')
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = pg_catalog.format('The current database is "%s".', pg_catalog.current_database()),
				  HINT = 'Connect to that database, or set malachi.database and restart the server.';
	END IF;
END
$guard$;

/*
 * CREATE EXTENSION adopts a schema "malachi" that exists already.  Whoever
 * owns it, may create in it, or owns an object in it can drop and replace
 * objects in it: a table or function that malachi's workers and the
 * functions that switch to the superuser would then use as a superuser.
 * Refuse such a schema unless only superusers own it, create in it and own
 * what is in it.  This block and the one above run before that is known,
 * with the schema first on the search_path: every function and operator
 * in them is named with pg_catalog, so nothing planted there runs.
 */
DO $schema$
DECLARE
	nsp pg_catalog.oid;
	owner pg_catalog.text;
	owner_super pg_catalog.bool;
	creators pg_catalog.text;
	owners pg_catalog.text;
BEGIN
	SELECT n.oid, n.nspowner::pg_catalog.regrole::pg_catalog.text, r.rolsuper
	  INTO nsp, owner, owner_super
	  FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'malachi'::pg_catalog.name;
	SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
									  ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END, ', ')
	  INTO creators
	  FROM pg_catalog.pg_namespace n
	 CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
	  LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	 WHERE n.oid OPERATOR(pg_catalog.=) nsp
	   AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
	   AND NOT coalesce(r.rolsuper, false);
	SELECT pg_catalog.string_agg(DISTINCT o.owner::pg_catalog.regrole::pg_catalog.text, ', ')
	  INTO owners
	  FROM (SELECT relowner FROM pg_catalog.pg_class WHERE relnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT proowner FROM pg_catalog.pg_proc WHERE pronamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT typowner FROM pg_catalog.pg_type WHERE typnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT oprowner FROM pg_catalog.pg_operator WHERE oprnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT opcowner FROM pg_catalog.pg_opclass WHERE opcnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT opfowner FROM pg_catalog.pg_opfamily WHERE opfnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT collowner FROM pg_catalog.pg_collation WHERE collnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT conowner FROM pg_catalog.pg_conversion WHERE connamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT stxowner FROM pg_catalog.pg_statistic_ext WHERE stxnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT dictowner FROM pg_catalog.pg_ts_dict WHERE dictnamespace OPERATOR(pg_catalog.=) nsp
			UNION ALL SELECT cfgowner FROM pg_catalog.pg_ts_config WHERE cfgnamespace OPERATOR(pg_catalog.=) nsp) o(owner)
	  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) o.owner
	 WHERE NOT r.rolsuper;
	IF NOT owner_super OR creators IS NOT NULL OR owners IS NOT NULL THEN
		RAISE EXCEPTION 'schema "malachi" exists already, and a role that is not a superuser owns it, may create in it, or owns an object in it'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = CASE WHEN NOT owner_super
								THEN pg_catalog.format('Its owner, %s, is not a superuser.', owner)
								WHEN creators IS NOT NULL
								THEN pg_catalog.format('CREATE on it is granted to %s.', creators)
								ELSE pg_catalog.format('Objects in it belong to %s.', owners) END,
				  HINT = 'Drop the schema, or give it and everything in it to a superuser and revoke CREATE on it from the others, before CREATE EXTENSION malachi.';
	END IF;
END
$schema$;

/* Roles are cluster-wide: create them only when absent. */
DO $roles$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['malachi_admin', 'malachi_producer', 'malachi_consumer']
	LOOP
		IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) r::pg_catalog.name) THEN
			EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
		END IF;
	END LOOP;
END
$roles$;

GRANT USAGE ON SCHEMA malachi TO malachi_admin, malachi_producer, malachi_consumer;

/*---- control plane: tables ----*/

/*
 * Stored settings are checked by the same code as alter_topic and
 * create_policy, whoever writes the row: a setting a topic or policy cannot
 * hold never reaches the producers or the sweeper.
 */
CREATE FUNCTION malachi.settings_valid(settings jsonb, what text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'malachi_settings_valid'
	LANGUAGE C IMMUTABLE STRICT;
COMMENT ON FUNCTION malachi.settings_valid(jsonb, text) IS
	'Check constraint of stored settings: raises invalid_parameter_value saying what is wrong, else true';

/*
 * Topic ids stop at 2^31 - 2: topic_id * 2^32 + key_hi (the ranges'
 * exclusion constraint) must stay within bigint.  Past it, nextval fails
 * with sequence_generator_limit_exceeded (2200H).
 */
CREATE SEQUENCE malachi.topic_id_seq MAXVALUE 2147483646;
CREATE SEQUENCE malachi.range_id_seq;

CREATE TABLE malachi.policy_meta (
	policy		text PRIMARY KEY
				CHECK (policy <> '' AND octet_length(policy) <= 249),
	definition	jsonb NOT NULL DEFAULT '{}'
				CHECK (malachi.settings_valid(definition, 'stored policy definition')),
	created_at	timestamptz NOT NULL DEFAULT now(),
	updated_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE malachi.policy_meta IS
	'Named storage policies: settings that topics bound to them inherit';

CREATE TABLE malachi.topic_meta (
	topic_id	bigint PRIMARY KEY DEFAULT nextval('malachi.topic_id_seq')
				CHECK (topic_id > 0 AND topic_id < 2147483647),
	topic		text NOT NULL UNIQUE
				CHECK (topic <> '' AND octet_length(topic) <= 249),
	settings	jsonb NOT NULL DEFAULT '{}'
				CHECK (malachi.settings_valid(settings, 'stored topic settings')),
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
	-- a sealed range's final end: where its stream stops, kept when
	-- retention has deleted every segment of it
	end_offset	bigint CHECK (end_offset >= 0),
	CONSTRAINT range_slice_bounds
		CHECK (key_lo >= 0 AND key_hi <= 4294967296 AND key_lo < key_hi),
	CONSTRAINT range_slice_aligned
		CHECK (((key_hi - key_lo) & (key_hi - key_lo - 1)) = 0
			   AND key_lo % (key_hi - key_lo) = 0),
	CONSTRAINT range_sealed_at
		CHECK ((state = 'sealed') = (sealed_at IS NOT NULL)),
	CONSTRAINT range_end_offset
		CHECK ((state = 'sealed') = (end_offset IS NOT NULL)),
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
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
	IF OLD.state = 'sealed' AND NEW.end_offset IS DISTINCT FROM OLD.end_offset THEN
		RAISE EXCEPTION 'sealed range % cannot change its end offset', OLD.range_id
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
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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

/* Changes applied by logical replication (replica mode) invalidate too. */
ALTER TABLE malachi.policy_meta ENABLE ALWAYS TRIGGER policy_meta_changed;
ALTER TABLE malachi.topic_meta ENABLE ALWAYS TRIGGER topic_meta_changed;
ALTER TABLE malachi.topic_policy ENABLE ALWAYS TRIGGER topic_policy_changed;
ALTER TABLE malachi.range_meta ENABLE ALWAYS TRIGGER range_meta_changed;

/*
 * Segments: contiguous runs of a range's offsets, each a file on the brokers
 * of its replica set.  At most one active segment (the head) per range; a
 * range's next segment starts exactly where its predecessor ended, so a
 * range's next offset is the end of its last sealed segment.  Rows are
 * written by the writer worker in transactions of their own (see
 * src/worker/writer.c), never in a producer's.
 */
CREATE SEQUENCE malachi.segment_id_seq;

CREATE TABLE malachi.segment_meta (
	segment_id	bigint PRIMARY KEY DEFAULT nextval('malachi.segment_id_seq'),
	range_id	bigint NOT NULL REFERENCES malachi.range_meta ON DELETE CASCADE,
	seq			int NOT NULL CHECK (seq >= 0),
	base_offset	bigint NOT NULL CHECK (base_offset >= 0),
	end_offset	bigint,
	byte_size	bigint,
	state		text NOT NULL DEFAULT 'active'
				CHECK (state IN ('active', 'sealed')),
	replicas	text[] NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT now(),
	sealed_at	timestamptz,
	scrubbed_at	timestamptz,
	corrupt		text,
	UNIQUE (range_id, seq),
	CONSTRAINT segment_sealed_fields
		CHECK ((state = 'sealed') = (end_offset IS NOT NULL AND byte_size IS NOT NULL
									 AND sealed_at IS NOT NULL)),
	CONSTRAINT segment_end_after_base
		CHECK (end_offset IS NULL OR end_offset >= base_offset)
);
CREATE UNIQUE INDEX segment_meta_one_head ON malachi.segment_meta (range_id)
	WHERE state = 'active';
COMMENT ON TABLE malachi.segment_meta IS
	'Segments of each range: offsets [base_offset, end_offset), file size, replicas, last scrub';

/*
 * Files of an earlier installation may still be in the segment directory:
 * new segment ids start above them, and no head of that installation stays
 * loaded in shared memory.
 */
CREATE FUNCTION malachi.init_storage() RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_init_storage'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.init_storage() IS
	'Run by CREATE EXTENSION: unload stale heads; the largest segment id on disk';
SELECT setval('malachi.segment_id_seq', malachi.init_storage() + 1, false);

/*
 * Tiling of a range's offsets: its segments are numbered 0, 1, 2, ..., the
 * first starts at offset 0, each next one exactly where the one before
 * ended, and only the last may be active.  Retention deletes a range's
 * oldest segments and delete_segment any sealed one: a segment whose
 * predecessor is gone must start at or after the end of every older one,
 * all of them sealed (the records of the hole are gone; readers report
 * it as a skip).  Checked at commit for
 * every range a transaction added segments to, so that rows may arrive in
 * any order (a restore of a dump copies them in storage order).
 */
CREATE FUNCTION malachi.check_segment_tiling() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	bad record;
BEGIN
	SELECT s.seq, s.base_offset, p.end_offset AS prev_end, p.state AS prev_state
	  INTO bad
	  FROM malachi.segment_meta s
	  LEFT JOIN malachi.segment_meta p
		ON p.range_id = s.range_id AND p.seq = s.seq - 1
	 WHERE s.range_id = NEW.range_id
	   AND ((s.seq = 0 AND s.base_offset <> 0)
			OR (s.seq > 0 AND p.segment_id IS NULL
				AND EXISTS (SELECT 1 FROM malachi.segment_meta o
							 WHERE o.range_id = s.range_id AND o.seq < s.seq
							   AND (o.state <> 'sealed' OR o.end_offset > s.base_offset)))
			OR (s.seq > 0 AND (p.state <> 'sealed' OR p.end_offset <> s.base_offset)))
	 ORDER BY s.seq LIMIT 1;
	IF FOUND THEN
		RAISE EXCEPTION 'segment % of range % overlaps or leaves a gap', bad.seq, NEW.range_id
			USING ERRCODE = 'MA012',
				  DETAIL = format('It starts at offset %s; the segment before it %s.',
								  bad.base_offset,
								  CASE WHEN bad.prev_state IS NULL THEN 'was deleted, and an older one is active or ends after that'
									   WHEN bad.prev_state <> 'sealed' THEN 'is not sealed'
									   ELSE format('ends at %s', bad.prev_end) END);
	END IF;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION malachi.check_segment_tiling() IS
	'Constraint trigger: a range''s segments tile its offsets from 0, at commit';

CREATE CONSTRAINT TRIGGER segment_tiling AFTER INSERT ON malachi.segment_meta
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION malachi.check_segment_tiling();

/*
 * Consumer groups: where each group stands in each range's cross-epoch
 * stream.  pending lists the sources of the stream the group has not
 * finished, as (source range, key_lo, key_hi, next offset) quadruples in
 * stream order (see src/cursor.c); offset is the next offset of the range's
 * own records (0 while the stream is still in its ancestors).  Written in
 * the consumer's transaction: commit acknowledges, rollback redelivers.
 */
CREATE TABLE malachi.group_positions (
	group_name	text NOT NULL
				CHECK (group_name <> '' AND octet_length(group_name) <= 249),
	range_id	bigint NOT NULL REFERENCES malachi.range_meta ON DELETE CASCADE,
	topic_id	bigint NOT NULL REFERENCES malachi.topic_meta ON DELETE CASCADE,
	"offset"	bigint NOT NULL CHECK ("offset" >= 0),
	pending		bigint[] NOT NULL
				CHECK (cardinality(pending) % 4 = 0 AND coalesce(array_ndims(pending), 1) = 1),
	updated_at	timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (group_name, range_id)
);
CREATE INDEX group_positions_topic_idx ON malachi.group_positions (group_name, topic_id);
COMMENT ON TABLE malachi.group_positions IS
	'Committed positions of consumer groups: per group and range, where the group stands in the range''s stream';

/*
 * Declared lists: per hub, the versioned list of children (supervised
 * workers) that shall run.  Every change of a hub's list bumps its version
 * by one, in the caller's transaction; the supervisor worker reconciles
 * the running children with the committed list (src/worker/supervisor.c).
 */
CREATE TABLE malachi.declared_hubs (
	hub			text PRIMARY KEY
				CHECK (hub <> '' AND octet_length(hub) <= 120),
	version		bigint NOT NULL DEFAULT 0 CHECK (version >= 0),
	mutated_by	text NOT NULL,
	format		int NOT NULL DEFAULT 1,
	updated_at	timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE malachi.declared_hubs IS
	'Declared lists: one row per hub, its version and the node that changed it last';

CREATE TABLE malachi.declared_children (
	hub			text NOT NULL REFERENCES malachi.declared_hubs ON DELETE CASCADE,
	child_id	text NOT NULL
				CHECK (child_id <> '' AND octet_length(child_id) <= 249),
	spec		jsonb NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
	meta		jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(meta) = 'object'),
	owner		text NOT NULL,
	PRIMARY KEY (hub, child_id)
);
COMMENT ON TABLE malachi.declared_children IS
	'Declared lists: one row per child that shall run, its spec, meta and the role it runs as';

/*
 * A child runs as its owner: only a member of that role (the role itself, a
 * superuser) may declare a child for it or change one of its rows, however
 * the row is written (declare_child, adopt_manifest, plain SQL).
 */
CREATE FUNCTION malachi.check_declared_owner() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = NEW.owner) THEN
		RAISE EXCEPTION 'role "%" does not exist', NEW.owner
			USING ERRCODE = '42704';
	END IF;
	IF NOT pg_catalog.pg_has_role(current_user, NEW.owner, 'MEMBER') THEN
		RAISE EXCEPTION 'permission denied to declare a child that runs as role "%"', NEW.owner
			USING ERRCODE = '42501',
				  DETAIL = 'A child runs as its owner; only members of that role may declare it.';
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION malachi.check_declared_owner() IS
	'Trigger: a declared child''s owner is a role the writer is a member of';
CREATE TRIGGER declared_children_owner BEFORE INSERT OR UPDATE
	ON malachi.declared_children FOR EACH ROW
	EXECUTE FUNCTION malachi.check_declared_owner();

/* Every committed change of a declared list wakes the supervisor. */
CREATE FUNCTION malachi.note_declared_change() RETURNS trigger
	AS 'MODULE_PATHNAME', 'malachi_note_declared_change'
	LANGUAGE C;
COMMENT ON FUNCTION malachi.note_declared_change() IS
	'Trigger: wake the supervisor when this transaction commits';
CREATE TRIGGER declared_hubs_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON malachi.declared_hubs FOR EACH STATEMENT
	EXECUTE FUNCTION malachi.note_declared_change();
CREATE TRIGGER declared_children_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
	ON malachi.declared_children FOR EACH STATEMENT
	EXECUTE FUNCTION malachi.note_declared_change();
ALTER TABLE malachi.declared_hubs ENABLE ALWAYS TRIGGER declared_hubs_changed;
ALTER TABLE malachi.declared_children ENABLE ALWAYS TRIGGER declared_children_changed;

SELECT pg_catalog.pg_extension_config_dump('malachi.topic_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.range_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.policy_meta', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.topic_meta', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.topic_policy', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.range_meta', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.segment_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.segment_meta', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.group_positions', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.declared_hubs', '');
SELECT pg_catalog.pg_extension_config_dump('malachi.declared_children', '');

/*---- views ----*/

CREATE VIEW malachi.ranges AS
	SELECT r.range_id, t.topic, r.key_lo, r.key_hi, r.state, r.parents,
		   r.created_at, r.sealed_at
	  FROM malachi.range_meta r
	  JOIN malachi.topic_meta t USING (topic_id);
COMMENT ON VIEW malachi.ranges IS
	'Every range of every topic: its slice [key_lo, key_hi), state and parents';

CREATE TYPE malachi.record AS (
	range_id	bigint,
	"offset"	bigint,
	key			text,
	value		bytea,
	headers		jsonb,
	produced_at	timestamptz
);
COMMENT ON TYPE malachi.record IS
	'One record of a range: its offset, key, value, headers and production time';

/* Live edges of the heads this node appends to (shared memory). */
CREATE FUNCTION malachi.head_state(
	OUT segment_id bigint, OUT visible_offset bigint, OUT visible_bytes bigint,
	OUT fenced boolean, OUT last_append timestamptz)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'malachi_head_state'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.head_state() IS
	'Heads loaded in shared memory: readable end offset and bytes, fence latch';

CREATE VIEW malachi.segments AS
	SELECT s.segment_id, s.range_id, s.seq, s.base_offset,
		   coalesce(s.end_offset, h.visible_offset) AS end_offset,
		   coalesce(s.byte_size, h.visible_bytes) AS byte_size,
		   s.state, s.replicas, s.created_at, s.sealed_at,
		   s.scrubbed_at, s.corrupt
	  FROM malachi.segment_meta s
	  LEFT JOIN malachi.head_state() h USING (segment_id);
COMMENT ON VIEW malachi.segments IS
	'Every segment: its offsets [base_offset, end_offset), size, state and last scrub; a head shows its readable end';

CREATE VIEW malachi.stat_topics AS
	SELECT t.topic,
		   (SELECT count(*) FROM malachi.range_meta r
			 WHERE r.topic_id = t.topic_id AND r.state = 'active') AS ranges,
		   count(s.segment_id) AS segments,
		   coalesce(sum(s.end_offset - s.base_offset), 0)::bigint AS records,
		   coalesce(sum(s.byte_size), 0)::bigint AS bytes_on_disk,
		   min(s.created_at) AS oldest,
		   max(coalesce(h.last_append, s.sealed_at, s.created_at)) AS newest
	  FROM malachi.topic_meta t
	  LEFT JOIN malachi.range_meta r ON r.topic_id = t.topic_id
	  LEFT JOIN malachi.segments s ON s.range_id = r.range_id
	  LEFT JOIN malachi.head_state() h ON h.segment_id = s.segment_id
	 GROUP BY t.topic_id, t.topic;
COMMENT ON VIEW malachi.stat_topics IS
	'Per topic: active ranges, segments, records and bytes stored; when its oldest segment was created and it was last appended to';

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

/*---- produce and read ----*/

CREATE FUNCTION malachi.produce(topic text, key text, value bytea, headers jsonb DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_produce_bytea'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.produce(text, text, bytea, jsonb) IS
	'Append one record to the range that owns its key (at commit, or at once in immediate mode); returns the range id';

CREATE FUNCTION malachi.produce(topic text, key text, value text, headers jsonb DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_produce_text'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.produce(text, text, text, jsonb) IS
	'Append one record with a text value (at commit, or at once in immediate mode); returns the range id';

CREATE FUNCTION malachi.produce(topic text, key text, value jsonb, headers jsonb DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_produce_jsonb'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.produce(text, text, jsonb, jsonb) IS
	'Append one record with a jsonb value (at commit, or at once in immediate mode); returns the range id';

CREATE FUNCTION malachi.produce_batch(topic text, keys text[], "values" bytea[], headers jsonb[] DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_produce_batch_bytea'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.produce_batch(text, text[], bytea[], jsonb[]) IS
	'Append many records, one batch per range (at commit, or at once in immediate mode); returns the number accepted';

CREATE FUNCTION malachi.produce_batch(topic text, keys text[], "values" text[], headers jsonb[] DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_produce_batch_text'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.produce_batch(text, text[], text[], jsonb[]) IS
	'Append many records with text values, one batch per range (at commit, or at once); returns the number accepted';

CREATE FUNCTION malachi.produce_batch(topic text, keys text[], "values" jsonb[], headers jsonb[] DEFAULT NULL)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_produce_batch_jsonb'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.produce_batch(text, text[], jsonb[], jsonb[]) IS
	'Append many records with jsonb values, one batch per range (at commit, or at once); returns the number accepted';

CREATE FUNCTION malachi.read(range_id bigint, "offset" bigint, max_records int)
	RETURNS SETOF malachi.record
	AS 'MODULE_PATHNAME', 'malachi_read'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.read(bigint, bigint, int) IS
	'Records of one range from an offset, in offset order; nothing past its end';

CREATE FUNCTION malachi.offset_for_time(range_id bigint, ts timestamptz)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_offset_for_time'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.offset_for_time(bigint, timestamptz) IS
	'First offset of a range produced at or after ts; the range''s end when none';

CREATE FUNCTION malachi.read_history(range_id bigint)
	RETURNS SETOF malachi.record
	AS 'MODULE_PATHNAME', 'malachi_read_history'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.read_history(bigint) IS
	'A range''s whole stream as it stands: its ancestors'' records of its slice, oldest first, then its own';

CREATE FUNCTION malachi.stream_history(range_id bigint, cursor text, max_records int)
	RETURNS TABLE(records malachi.record[], next_cursor text, skips jsonb)
	AS 'MODULE_PATHNAME', 'malachi_stream_history'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.stream_history(bigint, text, int) IS
	'A page of a range''s stream from a cursor (NULL: the beginning); next_cursor is NULL once the page reaches the end';

CREATE FUNCTION malachi.read_consume(range_id bigint, cursor text, max_records int)
	RETURNS TABLE(records malachi.record[], next_cursor text, skips jsonb)
	AS 'MODULE_PATHNAME', 'malachi_read_consume'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.read_consume(bigint, text, int) IS
	'A page of a range''s stream from a cursor, tailing it forever: a caught-up page is empty and keeps its cursor';

/*---- consumer groups ----*/

CREATE FUNCTION malachi.consume(topic text, "group" text, max_records int DEFAULT 100,
								wait interval DEFAULT '0')
	RETURNS SETOF malachi.record
	AS 'MODULE_PATHNAME', 'malachi_consume'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.consume(text, text, int, interval) IS
	'Claim free ranges of the topic for this group, return their next records and advance the group in this transaction; wait: long poll';

CREATE FUNCTION malachi.poll(topic text, "group" text, max_records int DEFAULT 100)
	RETURNS SETOF malachi.record
	AS 'MODULE_PATHNAME', 'malachi_poll'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.poll(text, text, int) IS
	'What consume would return now, without advancing the group';

CREATE FUNCTION malachi.commit_offset("group" text, topic text, offsets jsonb)
	RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_commit_offset'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.commit_offset(text, text, jsonb) IS
	'Set the group''s next offset on ranges of the topic: {"range_id": next_offset, ...}';

CREATE FUNCTION malachi.committed_offsets("group" text, topic text)
	RETURNS TABLE(range_id bigint, "offset" bigint)
	AS 'MODULE_PATHNAME', 'malachi_committed_offsets'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.committed_offsets(text, text) IS
	'The group''s committed next offset on each range of the topic it has a position on';

CREATE FUNCTION malachi.reset_group("group" text, topic text, "to" text DEFAULT 'earliest')
	RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_reset_group'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.reset_group(text, text, text) IS
	'Move the group on the topic to the earliest stored record, the latest, or the first produced at or after a timestamp';

CREATE VIEW malachi.consumer_lag AS
	SELECT g.group_name AS "group", t.topic, g.range_id, g."offset" AS committed,
		   e.end_offset, greatest(e.end_offset - g."offset", 0) AS lag
	  FROM malachi.group_positions g
	  JOIN malachi.topic_meta t USING (topic_id)
	  JOIN malachi.range_meta r USING (range_id)
	  CROSS JOIN LATERAL (
		SELECT coalesce(r.end_offset, max(s.end_offset), 0) AS end_offset
		  FROM malachi.segments s WHERE s.range_id = g.range_id) e
	 WHERE r.state = 'active'
		-- a sealed range's row counts while a child still starts from it
		OR EXISTS (SELECT FROM malachi.range_meta c
					WHERE g.range_id = ANY (c.parents)
					  AND NOT EXISTS (SELECT FROM malachi.group_positions gc
									   WHERE gc.group_name = g.group_name
										 AND gc.range_id = c.range_id));
COMMENT ON VIEW malachi.consumer_lag IS
	'Per group and range: the committed next offset, the range''s readable end, and the records between them; sealed ranges only while a child still starts from them';

CREATE FUNCTION malachi.roll(range_id bigint) RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_roll'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.roll(bigint) IS
	'Fence and seal a range''s head now; returns the sealed segment id (NULL without a head)';

/*---- privileges ----*/

/*---- declared lists ----*/

CREATE FUNCTION malachi.declare_child(hub text, child_id text, spec jsonb,
									  meta jsonb DEFAULT '{}')
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_declare_child'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.declare_child(text, text, jsonb, jsonb) IS
	'Declare (or change) a child of a hub in this transaction; returns the list''s version (bumped by one if it changed)';

CREATE FUNCTION malachi.undeclare_child(hub text, child_id text)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_undeclare_child'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.undeclare_child(text, text) IS
	'Remove a child from a hub''s list in this transaction; returns the list''s version';

CREATE FUNCTION malachi.declared_children(hub text)
	RETURNS TABLE(version bigint, children jsonb)
	AS 'MODULE_PATHNAME', 'malachi_declared_children'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.declared_children(text) IS
	'A hub''s list: its version and its children (child_id, spec, meta), by child_id';

CREATE FUNCTION malachi.declared_child(hub text, child_id text)
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'malachi_declared_child'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.declared_child(text, text) IS
	'One declared child (spec and meta); NULL when it is not declared';

CREATE FUNCTION malachi.declared_manifest(hub text)
	RETURNS jsonb
	AS 'MODULE_PATHNAME', 'malachi_declared_manifest'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.declared_manifest(text) IS
	'A hub''s list as a manifest: {format, version, mutated_by, entries}';

CREATE FUNCTION malachi.adopt_manifest(hub text, manifest jsonb)
	RETURNS text
	AS 'MODULE_PATHNAME', 'malachi_adopt_manifest'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.adopt_manifest(text, jsonb) IS
	'Replace a hub''s list by a manifest with a higher version (adopted), keep it otherwise (kept), lowest mutated_by wins a tie (tie_broken)';

CREATE FUNCTION malachi.clear_declared(hub text)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'malachi_clear_declared'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.clear_declared(text) IS
	'Operator override: empty a hub''s list at a version above every one known, and lift its park';

CREATE FUNCTION malachi.declared_parked(hub text)
	RETURNS boolean
	AS 'MODULE_PATHNAME', 'malachi_declared_parked'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.declared_parked(text) IS
	'Is the hub parked: its list missing, corrupt or older than the supervisor''s evidence?';

CREATE FUNCTION malachi.children_state(
	OUT hub text, OUT child_id text, OUT node text, OUT pid int, OUT state text,
	OUT restarts int, OUT last_error text, OUT processed bigint)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'malachi_children_state'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.children_state() IS
	'The children the supervisor of this node runs (shared memory)';

CREATE VIEW malachi.children AS
	SELECT * FROM malachi.children_state();
COMMENT ON VIEW malachi.children IS
	'Declared children on this node: process, state, restarts, last error, records processed';

/*---- maintenance ----*/

CREATE FUNCTION malachi.run_maintenance() RETURNS jsonb
	AS 'MODULE_PATHNAME', 'malachi_run_maintenance'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.run_maintenance() IS
	'One sweeper pass now, in this transaction: age rolls, fence completion, retention, orphans, scrub; what it did';

CREATE FUNCTION malachi.delete_segment(segment_id bigint) RETURNS void
	AS 'MODULE_PATHNAME', 'malachi_delete_segment'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.delete_segment(bigint) IS
	'Delete a sealed segment: its row now, its file when the transaction commits';

CREATE FUNCTION malachi.sweeper_state(
	OUT passes bigint, OUT last_pass_start timestamptz, OUT duration_ms float8,
	OUT counts jsonb, OUT last_error text)
	AS 'MODULE_PATHNAME', 'malachi_sweeper_state'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION malachi.sweeper_state() IS
	'The last sweeper pass on this node (shared memory)';

CREATE VIEW malachi.sweeper_status AS
	SELECT * FROM malachi.sweeper_state();
COMMENT ON VIEW malachi.sweeper_status IS
	'The last sweeper pass on this node: passes so far, when it started, how long it took, what it did, its last error';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA malachi FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA malachi FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA malachi FROM PUBLIC;

GRANT SELECT ON ALL TABLES IN SCHEMA malachi
	TO malachi_admin, malachi_producer, malachi_consumer;
GRANT INSERT, UPDATE, DELETE ON malachi.policy_meta, malachi.topic_meta,
	malachi.topic_policy, malachi.range_meta TO malachi_admin;
GRANT USAGE ON SEQUENCE malachi.topic_id_seq, malachi.range_id_seq TO malachi_admin;
GRANT INSERT, UPDATE, DELETE ON malachi.group_positions TO malachi_admin;
GRANT INSERT, UPDATE, DELETE ON malachi.declared_hubs, malachi.declared_children TO malachi_admin;

GRANT EXECUTE ON FUNCTION
	malachi.produce(text, text, bytea, jsonb),
	malachi.produce(text, text, text, jsonb),
	malachi.produce(text, text, jsonb, jsonb),
	malachi.produce_batch(text, text[], bytea[], jsonb[]),
	malachi.produce_batch(text, text[], text[], jsonb[]),
	malachi.produce_batch(text, text[], jsonb[], jsonb[])
	TO malachi_admin, malachi_producer;

GRANT EXECUTE ON FUNCTION
	malachi.read(bigint, bigint, int),
	malachi.read_history(bigint),
	malachi.stream_history(bigint, text, int),
	malachi.read_consume(bigint, text, int),
	malachi.offset_for_time(bigint, timestamptz),
	malachi.consume(text, text, int, interval),
	malachi.poll(text, text, int),
	malachi.commit_offset(text, text, jsonb),
	malachi.committed_offsets(text, text),
	malachi.reset_group(text, text, text)
	TO malachi_admin, malachi_consumer;

GRANT EXECUTE ON FUNCTION
	malachi.head_state(),
	malachi.sweeper_state(),
	malachi.children_state(),
	malachi.declared_children(text),
	malachi.declared_child(text, text),
	malachi.declared_manifest(text),
	malachi.declared_parked(text),
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
	malachi.merge_ranges(bigint, bigint),
	malachi.roll(bigint),
	malachi.run_maintenance(),
	malachi.delete_segment(bigint),
	malachi.declare_child(text, text, jsonb, jsonb),
	malachi.undeclare_child(text, text),
	malachi.adopt_manifest(text, jsonb),
	malachi.clear_declared(text),
	malachi.settings_valid(jsonb, text)
	TO malachi_admin;
