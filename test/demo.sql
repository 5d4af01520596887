-- demo.sql: a short tour of Malachi's ranges, run by `make run`
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
