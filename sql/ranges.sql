-- ranges: route, split, merge, and the invariants the database enforces
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;

SELECT malachi.create_topic('r', 2) AS root \gset
SELECT array_agg(id ORDER BY id) AS halves FROM malachi.active_range_ids('r') id \gset
SELECT (:'halves'::bigint[])[1] AS left_half, (:'halves'::bigint[])[2] AS right_half \gset

-- route: a key goes to the range whose slice holds its hash
SELECT k, malachi.key_hash(k) AS hash,
       malachi.route('r', k) - :root AS rel_range
  FROM unnest(ARRAY['', 'a', 'hello', 'order-42', 'customer:1001']) k ORDER BY k;
SELECT bool_and(malachi.key_hash(k) >= r.key_lo AND malachi.key_hash(k) < r.key_hi) AS route_matches_slice
  FROM (SELECT 'key-' || i AS k FROM generate_series(1, 2000) i) keys
  JOIN malachi.ranges r ON r.range_id = malachi.route('r', k);

-- split: the parent is sealed, its halves are active children
SELECT left_id - :root AS rel_left, right_id - :root AS rel_right
  FROM malachi.split_range(:left_half);
SELECT range_id - :root AS rel_id, key_lo, key_hi, state,
       (SELECT array_agg(p - :root) FROM unnest(parents) p) AS rel_parents,
       (state = 'sealed') = (sealed_at IS NOT NULL) AS sealed_at_ok
  FROM malachi.ranges WHERE topic = 'r' ORDER BY range_id;
SELECT array_agg(id - :root) AS active FROM malachi.active_range_ids('r') id;

-- routing follows the split at once, in this session and after commit
SELECT malachi.route('r', 'a') - :root AS a_range, malachi.route('r', 'hello') - :root AS hello_range;

-- split the other half and a child, then merge back step by step
SELECT (malachi.split_range(:right_half)).left_id - :root AS rel_left;
SELECT array_agg(id - :root) AS active FROM malachi.active_range_ids('r') id;
SELECT malachi.merge_ranges(:root + 3, :root + 4) - :root AS merged;
SELECT range_id - :root AS rel_id, key_lo, key_hi, state,
       (SELECT array_agg(p - :root) FROM unnest(parents) p) AS rel_parents
  FROM malachi.ranges WHERE topic = 'r' AND range_id = :root + 7;
-- the order of the arguments does not matter; parents are listed by key
SELECT malachi.merge_ranges(:root + 6, :root + 5) - :root AS merged;
SELECT (SELECT array_agg(p - :root) FROM unnest(parents) p) AS rel_parents
  FROM malachi.ranges WHERE range_id = :root + 8;
SELECT malachi.merge_ranges(:root + 8, :root + 7) - :root AS merged_to_root_slice;
SELECT key_lo, key_hi, state FROM malachi.ranges WHERE range_id = :root + 9;
SELECT array_agg(id - :root) AS active FROM malachi.active_range_ids('r') id;

-- errors
SELECT malachi.split_range(:left_half);                  -- sealed
SELECT malachi.merge_ranges(:left_half, :right_half);    -- sealed
SELECT malachi.split_range(-1);                          -- unknown
SELECT malachi.merge_ranges(:root + 9, -1);
SELECT malachi.split_range(NULL);
SELECT malachi.merge_ranges(NULL, 1);
SELECT malachi.merge_ranges(:root + 9, :root + 9);       -- itself
SELECT malachi.route(NULL, 'a');
SELECT malachi.route('r', NULL);
SELECT malachi.route('nope', 'a');
SELECT malachi.route(repeat('x', 300), 'a');

-- merge refuses neighbours that are not buddies, and ranges of other topics
SELECT malachi.create_topic('q', 4) AS qroot \gset
SELECT array_agg(id ORDER BY id) AS q FROM malachi.active_range_ids('q') id \gset
SELECT malachi.merge_ranges((:'q'::bigint[])[2], (:'q'::bigint[])[3]);
SELECT malachi.merge_ranges((:'q'::bigint[])[1], :root + 9);
SELECT malachi.merge_ranges((:'q'::bigint[])[1], (:'q'::bigint[])[2]) - :qroot AS buddies_merge;

-- a range of width 1 cannot be split
DO $$
DECLARE
	r bigint := malachi.create_topic('deep');
	depth int := 0;
BEGIN
	LOOP
		r := (malachi.split_range(r)).left_id;
		depth := depth + 1;
		EXIT WHEN (SELECT key_hi - key_lo FROM malachi.ranges WHERE range_id = r) = 1;
	END LOOP;
	RAISE NOTICE 'split % times down to width 1', depth;
	PERFORM malachi.split_range(r);
END $$;
SELECT count(*) AS deep_ranges FROM malachi.ranges WHERE topic = 'deep';

-- a split or merge rolled back leaves the ranges as they were
BEGIN;
SELECT malachi.split_range(:root + 9) IS NOT NULL AS split;
SELECT count(*) AS active_inside FROM malachi.active_range_ids('r');
SELECT malachi.route('r', 'hello') <> :root + 9 AS routes_to_child_inside;
ROLLBACK;
SELECT array_agg(id - :root) AS active_after_rollback FROM malachi.active_range_ids('r') id;
SELECT malachi.route('r', 'hello') - :root AS hello_range;

-- the database itself refuses a broken tiling, whoever writes the tables
\set VERBOSITY terse
DELETE FROM malachi.range_meta WHERE range_id = :root + 9;
UPDATE malachi.range_meta SET state = 'sealed', sealed_at = now(), end_offset = 0 WHERE range_id = :root + 9;
INSERT INTO malachi.range_meta (topic_id, key_lo, key_hi)
	SELECT topic_id, 0, 1024 FROM malachi.topic_meta WHERE topic = 'r';
INSERT INTO malachi.range_meta (topic_id, key_lo, key_hi)
	SELECT topic_id, 3, 7 FROM malachi.topic_meta WHERE topic = 'r';
INSERT INTO malachi.range_meta (topic_id, key_lo, key_hi)
	SELECT topic_id, 0, 8589934592 FROM malachi.topic_meta WHERE topic = 'r';
UPDATE malachi.range_meta SET key_hi = key_hi - 1 WHERE range_id = :root + 9;
UPDATE malachi.range_meta SET parents = '{}' WHERE range_id = :root + 9;
UPDATE malachi.range_meta SET state = 'active', sealed_at = NULL WHERE range_id = :root;
TRUNCATE malachi.range_meta CASCADE;
\set VERBOSITY default
-- sealing a range and adding its halves by hand is a valid tiling
BEGIN;
UPDATE malachi.range_meta SET state = 'sealed', sealed_at = now(), end_offset = 0 WHERE range_id = :root + 9;
INSERT INTO malachi.range_meta (topic_id, key_lo, key_hi, parents)
	SELECT topic_id, lo, hi, ARRAY[:root + 9]::bigint[] FROM malachi.topic_meta,
	       (VALUES (0, 2147483648), (2147483648, 4294967296)) v(lo, hi) WHERE topic = 'r';
COMMIT;
SELECT count(*) AS active FROM malachi.active_range_ids('r');

-- metadata changes cannot be prepared
BEGIN;
SELECT malachi.create_topic('prepared') > 0 AS created;
PREPARE TRANSACTION 'malachi_meta';
SELECT count(*) AS prepared_topic FROM malachi.topic_meta WHERE topic = 'prepared';

-- clean up
SELECT malachi.drop_topic(topic) FROM malachi.topic_meta ORDER BY topic;
