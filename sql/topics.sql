-- topics: create, inspect, drop
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;

-- one range: the root is the only active range
SELECT malachi.create_topic('t1') > 0 AS created;
SELECT topic, key_lo, key_hi, state, parents = '{}' AS no_parents, sealed_at IS NULL AS open
  FROM malachi.ranges WHERE topic = 't1';

-- four ranges: the root is pre-split by buddy splits, leaves are active
SELECT malachi.create_topic('t4', 4) AS root4 \gset
SELECT range_id - :root4 AS rel_id, key_lo, key_hi, state,
       (SELECT array_agg(p - :root4) FROM unnest(parents) p) AS rel_parents
  FROM malachi.ranges WHERE topic = 't4' ORDER BY range_id;
SELECT count(*) AS active_ranges FROM malachi.active_range_ids('t4');
SELECT array_agg(key_lo ORDER BY key_lo) = array_agg(r.key_lo ORDER BY a.ord) AS ordered_by_key_lo
  FROM malachi.active_range_ids('t4') WITH ORDINALITY a(id, ord)
  JOIN malachi.ranges r ON r.range_id = a.id;

-- every allowed count: 2^k up to 1024, tiling the keyspace exactly
DO $$
DECLARE n int;
BEGIN
	FOR k IN 0..10 LOOP
		n := 1 << k;
		PERFORM malachi.create_topic('pow' || n, n);
		IF (SELECT count(*) FROM malachi.active_range_ids('pow' || n)) <> n
		   OR (SELECT sum(key_hi - key_lo) FROM malachi.ranges
		        WHERE topic = 'pow' || n AND state = 'active') <> 4294967296
		   OR (SELECT count(*) FROM malachi.ranges WHERE topic = 'pow' || n) <> 2 * n - 1 THEN
			RAISE EXCEPTION 'bad pre-split for %', n;
		END IF;
		PERFORM malachi.drop_topic('pow' || n);
	END LOOP;
END $$;

-- replication factor and policy at creation
SELECT malachi.create_policy('gold', '{"retention": "7 days"}');
SELECT malachi.create_topic('t_rf', 2, 3, 'gold') > 0 AS created;
SELECT malachi.topic_policy_name('t_rf');
SELECT malachi.topic_settings('t_rf') ->> 'replication_factor' AS rf,
       malachi.topic_settings('t_rf') ->> 'retention' AS retention;

-- errors: duplicates, bad counts, bad names, NULLs
SELECT malachi.create_topic('t1');
SELECT malachi.create_topic('bad', 3);
SELECT malachi.create_topic('bad', 0);
SELECT malachi.create_topic('bad', 2048);
SELECT malachi.create_topic('bad', -4);
SELECT malachi.create_topic('bad', NULL);
SELECT malachi.create_topic(NULL);
SELECT malachi.create_topic('');
SELECT malachi.create_topic(repeat('n', 250));
SELECT malachi.create_topic(repeat('n', 249)) > 0 AS longest_name_ok;
SELECT malachi.drop_topic(repeat('n', 249));
SELECT malachi.create_topic('bad', 1, 0);
SELECT malachi.create_topic('bad', 1, 17);
SELECT malachi.create_topic('bad', 1, NULL, 'no_such_policy');
SELECT malachi.create_topic('bad', 1, NULL, '');
-- nothing was left behind by the failures
SELECT count(*) AS bad_topics FROM malachi.topic_meta WHERE topic = 'bad';

-- a failed create inside a transaction leaves nothing; a rolled back one neither
BEGIN;
SELECT malachi.create_topic('rolled_back', 8) > 0 AS created;
ROLLBACK;
SELECT count(*) AS rolled_back_ranges FROM malachi.ranges WHERE topic = 'rolled_back';

-- names are never interpreted: odd characters are just bytes
SELECT malachi.create_topic('../etc/passwd; DROP TABLE x') > 0 AS created;
SELECT topic FROM malachi.ranges WHERE topic LIKE '../%';
SELECT malachi.drop_topic('../etc/passwd; DROP TABLE x');

-- unknown topics
SELECT malachi.drop_topic('nope');
SELECT malachi.active_range_ids('nope');
SELECT malachi.topic_settings('nope');
SELECT malachi.topic_policy_name('nope');
SELECT malachi.drop_topic(NULL);
SELECT malachi.active_range_ids(NULL);

-- drop removes the topic, its ranges and its binding
SELECT malachi.drop_topic('t_rf');
SELECT count(*) AS left_over FROM malachi.ranges WHERE topic = 't_rf';
SELECT malachi.topics_bound_to('gold');
SELECT malachi.drop_policy('gold');

-- a dropped name can be created again
SELECT malachi.drop_topic('t1');
SELECT malachi.create_topic('t1') > 0 AS recreated;

-- clean up
SELECT malachi.drop_topic(topic) FROM malachi.topic_meta ORDER BY topic;

-- the highest topic id, 2147483646: topic_id * 2^32 + key_hi (the ranges'
-- exclusion constraint) must stay within bigint; the next is refused by
-- the sequence (2200H), not by an overflow
SELECT setval('malachi.topic_id_seq', 2147483645);
SELECT malachi.create_topic('last_id') IS NOT NULL AS created;
SELECT topic_id FROM malachi.topic_meta WHERE topic = 'last_id';
SELECT malachi.create_topic('past_last_id');
\set VERBOSITY sqlstate
SELECT malachi.create_topic('past_last_id');
\set VERBOSITY default
SELECT malachi.drop_topic('last_id');
