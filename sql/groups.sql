-- Consumer groups: consume, poll, commit_offset, committed_offsets,
-- reset_group, consumer_lag, and positions carried across splits and merges.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
SET malachi.produce_mode = 'immediate';

SELECT malachi.create_topic('g') AS root \gset
SELECT malachi.produce_batch('g', array_agg('k' || (i % 10)), array_agg('a' || i))
  FROM generate_series(0, 29) i;

-- a new group starts at the earliest record; consume advances it in the
-- caller's transaction
BEGIN;
SELECT range_id, "offset", key, convert_from(value, 'UTF8') AS value
  FROM malachi.consume('g', 'billing', 5);
SELECT * FROM malachi.committed_offsets('billing', 'g');
ROLLBACK;
-- rolled back: delivered again
SELECT "offset" FROM malachi.consume('g', 'billing', 5);
SELECT * FROM malachi.committed_offsets('billing', 'g');
-- poll reads without advancing
SELECT "offset" FROM malachi.poll('g', 'billing', 3);
SELECT "offset" FROM malachi.poll('g', 'billing', 3);
SELECT count(*) FROM malachi.consume('g', 'billing', 100);
SELECT count(*) FROM malachi.consume('g', 'billing', 100);		-- caught up
SELECT "group", topic, range_id, committed, end_offset, lag FROM malachi.consumer_lag;

-- commit_offset moves a group anywhere in a range; groups are independent
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:root::text, 25));
SELECT "offset" FROM malachi.consume('g', 'billing', 100);
SELECT "offset" FROM malachi.consume('g', 'audit', 2);
SELECT "group", committed, lag FROM malachi.consumer_lag ORDER BY 1;

-- reset_group: latest, a timestamp, earliest
SELECT malachi.reset_group('audit', 'g', 'latest');
SELECT count(*) FROM malachi.consume('g', 'audit', 100);
SELECT malachi.produce('g', 'k1', 'b0'::text);
SELECT key, convert_from(value, 'UTF8') FROM malachi.consume('g', 'audit', 100);
SELECT produced_at AS t_b0 FROM malachi.read(:root, 30, 1) \gset
SELECT malachi.reset_group('audit', 'g', :'t_b0');
SELECT "offset" FROM malachi.consume('g', 'audit', 100);
SELECT malachi.reset_group('audit', 'g');
SELECT count(*) FROM malachi.consume('g', 'audit', 100);

-- positions carry across a split: the children's streams resume the
-- parent where the group left it
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:root::text, 20));
SELECT left_id AS l, right_id AS r FROM malachi.split_range(:root) \gset
SELECT malachi.produce_batch('g', array_agg('k' || (i % 10)), array_agg('c' || i))
  FROM generate_series(0, 9) i;
CREATE TEMP TABLE got AS SELECT * FROM malachi.consume('g', 'billing', 1000);
-- the parent's offsets 20..30 once each, then the children's own
SELECT range_id = :root AS parent, count(*), count(DISTINCT "offset"),
	   min("offset"), max("offset")
  FROM got GROUP BY 1 ORDER BY 1;
SELECT range_id, "offset" FROM malachi.committed_offsets('billing', 'g') ORDER BY 1;
-- merge the children; the merge child continues after both
SELECT malachi.merge_ranges(:l, :r) AS m \gset
SELECT malachi.produce('g', 'k3', 'd0'::text);
SELECT range_id = :m AS merged, key, convert_from(value, 'UTF8')
  FROM malachi.consume('g', 'billing', 1000);
-- a group that never consumed reads everything, each record once
SELECT count(*), count(DISTINCT (range_id, "offset"))
  FROM malachi.consume('g', 'newcomer', 1000);

-- long poll: nothing arrives, the wait ends
SELECT count(*) FROM malachi.consume('g', 'billing', 10, '50ms');

-- bad input
SELECT * FROM malachi.consume('nope', 'billing');
SELECT * FROM malachi.consume(NULL, 'billing');
SELECT * FROM malachi.consume('g', NULL);
SELECT * FROM malachi.consume('g', '');
SELECT * FROM malachi.consume('g', 'billing', -1);
SELECT * FROM malachi.consume('g', 'billing', NULL);
SELECT * FROM malachi.consume('g', 'billing', 1, '-1s');
SELECT * FROM malachi.consume('g', 'billing', 1, '2 hours');
SELECT * FROM malachi.consume('g', 'billing', 1, NULL);
SELECT * FROM malachi.poll('nope', 'billing');
SELECT * FROM malachi.poll('g', 'billing', -1);
SELECT * FROM malachi.committed_offsets('nobody', 'g');			-- empty
SELECT * FROM malachi.committed_offsets('billing', 'nope');
SELECT malachi.commit_offset('billing', 'nope', '{}');
SELECT malachi.commit_offset('billing', 'g', NULL);
SELECT malachi.commit_offset('billing', 'g', '[1, 2]');
SELECT malachi.commit_offset('billing', 'g', '{"x": 1}');
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:m::text, -1));
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:m::text, 1.5));
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:m::text, 'one'));
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:m::text, 1000));
SELECT malachi.commit_offset('billing', 'g', '{"999999": 0}');
SELECT malachi.create_topic('other') AS other \gset
SELECT malachi.commit_offset('billing', 'g', jsonb_build_object(:other::text, 0));
SELECT malachi.reset_group('billing', 'g', 'yesterday-ish');
SELECT malachi.reset_group('billing', 'g', NULL);
SELECT malachi.reset_group('billing', 'nope');
-- nothing changed by the failures
SELECT range_id, "offset" FROM malachi.committed_offsets('billing', 'g') ORDER BY 1;

-- a split rolled back after a consume in its transaction: the group still
-- reads the range on (the backend's caches had seen it sealed, uncommitted)
SELECT malachi.create_topic('rb') IS NOT NULL AS created;
SELECT r AS rb FROM malachi.active_range_ids('rb') r \gset
SELECT malachi.produce('rb', 'k', 'r1'::text) = :rb AS produced;
BEGIN;
SELECT count(*) FROM malachi.split_range(:rb);
SELECT convert_from(value, 'UTF8') FROM malachi.consume('rb', 'grp');
ROLLBACK;
SELECT convert_from(value, 'UTF8') FROM malachi.consume('rb', 'grp');
SELECT malachi.produce('rb', 'k', 'r2'::text) = :rb AS produced;
SELECT convert_from(value, 'UTF8') FROM malachi.consume('rb', 'grp');
-- the same with a savepoint rolled back inside a transaction that changed
-- metadata before it (another topic's split)
SELECT malachi.create_topic('rb2') IS NOT NULL AS created;
SELECT r AS rb2 FROM malachi.active_range_ids('rb2') r \gset
SELECT malachi.create_topic('rb3') IS NOT NULL AS created;
BEGIN;
SELECT count(*) FROM malachi.split_range((SELECT r FROM malachi.active_range_ids('rb3') r));
SAVEPOINT s;
SELECT count(*) FROM malachi.split_range(:rb2);
SELECT count(*) FROM malachi.consume('rb2', 'grp2');
ROLLBACK TO SAVEPOINT s;
SELECT count(*) FROM malachi.consume('rb2', 'grp2');
COMMIT;
SELECT malachi.produce('rb2', 'k', 'q1'::text) = :rb2 AS produced;
SELECT convert_from(value, 'UTF8') FROM malachi.consume('rb2', 'grp2');
SELECT malachi.drop_topic('rb2');
SELECT malachi.drop_topic('rb3');
-- a position emptied by hand on an active range is refused (empty means
-- read to the end, which only a sealed range is)
UPDATE malachi.group_positions SET pending = '{}' WHERE group_name = 'grp';
SELECT count(*) FROM malachi.consume('rb', 'grp');
-- and so is one past its range's end (it would skip the offsets before it
-- once they are produced), with MA016
UPDATE malachi.group_positions
   SET pending = ARRAY[range_id, 0, 4294967296, 1000]
 WHERE group_name = 'grp';
SELECT count(*) FROM malachi.consume('rb', 'grp');
\echo :LAST_ERROR_SQLSTATE
SELECT malachi.drop_topic('rb');

-- a range split and merged back 22 times: a new group works out where it
-- starts once per ancestor (2^22 paths lead back to the first range;
-- walking each of them took minutes)
SELECT malachi.create_topic('sm') IS NOT NULL AS created;
SELECT malachi.produce('sm', 'k', 's1'::text) IS NOT NULL AS produced;
DO $$
DECLARE
	r bigint := (SELECT min(x) FROM malachi.active_range_ids('sm') x);
	lo bigint;
	hi bigint;
BEGIN
	FOR i IN 1..22 LOOP
		SELECT left_id, right_id INTO lo, hi FROM malachi.split_range(r);
		r := malachi.merge_ranges(lo, hi);
	END LOOP;
END $$;
SELECT malachi.produce('sm', 'k', 's2'::text) IS NOT NULL AS produced;
SET statement_timeout = '30s';
SELECT convert_from(value, 'UTF8') FROM malachi.consume('sm', 'new', 10);
RESET statement_timeout;
SELECT malachi.drop_topic('sm');

-- committed_offsets fed back to commit_offset skips none of the parent's
-- records the children still have to read: g read 3 records of the root
-- before the split and 2 after, through the children (which report 0)
SELECT malachi.create_topic('rt') AS rt \gset
SELECT malachi.produce_batch('rt', array_agg('k' || i), array_agg('r' || i))
  FROM generate_series(0, 19) i;
SELECT count(*) FROM malachi.consume('rt', 'g', 3);
SELECT count(*) FROM malachi.split_range(:rt);
SELECT count(*) FROM malachi.consume('rt', 'g', 1);
SELECT count(*) FROM malachi.consume('rt', 'g', 1);
SELECT range_id = :rt AS root, "offset" FROM malachi.committed_offsets('g', 'rt') ORDER BY range_id;
-- copied to a new group: it starts where g's root row says, 17 records on
SELECT malachi.commit_offset('copy', 'rt', jsonb_object_agg(range_id, "offset"))
  FROM malachi.committed_offsets('g', 'rt');
SELECT count(*), count(DISTINCT "offset"), min("offset")
  FROM malachi.consume('rt', 'copy', 100);
-- fed back to g itself: nothing changes, g reads the other 15
SELECT malachi.commit_offset('g', 'rt', jsonb_object_agg(range_id, "offset"))
  FROM malachi.committed_offsets('g', 'rt');
SELECT count(*), count(DISTINCT "offset") FROM malachi.consume('rt', 'g', 100);
-- a child without a row starts where its parent's row, set in the same
-- call, says: here at the root's end, so only the child's own record
SELECT malachi.produce('rt', 'k0', 'own'::text) AS k0_range \gset
SELECT malachi.commit_offset('late', 'rt', jsonb_build_object(:k0_range::text, 0, :rt::text, 20));
SELECT key, convert_from(value, 'UTF8') FROM malachi.consume('rt', 'late', 100);
SELECT malachi.drop_topic('rt');

-- dropping a topic drops its positions
SELECT malachi.drop_topic('g');
SELECT malachi.drop_topic('other');
SELECT count(*) FROM malachi.group_positions;
