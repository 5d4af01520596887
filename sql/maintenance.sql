--
-- The sweeper's pass, run on demand with run_maintenance(): age rolls,
-- fence completion, retention by age and by bytes, orphan files, scrub.
-- The sweeper worker itself is kept out of the way (sweep_interval = 1d).
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;

-- a pass writes: not in a read-only transaction
BEGIN READ ONLY;
SELECT malachi.run_maintenance();
ROLLBACK;

CREATE FUNCTION pass() RETURNS jsonb LANGUAGE sql
	AS $$ SELECT malachi.run_maintenance() - 'scrubbed_bytes' $$;
CREATE VIEW segs AS
	SELECT seq, state, base_offset, end_offset
	  FROM malachi.segments WHERE range_id = malachi.route('sw', 'k')
	 ORDER BY seq;

SELECT malachi.create_topic('sw');

-- a quiet pass does nothing
SELECT pass();

-- age roll: a non-empty head older than segment_max_age is sealed, quiet
-- or not; an empty head is left alone
SELECT malachi.alter_topic('sw', '{"segment_max_age": "1 hour"}') IS NOT NULL;
SELECT malachi.produce('sw', 'k', 'a'::text);
SELECT pass();
SELECT malachi.alter_topic('sw', '{"segment_max_age": "1 second"}') IS NOT NULL;
SELECT pg_sleep(1.1);
SELECT pass();
SELECT * FROM segs;
SELECT pass();

-- the roll age follows topic > policy > default
SELECT malachi.create_policy('slow', '{"segment_max_age": "1 day"}');
SELECT malachi.bind_topic_policy('sw', 'slow');
SELECT malachi.alter_topic('sw', '{"segment_max_age": null}') IS NOT NULL;
SELECT malachi.produce('sw', 'k', 'b'::text);
SELECT pg_sleep(1.1);
SELECT pass();
SELECT malachi.alter_topic('sw', '{"segment_max_age": "1 second"}') IS NOT NULL;
SELECT pass();
SELECT * FROM segs;

-- fence completion: a roll that failed after its fence leaves the head
-- fenced in its file but active in the control plane
SELECT malachi.produce('sw', 'k', 'c'::text);
SET malachi.inject_wait = 'fail-seal-fenced';
SELECT malachi.roll(malachi.route('sw', 'k'));
RESET malachi.inject_wait;
SELECT seq, state, fenced FROM malachi.segments s
  JOIN malachi.head_state() h USING (segment_id)
 WHERE s.range_id = malachi.route('sw', 'k');
SELECT pass();
SELECT * FROM segs;

-- retention by bytes: a range's newest segments are kept up to
-- retention_bytes; the head and the newest segment are never deleted
SELECT malachi.alter_topic('sw', '{"segment_max_age": "1 day"}') IS NOT NULL;
SELECT malachi.produce('sw', 'k', 'd'::text);
SELECT malachi.roll(malachi.route('sw', 'k'));
SELECT malachi.produce('sw', 'k', 'e'::text);
SELECT * FROM segs;
SELECT malachi.alter_topic('sw', '{"retention_bytes": 200}') IS NOT NULL;
SELECT pass();
SELECT * FROM segs;
SELECT malachi.alter_topic('sw', '{"retention_bytes": 1}') IS NOT NULL;
SELECT pass();
SELECT * FROM segs;
-- what remains reads; the next head continues the offsets
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('sw', 'k'), 4, 10);
SELECT malachi.roll(malachi.route('sw', 'k'));
SELECT malachi.produce('sw', 'k', 'f'::text);
SELECT * FROM segs;

-- retention by age, from the policy
SELECT malachi.alter_topic('sw', '{"retention_bytes": null}') IS NOT NULL;
SELECT malachi.alter_policy('slow', '{"retention": "1 second"}') IS NOT NULL;
SELECT malachi.produce('sw', 'k', 'g'::text);
SELECT malachi.roll(malachi.route('sw', 'k'));
SELECT malachi.produce('sw', 'k', 'h'::text);
SELECT pg_sleep(1.1);
SELECT pass();
SELECT * FROM segs;

-- delete_segment: sealed only, and its file goes at commit
SELECT malachi.roll(malachi.route('sw', 'k'));
SELECT malachi.produce('sw', 'k', 'i'::text);
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('sw', 'k') AND state = 'active';
SELECT malachi.delete_segment(NULL);
SELECT malachi.delete_segment(-1);
BEGIN;
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('sw', 'k') AND seq = 6;
ROLLBACK;
SELECT * FROM segs;

-- a delete rolled back to a savepoint keeps its file; a pass in the
-- deleting transaction leaves the file to its commit
BEGIN;
SAVEPOINT s;
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('sw', 'k') AND seq = 6;
ROLLBACK TO SAVEPOINT s;
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('sw', 'k') AND seq = 6;
SET LOCAL malachi.orphan_grace = 0;
SELECT pass() -> 'orphans_removed' AS orphans_removed;
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('sw', 'k') AND seq = 6;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('sw', 'k'), 7, 10);
-- a backend's reads follow its own transaction's deletion at once, and
-- read the segment again once the deletion rolls back
BEGIN;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('sw', 'k'), 7, 10);
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('sw', 'k') AND seq = 6;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('sw', 'k'), 7, 10);
ROLLBACK;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('sw', 'k'), 7, 10);
-- so does a drop_topic rolled back to a savepoint
BEGIN;
SAVEPOINT s;
SELECT malachi.drop_topic('sw');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('sw', 'k'), 7, 10);

-- a range sealed by a split keeps its end in its row: retention deletes
-- all its segments, and streams and groups still step over to the children
SELECT malachi.create_topic('sp');
SELECT malachi.produce('sp', 'k', ('a' || i)::text) FROM generate_series(0, 2) i;
SELECT range_id AS sp_root FROM malachi.ranges WHERE topic = 'sp' \gset
SELECT count(*) FROM malachi.consume('sp', 'g', 1);
SELECT count(*) FROM malachi.split_range(:sp_root);
SELECT malachi.produce('sp', 'k', 'b0'::text);
SELECT malachi.alter_topic('sp', '{"retention_bytes": 1}') IS NOT NULL;
SELECT pass();
SELECT count(*) AS root_segments FROM malachi.segments WHERE range_id = :sp_root;
SELECT count(*) FROM malachi.read(:sp_root, 0, 10);
SELECT state, end_offset FROM malachi.range_meta WHERE range_id = :sp_root;
-- the stream from the start: a skip of the root's [0, 3), then the child
SELECT (SELECT string_agg(convert_from(r.value, 'UTF8'), ' ') FROM unnest(records) r),
	   skips
  FROM malachi.read_consume(malachi.route('sp', 'k'), NULL, 10);
-- the group read offset 0 of the root: it skips [1, 3) and goes on; a
-- poll says so too
SELECT convert_from(value, 'UTF8') FROM malachi.poll('sp', 'g', 10);
SELECT convert_from(value, 'UTF8') FROM malachi.consume('sp', 'g', 10);
SELECT "group", range_id = :sp_root AS root, committed, end_offset, lag
  FROM malachi.consumer_lag WHERE topic = 'sp' ORDER BY range_id;
-- the end cannot change once sealed
UPDATE malachi.range_meta SET end_offset = 0 WHERE range_id = :sp_root;
-- delete_segment takes a sealed range's newest segment too
SELECT count(*) FROM malachi.split_range(malachi.route('sp', 'k'));
SELECT malachi.delete_segment(segment_id) FROM malachi.segments s
  JOIN malachi.ranges r USING (range_id)
 WHERE r.topic = 'sp' AND r.state = 'sealed';
SELECT r.state, count(s.segment_id) FROM malachi.ranges r
  LEFT JOIN malachi.segments s USING (range_id)
 WHERE r.topic = 'sp' GROUP BY r.state ORDER BY r.state;
SELECT malachi.drop_topic('sp');

-- orphans: files no segment row names go once older than orphan_grace
DO $$
BEGIN
	EXECUTE format('COPY (SELECT 1) TO %L',
				   current_setting('data_directory') || '/' ||
				   current_setting('malachi.data_directory') || '/7fffffffffff0001.seg');
	EXECUTE format('COPY (SELECT 1) TO %L',
				   current_setting('data_directory') || '/' ||
				   current_setting('malachi.data_directory') || '/7fffffffffff0002.idx');
END $$;
SELECT pass();
SELECT count(*) FROM pg_ls_dir(current_setting('malachi.data_directory')) f
 WHERE f LIKE '7fffffffffff%';
SET malachi.orphan_grace = 0;
SELECT pass();
SELECT count(*) FROM pg_ls_dir(current_setting('malachi.data_directory')) f
 WHERE f LIKE '7fffffffffff%';
RESET malachi.orphan_grace;

-- scrub: every sealed segment was verified and found sound
SELECT count(*) AS unscrubbed FROM malachi.segments
 WHERE state = 'sealed' AND (scrubbed_at IS NULL OR corrupt IS NOT NULL);

-- the last pass, as the view shows it
SELECT passes > 0, last_pass_start IS NOT NULL, duration_ms >= 0,
	   counts ? 'rolled', last_error
  FROM malachi.sweeper_status;

-- only admins run maintenance
SET ROLE malachi_consumer;
SELECT malachi.run_maintenance();
SELECT malachi.delete_segment(1);
RESET ROLE;

SELECT malachi.drop_topic('sw');
SELECT malachi.drop_policy('slow');
DROP VIEW segs;
DROP FUNCTION pass();

-- delete_segment of a middle segment leaves a hole: the range's next heads
-- still open after the newest segment left (the hole's records are gone)
SELECT malachi.create_topic('hole') IS NOT NULL;
SELECT malachi.route('hole', 'k') AS hole \gset
SELECT malachi.produce('hole', 'k', 'a'::text) = :hole;
SELECT malachi.roll(:hole) > 0;
SELECT malachi.produce('hole', 'k', 'b'::text) = :hole;
SELECT malachi.roll(:hole) > 0;
SELECT malachi.produce('hole', 'k', 'c'::text) = :hole;
SELECT malachi.roll(:hole) > 0;
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = :hole AND seq = 1;
SELECT malachi.produce('hole', 'k', 'd'::text) = :hole;
SELECT malachi.roll(:hole) > 0;
SELECT malachi.produce('hole', 'k', 'e'::text) = :hole;
SELECT seq, base_offset, end_offset, state FROM malachi.segments
 WHERE range_id = :hole ORDER BY seq;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(:hole, 0, 10);
-- a segment that overlaps an older one is still refused, at commit
\set VERBOSITY sqlstate
INSERT INTO malachi.segment_meta (range_id, seq, base_offset, end_offset, byte_size,
								  state, replicas, sealed_at)
VALUES (:hole, 9, 1, 2, 0, 'sealed', '{local}', now());
\set VERBOSITY default
SELECT malachi.drop_topic('hole');

-- malachi_admin runs a pass and deletes a segment, though it may not write
-- malachi.segment_meta by hand
SET ROLE malachi_admin;
SELECT malachi.run_maintenance() ? 'deleted' AS admin_pass;
SELECT malachi.create_topic('adm') IS NOT NULL;
SELECT malachi.produce('adm', 'k', 'a'::text) IS NOT NULL;
SELECT malachi.roll(malachi.route('adm', 'k')) > 0;
SELECT malachi.produce('adm', 'k', 'b'::text) IS NOT NULL;
SELECT malachi.roll(malachi.route('adm', 'k')) > 0;
SELECT malachi.delete_segment(segment_id) FROM malachi.segments
 WHERE range_id = malachi.route('adm', 'k') AND seq = 0;
SELECT seq FROM malachi.segments WHERE range_id = malachi.route('adm', 'k') ORDER BY seq;
DELETE FROM malachi.segment_meta;
SELECT malachi.drop_topic('adm');
RESET ROLE;
