-- demo.sql: a short tour of Malachi (ranges, produce, read, consume), run by `make run`
-- (test/run-node.sh) against the local node.  Safe to rerun.

-- a topic "demo" with 4 ranges; drop it first so reruns start fresh
DO $$
BEGIN
	IF EXISTS (SELECT 1 FROM malachi.ranges WHERE topic = 'demo') THEN
		PERFORM malachi.drop_topic('demo');
	END IF;
END
$$;
SELECT malachi.create_topic('demo', 4) AS root_range_id;
SELECT * FROM malachi.ranges WHERE topic = 'demo' ORDER BY state, key_lo;

-- route a few keys: each goes to the active range owning its hash
SELECT k AS key, malachi.key_hash(k), malachi.route('demo', k)
  FROM unnest(ARRAY['alice', 'bob', 'carol']) k;

-- split alice's range into its two halves; the parent is sealed
SELECT * FROM malachi.split_range(malachi.route('demo', 'alice'));
SELECT * FROM malachi.ranges WHERE topic = 'demo' ORDER BY state, key_lo;

-- produce: records become readable when their transaction commits
BEGIN;
SELECT malachi.produce('demo', 'alice', 'order 1 placed'::text);
SELECT malachi.produce_batch('demo', ARRAY['bob', 'carol'], ARRAY['order 2 placed', 'order 3 placed']);
COMMIT;
BEGIN;
SELECT malachi.produce('demo', 'alice', 'rolled back: never readable'::text);
ROLLBACK;

-- read every active range from offset 0
SELECT r.range_id, x."offset", x.key, convert_from(x.value, 'UTF8') AS value
  FROM malachi.ranges r, malachi.read(r.range_id, 0, 100) x
 WHERE r.topic = 'demo' AND r.state = 'active'
 ORDER BY r.key_lo, x."offset";

-- the segments that hold them
SELECT s.segment_id, s.range_id, s.base_offset, s.end_offset, s.byte_size, s.state
  FROM malachi.segments s JOIN malachi.ranges r USING (range_id)
 WHERE r.topic = 'demo' ORDER BY s.range_id, s.seq;

-- a consumer group: consume acknowledges at COMMIT (ROLLBACK redelivers)
BEGIN;
SELECT range_id, "offset", key, convert_from(value, 'UTF8') AS value
  FROM malachi.consume('demo', 'billing', 10);
COMMIT;
-- split bob's range: the group's position carries over to the children
SELECT * FROM malachi.split_range(malachi.route('demo', 'bob'));
SELECT malachi.produce('demo', 'bob', 'order 4 placed'::text);
SELECT range_id, "offset", key, convert_from(value, 'UTF8') AS value
  FROM malachi.consume('demo', 'billing', 10);
SELECT "group", range_id, committed, end_offset, lag
  FROM malachi.consumer_lag WHERE topic = 'demo' ORDER BY range_id;
