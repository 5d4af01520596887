-- Cross-epoch streams of ranges: read_history, stream_history, read_consume,
-- cursors and skips.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
SET malachi.produce_mode = 'immediate';

SELECT malachi.create_topic('h') AS root \gset
-- keys k0..k19, two records each, before any split
SELECT malachi.produce_batch('h', array_agg('k' || (i % 20)), array_agg('v' || i))
  FROM generate_series(0, 39) i;
SELECT count(*), min("offset"), max("offset") FROM malachi.read_history(:root);

-- split the root; produce more; the children's streams start with the
-- parent's records of their half, then their own
SELECT left_id AS l, right_id AS r FROM malachi.split_range(:root) \gset
SELECT malachi.produce_batch('h', array_agg('k' || (i % 20)), array_agg('w' || i))
  FROM generate_series(40, 59) i;
SELECT range_id = :root AS from_parent, count(*)
  FROM malachi.read_history(:l) GROUP BY 1 ORDER BY 1;
-- every key's records, in production order, in exactly one child
WITH all_records AS (
	SELECT key, value, 'l' AS child FROM malachi.read_history(:l)
	UNION ALL
	SELECT key, value, 'r' FROM malachi.read_history(:r))
SELECT count(*) AS records, count(DISTINCT key) AS keys,
	   count(DISTINCT (key, child)) = count(DISTINCT key) AS one_child_per_key
  FROM all_records;
SELECT bool_and(malachi.key_hash(key) >= (SELECT key_lo FROM malachi.ranges WHERE range_id = :l)
			AND malachi.key_hash(key) < (SELECT key_hi FROM malachi.ranges WHERE range_id = :l))
	   AS keys_in_slice
  FROM malachi.read_history(:l);

-- merge the children back: the merge child reads the root, one parent's
-- slice, then the other's, then its own
SELECT malachi.merge_ranges(:l, :r) AS m \gset
SELECT malachi.produce('h', 'k1', 'after merge'::text);
SELECT count(*) AS records, count(DISTINCT (range_id, "offset")) AS distinct_positions
  FROM malachi.read_history(:m);
-- per key, values arrive in production order
SELECT bool_and(ok) AS per_key_order FROM (
	SELECT key, (array_agg(convert_from(value, 'UTF8') ORDER BY ord))
			= (SELECT array_agg(v ORDER BY n) FROM (
				SELECT 'v' || i AS v, i AS n FROM generate_series(0, 39) i WHERE 'k' || (i % 20) = key
				UNION ALL SELECT 'w' || i, i FROM generate_series(40, 59) i WHERE 'k' || (i % 20) = key
				UNION ALL SELECT 'after merge', 1000 WHERE key = 'k1') x) AS ok
	  FROM (SELECT key, value, row_number() OVER () AS ord FROM malachi.read_history(:m)) s
	 GROUP BY key) t;

-- stream_history pages: bounded, and next_cursor NULL once done
CREATE TEMP TABLE pages (n int, cnt int, done bool, cur text);
DO $$
DECLARE
	c text := NULL;
	p record;
	i int := 0;
BEGIN
	LOOP
		SELECT * INTO p FROM malachi.stream_history(
			(SELECT range_id FROM malachi.ranges WHERE topic = 'h' AND state = 'active'), c, 25);
		i := i + 1;
		INSERT INTO pages VALUES (i, cardinality(p.records), p.next_cursor IS NULL, p.next_cursor);
		EXIT WHEN p.next_cursor IS NULL OR i > 10;
		c := p.next_cursor;
	END LOOP;
END
$$;
SELECT n, cnt, done FROM pages ORDER BY n;

-- read_consume tails: a caught-up page is empty and keeps its cursor
SELECT cardinality(records) AS n, next_cursor IS NOT NULL AS has_cursor, skips
  FROM malachi.read_consume(:m, NULL, 1000) \gset c_
SELECT :c_n AS first_page;
SELECT cardinality(records) AS n, skips FROM malachi.read_consume(:m, (
	SELECT next_cursor FROM malachi.read_consume(:m, NULL, 1000)), 1000);
SELECT (SELECT next_cursor FROM malachi.read_consume(:m, NULL, 1000)) =
	   (SELECT next_cursor FROM malachi.read_consume(:m,
			(SELECT next_cursor FROM malachi.read_consume(:m, NULL, 1000)), 10)) AS cursor_kept;
-- a new record arrives on the next page
SELECT next_cursor AS tail FROM malachi.read_consume(:m, NULL, 1000) \gset
SELECT malachi.produce('h', 'k2', 'late'::text);
SELECT (r).key, convert_from((r).value, 'UTF8') AS value
  FROM malachi.read_consume(:m, :'tail', 10) p, unnest(p.records) r;
-- max_records 0: an empty page with the same cursor
SELECT cardinality(records), next_cursor = :'tail' AS same
  FROM malachi.read_consume(:m, :'tail', 0);

-- bad input
SELECT * FROM malachi.read_consume(:m, 'not a cursor', 10);
SELECT * FROM malachi.read_consume(:m, '', 10);
SELECT * FROM malachi.read_consume(:root, :'tail', 10);		-- another range's
SELECT * FROM malachi.read_consume(:m, translate(:'tail', 'AQ', 'QA'), 10);	-- altered
SELECT * FROM malachi.read_consume(:m, 'TUMAAQ' || :'tail', 10);				-- spliced
SELECT * FROM malachi.read_consume(:m, overlay(:'tail' placing
	CASE WHEN substr(:'tail', 60, 1) = 'B' THEN 'C' ELSE 'B' END from 60 for 1), 10);	-- one offset changed
SELECT * FROM malachi.read_consume(:m, NULL, -1);
SELECT * FROM malachi.read_consume(NULL, NULL, 1);
SELECT * FROM malachi.read_consume(:m, NULL, NULL);
SELECT * FROM malachi.read_consume(999999, NULL, 1);
SELECT * FROM malachi.stream_history(999999, NULL, 1);
SELECT * FROM malachi.read_history(999999);
SELECT * FROM malachi.read_history(NULL);

-- skips: delete the root's oldest segment; pages step over it and say so
SELECT malachi.create_topic('s') AS s_root \gset
SELECT malachi.produce_batch('s', array_agg('k' || i), array_agg('x' || i)) FROM generate_series(0, 9) i;
SELECT malachi.roll(:s_root) AS seg0 \gset
SELECT malachi.produce_batch('s', array_agg('k' || i), array_agg('y' || i)) FROM generate_series(0, 9) i;
SELECT malachi.roll(:s_root) AS seg1 \gset
SELECT malachi.produce_batch('s', array_agg('k' || i), array_agg('z' || i)) FROM generate_series(0, 9) i;
SELECT next_cursor AS s_c5 FROM malachi.read_consume(:s_root, NULL, 5) \gset
SELECT malachi.delete_segment(:seg0);
-- the newest sealed segment of a range stays
SELECT malachi.roll(:s_root) AS seg2 \gset
SELECT malachi.delete_segment(:seg2);
-- from the beginning: a skip of [0, 10), then records from 10
SELECT cardinality(records) AS n, (records[1])."offset" AS first, skips
  FROM malachi.read_consume(:s_root, NULL, 5);
-- from offset 5 (inside the deleted segment): a skip of [5, 10)
SELECT cardinality(records) AS n, (records[1])."offset" AS first, skips
  FROM malachi.read_consume(:s_root, :'s_c5', 5);
-- the next page has no skip
SELECT cardinality(records) AS n, (records[1])."offset" AS first, skips
  FROM malachi.read_consume(:s_root,
	(SELECT next_cursor FROM malachi.read_consume(:s_root, :'s_c5', 5)), 100);
SELECT count(*) FROM malachi.read_history(:s_root);

SELECT malachi.drop_topic('h');
SELECT malachi.drop_topic('s');

-- a cursor of an earlier installation: the new one reuses its range id,
-- but the cursor's offset lies past that range's end
DROP EXTENSION malachi;
CREATE EXTENSION malachi;
SELECT malachi.create_topic('c1') AS c1 \gset
SELECT malachi.produce_batch('c1', ARRAY['a', 'b', 'c', 'd', 'e'], ARRAY['1', '2', '3', '4', '5']::text[]);
SELECT next_cursor AS old_cursor FROM malachi.read_consume(:c1, NULL, 10) \gset
SELECT malachi.drop_topic('c1');
DROP EXTENSION malachi;
CREATE EXTENSION malachi;
SELECT malachi.create_topic('c2') = :c1 AS same_range_id;
SELECT malachi.produce('c2', 'a', '1'::text) = :c1;
SELECT cardinality(records) FROM malachi.read_consume(:c1, :'old_cursor', 10);
SELECT cardinality(records) FROM malachi.stream_history(:c1, :'old_cursor', 10);
SELECT malachi.drop_topic('c2');
