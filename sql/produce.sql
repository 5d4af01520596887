-- produce and read: round trips, batches, rolls, splits, bad input
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
-- this file tests immediate produce (durable at the call); see transactional.sql
SET malachi.produce_mode = immediate;

SELECT malachi.create_topic('p', 2) AS root \gset

-- every value type round-trips; headers and NULL keys too
SELECT malachi.produce('p', 'k1', '\x00ff10'::bytea) - :root AS rel_range;
SELECT malachi.produce('p', 'k1', 'text value'::text, '{"h": 1}') - :root AS rel_range;
SELECT malachi.produce('p', 'k1', '{"a": [1, 2, {"b": null}]}'::jsonb) - :root AS rel_range;
SELECT malachi.produce('p', 'k1', ''::text) - :root AS rel_range;
SELECT malachi.produce('p', 'k1', 'é ☃ 日本'::text, '{"trace": "abc", "n": [1, 2]}') - :root AS rel_range;
SELECT "offset", key, value, headers,
       CASE WHEN "offset" > 0 THEN convert_from(value, 'UTF8') END AS text
  FROM malachi.read(malachi.route('p', 'k1'), 0, 100);
SELECT produced_at <= now() AND produced_at > now() - interval '1 minute' AS recent
  FROM malachi.read(malachi.route('p', 'k1'), 0, 1);

-- a NULL key goes to one range per call, rotating
SELECT count(DISTINCT malachi.produce('p', NULL, 'n' || i)) AS ranges_used
  FROM generate_series(1, 4) i;
SELECT count(*) AS null_keys
  FROM malachi.active_range_ids('p') r, malachi.read(r, 0, 100) x WHERE x.key IS NULL;
-- calls with keys, and other topics' NULL keys, do not move a topic's turn:
-- alternating keyed and NULL-key calls still spread the NULL keys
SELECT malachi.create_topic('rot', 2) IS NOT NULL AS created,
       malachi.create_topic('rot2', 2) IS NOT NULL AS created_other;
SELECT count(*) FROM (
  SELECT malachi.produce('rot', NULL, 'n'::text), malachi.produce('rot2', NULL, 'o'::text),
         malachi.produce('rot', 'k', 'x'::text), malachi.produce('rot2', 'k', 'y'::text)
    FROM generate_series(1, 4)) calls;
SELECT t, count(DISTINCT r) AS null_key_ranges
  FROM unnest(ARRAY['rot', 'rot2']) t, malachi.active_range_ids(t) r,
       malachi.read(r, 0, 100) x
 WHERE x.key IS NULL GROUP BY t ORDER BY t;
SELECT malachi.drop_topic('rot'), malachi.drop_topic('rot2');

-- batches: one batch per range, offsets dense per range, in argument order
SELECT malachi.produce_batch('p', array_agg('b' || i), array_agg('v' || i)) AS accepted
  FROM generate_series(1, 100) i;
SELECT r - :root AS rel_range, count(*) AS records,
       max("offset") - min("offset") + 1 = count(*) AS dense
  FROM malachi.active_range_ids('p') r, malachi.read(r, 0, 1000) x
 WHERE x.key LIKE 'b%' GROUP BY r ORDER BY r;
SELECT bool_and(malachi.route('p', x.key) = x.range_id) AS every_key_in_its_range
  FROM malachi.active_range_ids('p') r, malachi.read(r, 0, 1000) x WHERE x.key IS NOT NULL;
SELECT malachi.produce_batch('p', ARRAY['x', 'y'], ARRAY['\x01', '\x02']::bytea[],
                             ARRAY['{"a": 1}', NULL]::jsonb[]) AS accepted;
SELECT malachi.produce_batch('p', ARRAY['j'], ARRAY['{"j": true}']::jsonb[]) AS accepted;
SELECT key, value, headers FROM malachi.active_range_ids('p') r, malachi.read(r, 0, 1000) x
 WHERE key IN ('x', 'y', 'j') ORDER BY key;
SELECT malachi.produce_batch('p', '{}'::text[], '{}'::text[]) AS empty_batch;

-- read bounds: from an offset, a page size, nothing past the end
SELECT malachi.route('p', 'k1') AS r1 \gset
SELECT count(*) FROM malachi.read(:r1, 0, 3);
SELECT min("offset"), count(*) FROM malachi.read(:r1, 2, 100) WHERE key = 'k1';
SELECT count(*) AS past_end FROM malachi.read(:r1, 1000000, 10);
SELECT count(*) AS zero_page FROM malachi.read(:r1, 0, 0);

-- compression: zstd and none read back the same
SELECT malachi.create_topic('z') AS zroot \gset
SELECT malachi.alter_topic('z', '{"compression": "zstd", "zstd_level": 3}') ->> 'compression';
SELECT malachi.produce_batch('z', array_agg('k' || (i % 7)), array_agg(repeat('compressible ', 50) || i))
  FROM generate_series(1, 200) i;
SELECT byte_size < 200 * 650 / 4 AS zstd_shrank FROM malachi.segments WHERE range_id = :zroot;
SELECT malachi.alter_topic('z', '{"compression": "none"}') ->> 'compression';
SELECT malachi.produce_batch('z', array_agg('k' || (i % 7)), array_agg(repeat('compressible ', 50) || i))
  FROM generate_series(201, 400) i;
SELECT count(*) AS records, count(DISTINCT value) AS distinct_values,
       bool_and(convert_from(value, 'UTF8') = repeat('compressible ', 50) || ("offset" + 1)) AS exact
  FROM malachi.read(:zroot, 0, 1000);
SELECT byte_size > 200 * 650 AS none_did_not FROM malachi.segments WHERE range_id = :zroot;

-- rolls by size: 4 KiB segments, reads spanning many of them
SELECT malachi.create_topic('roll') AS rroot \gset
SELECT malachi.alter_topic('roll', '{"segment_max_bytes": 4096}') ->> 'segment_max_bytes';
DO $$
BEGIN
	FOR b IN 0..29 LOOP
		PERFORM malachi.produce_batch('roll', array_agg('k' || i), array_agg(repeat('r', 100) || i))
		   FROM generate_series(b * 10, b * 10 + 9) i;
	END LOOP;
END $$;
SELECT count(*) AS segments, count(*) FILTER (WHERE state = 'sealed') AS sealed,
       bool_and(byte_size <= 4096 + 10 * 200 OR state = 'active') AS sizes_bounded
  FROM malachi.segments WHERE range_id = :rroot;
SELECT bool_and(s.base_offset = coalesce(p.end_offset, 0)) AS segments_tile_offsets
  FROM malachi.segments s LEFT JOIN malachi.segments p
    ON p.range_id = s.range_id AND p.seq = s.seq - 1
 WHERE s.range_id = :rroot;
SELECT count(*) AS records, min("offset"), max("offset"),
       bool_and(convert_from(value, 'UTF8') = repeat('r', 100) || "offset") AS in_order
  FROM malachi.read(:rroot, 0, 100000);
SELECT count(*) AS from_middle, min("offset") FROM malachi.read(:rroot, 137, 50);

-- roll on demand: the head is sealed at its end, the next produce opens another
SELECT malachi.roll(:rroot) IS NOT NULL AS rolled;
SELECT malachi.roll(:rroot) IS NULL AS nothing_to_roll;
SELECT malachi.produce('roll', 'k', 'after roll'::text) = :rroot AS same_range;
SELECT state, end_offset - base_offset AS records FROM malachi.segments
 WHERE range_id = :rroot ORDER BY seq DESC LIMIT 2;

-- offset_for_time
SELECT malachi.offset_for_time(:rroot, '-infinity') AS first,
       malachi.offset_for_time(:rroot, 'infinity') = (SELECT max("offset") + 1 FROM malachi.read(:rroot, 0, 100000)) AS end_when_none;
-- by time across sealed segments of several index points and the head:
-- every call's time, and a microsecond either side, against a scan.  A
-- transactional batch lands after 40 later calls (at its commit) with
-- its call's older time: times do not grow along the offsets
SELECT malachi.create_topic('times', 1) AS rtimes \gset
SELECT malachi.alter_topic('times', '{"segment_max_bytes": 262144}') IS NOT NULL AS altered;
CREATE FUNCTION pg_temp.produce_times(calls int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. calls LOOP
		PERFORM malachi.produce_batch('times', array_fill('k'::text, ARRAY[8]),
									  array_fill(repeat('t', 1000), ARRAY[8]));
	END LOOP;
END $$;
SELECT pg_temp.produce_times(60);
BEGIN;
SET LOCAL malachi.produce_mode = transactional;
SELECT malachi.produce_batch('times', array_fill('k'::text, ARRAY[8]),
                             array_fill(repeat('e', 1000), ARRAY[8]));
SET LOCAL malachi.produce_mode = immediate;
SELECT pg_temp.produce_times(40);
COMMIT;
SELECT pg_temp.produce_times(20);
WITH r AS (SELECT * FROM malachi.read(:rtimes, 0, 100000)),
     e AS (SELECT min("offset") AS o, min(produced_at) AS t FROM r
            WHERE convert_from(value, 'UTF8') LIKE 'e%')
SELECT e.o > 480 AS committed_late,
       e.t < (SELECT max(produced_at) FROM r WHERE "offset" < e.o) AS older_than_before
  FROM e;
SELECT count(*) > 2 AS several_segments, count(*) FILTER (WHERE state = 'active') AS heads
  FROM malachi.segments WHERE range_id = :rtimes;
WITH r AS (SELECT "offset", produced_at FROM malachi.read(:rtimes, 0, 100000)),
     t AS (SELECT produced_at AS ts FROM r
           UNION SELECT produced_at - interval '1 microsecond' FROM r
           UNION SELECT produced_at + interval '1 microsecond' FROM r)
SELECT count(*) >= 360 AS enough_times,
       count(*) FILTER (WHERE malachi.offset_for_time(:rtimes, ts) <>
                        coalesce((SELECT min("offset") FROM r WHERE produced_at >= ts),
                                 (SELECT max("offset") + 1 FROM r))) AS wrong
  FROM t;

-- split and merge after produce: parents' heads are sealed first, children start empty
SELECT malachi.route('p', 'k1') AS before \gset
SELECT (malachi.split_range(:before)).left_id IS NOT NULL AS split;
SELECT state FROM malachi.segments WHERE range_id = :before;
SELECT count(*) AS parent_records_kept FROM malachi.read(:before, 0, 1000);
SELECT malachi.produce('p', 'k1', 'after split'::text) <> :before AS routed_to_child;
SELECT "offset", convert_from(value, 'UTF8') FROM malachi.read(malachi.route('p', 'k1'), 0, 10);
SELECT count(*) AS parent_unchanged FROM malachi.read(:before, 0, 1000);
SELECT array_agg(id) AS kids FROM malachi.active_range_ids('p') id
 WHERE id > :before \gset
SELECT malachi.merge_ranges((:'kids'::bigint[])[1], (:'kids'::bigint[])[2]) AS merged \gset
SELECT count(*) AS sealed_children FROM malachi.segments s
 WHERE s.range_id = ANY (:'kids'::bigint[]) AND s.state = 'sealed';
SELECT malachi.produce('p', 'k1', 'after merge'::text) = :merged AS routed_to_merge_child;

-- stat_topics and segments views
SELECT topic, ranges, segments > 0 AS has_segments, records, bytes_on_disk > 0 AS has_bytes
  FROM malachi.stat_topics ORDER BY topic;

-- bad input: clear errors, nothing appended
SELECT malachi.produce(NULL, 'k', 'v'::text);
SELECT malachi.produce('nope', 'k', 'v'::text);
SELECT malachi.produce('p', 'k', NULL::text);
SELECT malachi.produce_batch('p', ARRAY['a', 'b'], ARRAY['1']);
SELECT malachi.produce_batch('p', ARRAY['a'], ARRAY['1'], ARRAY['{}', '{}']::jsonb[]);
SELECT malachi.produce_batch('p', ARRAY['a', 'b'], ARRAY['1', NULL]);
SELECT malachi.produce_batch('p', NULL, ARRAY['1']);
SELECT malachi.produce_batch('p', ARRAY[['a']], ARRAY[['1']]);
SET malachi.max_record_bytes = '4kB';
SELECT malachi.produce('p', 'k', repeat('x', 5000));
SELECT malachi.produce_batch('p', ARRAY['ok', 'big'], ARRAY['small', repeat('x', 5000)]);
RESET malachi.max_record_bytes;
SELECT count(*) AS nothing_appended FROM malachi.active_range_ids('p') r, malachi.read(r, 0, 10000) x
 WHERE x.key IN ('a', 'b', 'ok', 'big');
SELECT malachi.read(NULL, 0, 1);
SELECT malachi.read(:r1, -1, 1);
SELECT malachi.read(:r1, 0, -1);
SELECT malachi.read(:r1, NULL, 1);
SELECT malachi.read(-5, 0, 1);
SELECT malachi.offset_for_time(-5, now());
SELECT malachi.roll(-5);
SELECT malachi.roll(NULL);
-- a transaction that changed metadata cannot produce
BEGIN;
SELECT malachi.create_topic('fresh') > 0 AS created;
SELECT malachi.produce('fresh', 'k', 'v'::text);
ROLLBACK;

-- immediate semantics: the record stays even when the transaction rolls back
BEGIN;
SELECT malachi.produce('p', 'kept', 'despite rollback'::text) IS NOT NULL AS produced;
ROLLBACK;
SELECT count(*) AS kept FROM malachi.read(malachi.route('p', 'kept'), 0, 10000) WHERE key = 'kept';

-- drop_topic removes segments with the topic
SELECT malachi.drop_topic('roll');
SELECT count(*) AS roll_segments FROM malachi.segments WHERE range_id = :rroot;
SELECT malachi.drop_topic(topic) FROM malachi.topic_meta ORDER BY topic;
