-- tiling.sql: the tiling invariant survives 500 random splits and merges.
--
-- The same pseudo-random sequence of 500 operations (fixed setseed) runs
-- twice on a topic created with 4 ranges:
--   tiling_each    one operation per transaction, each committed (the
--                  deferred tiling trigger runs at every commit, and route()
--                  reads the backend cache the commit invalidated); the
--                  invariants are checked after every operation;
--   tiling_one_tx  all 500 operations in a single transaction and a single
--                  COMMIT (the deferred trigger checks them all at once);
--                  checked every 10 operations inside the transaction,
--                  where route() reads the transaction's own view.
-- Both runs commit for real, so they run before the pgTAP transaction and
-- their topics are dropped at the end; the pgTAP part reports what they
-- recorded and checks the committed results.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS malachi;

-- leftovers of an interrupted earlier run
DO $$ BEGIN
	PERFORM malachi.drop_topic(topic) FROM malachi.topic_meta
	  WHERE topic IN ('tiling_each', 'tiling_one_tx');
END $$;

---- helpers (temporary: this session only) ----------------------------------

CREATE TEMP TABLE tiling_ops (run text, n int, op text, key_lo bigint, key_hi bigint,
                              PRIMARY KEY (run, n));
CREATE TEMP TABLE tiling_bad (run text, n int, problem text);

-- Everything wrong with a topic's ranges right now, one row per problem.
-- With full, also the sealed ranges' children and route() of 200 keys.
CREATE FUNCTION pg_temp.tiling_problems(topic_name text, full_check bool)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	t bigint := (SELECT topic_id FROM malachi.topic_meta WHERE topic = topic_name);
BEGIN
	IF t IS NULL THEN
		RETURN NEXT format('topic %s does not exist', topic_name);
		RETURN;
	END IF;

	-- active ranges, by key_lo: start at 0, each where the previous ends,
	-- end at 2^32, none starting inside an earlier one
	RETURN QUERY
	WITH a AS (
		SELECT range_id, key_lo, key_hi,
		       lag(key_hi) OVER w AS prev_hi,
		       max(key_hi) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max,
		       row_number() OVER w AS rn, count(*) OVER () AS cnt
		  FROM malachi.range_meta
		 WHERE topic_id = t AND state = 'active'
		WINDOW w AS (ORDER BY key_lo, range_id))
	SELECT format('active range %s [%s,%s): %s', range_id, key_lo, key_hi,
	              concat_ws(', ',
	                  CASE WHEN rn = 1 AND key_lo <> 0 THEN 'first does not start at 0' END,
	                  CASE WHEN rn > 1 AND key_lo <> prev_hi THEN format('gap or overlap after %s', prev_hi) END,
	                  CASE WHEN rn = cnt AND key_hi <> 4294967296 THEN 'last does not end at 2^32' END,
	                  CASE WHEN key_lo < prev_max THEN format('overlaps an earlier range ending at %s', prev_max) END))
	  FROM a
	 WHERE (rn = 1 AND key_lo <> 0) OR (rn > 1 AND key_lo <> prev_hi)
	    OR (rn = cnt AND key_hi <> 4294967296) OR key_lo < prev_max;
	IF NOT EXISTS (SELECT FROM malachi.range_meta WHERE topic_id = t AND state = 'active') THEN
		RETURN NEXT 'no active range';
	END IF;

	-- active_range_ids() agrees with the table, in key order
	IF ARRAY(SELECT malachi.active_range_ids(topic_name))
	   IS DISTINCT FROM ARRAY(SELECT range_id FROM malachi.range_meta
	                           WHERE topic_id = t AND state = 'active' ORDER BY key_lo) THEN
		RETURN NEXT format('active_range_ids() returns %s, the table says %s',
		                   ARRAY(SELECT malachi.active_range_ids(topic_name)),
		                   ARRAY(SELECT range_id FROM malachi.range_meta
		                          WHERE topic_id = t AND state = 'active' ORDER BY key_lo));
	END IF;

	IF NOT full_check THEN
		RETURN;
	END IF;

	-- every sealed range was replaced: by two split children that tile its
	-- slice exactly, or by one merge child whose slice is twice as wide and
	-- holds it; active ranges have no children; parents exist in the topic
	RETURN QUERY
	WITH kids AS (
		SELECT p AS parent, c.range_id, c.key_lo, c.key_hi,
		       cardinality(c.parents) AS np
		  FROM malachi.range_meta c, unnest(c.parents) p
		 WHERE c.topic_id = t),
	agg AS (
		SELECT parent, count(*) AS n, min(key_lo) AS lo, max(key_hi) AS hi,
		       sum(key_hi - key_lo) AS w, bool_and(np = 1) AS split_kids,
		       bool_and(np = 2) AS merge_kids,
		       string_agg(format('%s[%s,%s)', range_id, key_lo, key_hi), ' '
		                  ORDER BY key_lo) AS descr
		  FROM kids GROUP BY parent)
	SELECT format('sealed range %s [%s,%s) has children %s', s.range_id,
	              s.key_lo, s.key_hi, coalesce(agg.descr, '(none)'))
	  FROM malachi.range_meta s LEFT JOIN agg ON agg.parent = s.range_id
	 WHERE s.topic_id = t AND s.state = 'sealed'
	   AND NOT coalesce(
	       (agg.n = 2 AND agg.split_kids AND agg.lo = s.key_lo
	        AND agg.hi = s.key_hi AND agg.w = s.key_hi - s.key_lo)
	    OR (agg.n = 1 AND agg.merge_kids AND agg.lo <= s.key_lo
	        AND agg.hi >= s.key_hi AND agg.hi - agg.lo = 2 * (s.key_hi - s.key_lo)),
	       false)
	UNION ALL
	SELECT format('active range %s has children %s', r.range_id, agg.descr)
	  FROM agg JOIN malachi.range_meta r ON r.range_id = agg.parent
	 WHERE r.state = 'active'
	UNION ALL
	SELECT format('range %s names parent %s, which is not a range of its topic',
	              k.range_id, k.parent)
	  FROM kids k LEFT JOIN malachi.range_meta p
	       ON p.range_id = k.parent AND p.topic_id = t
	 WHERE p.range_id IS NULL;

	-- route() sends each key to the active range whose slice holds its hash
	BEGIN
	RETURN QUERY
	SELECT format('key %s (hash %s) routed to range %s %s', k, h, rid,
	              CASE WHEN r.range_id IS NULL THEN 'which does not exist'
	                   ELSE format('[%s,%s) %s of topic %s', r.key_lo, r.key_hi,
	                               r.state, r.topic_id) END)
	  FROM (SELECT k, malachi.key_hash(k) AS h, malachi.route(topic_name, k) AS rid
	          FROM (SELECT 'key-' || i AS k FROM generate_series(1, 200) i) keys) x
	  LEFT JOIN malachi.range_meta r ON r.range_id = x.rid
	 WHERE r.range_id IS NULL OR r.topic_id <> t OR r.state <> 'active'
	    OR NOT (x.h >= r.key_lo AND x.h < r.key_hi);
	EXCEPTION WHEN OTHERS THEN
		RETURN NEXT format('route() failed: %s %s', SQLSTATE, SQLERRM);
	END;
END
$$;

-- One random operation on a topic: merge a random pair of active buddies
-- (half of the time, when there is one) or split a random active range.
-- Choices depend only on slices, so a given seed replays the same sequence
-- on any topic.  Returns what it did.
CREATE FUNCTION pg_temp.tiling_op(topic_name text, OUT op text, OUT key_lo bigint,
                                  OUT key_hi bigint)
LANGUAGE plpgsql AS $$
DECLARE
	t bigint := (SELECT topic_id FROM malachi.topic_meta WHERE topic = topic_name);
	n int;
	r record;
BEGIN
	IF random() < 0.5 THEN
		SELECT count(*) INTO n
		  FROM malachi.range_meta a JOIN malachi.range_meta b
		    ON b.topic_id = a.topic_id AND b.state = 'active'
		   AND b.key_lo = (a.key_lo # (a.key_hi - a.key_lo))
		   AND b.key_hi - b.key_lo = a.key_hi - a.key_lo
		 WHERE a.topic_id = t AND a.state = 'active' AND a.key_lo < b.key_lo;
		IF n > 0 THEN
			SELECT a.range_id AS a_id, b.range_id AS b_id, a.key_lo AS lo, b.key_hi AS hi
			  INTO r
			  FROM malachi.range_meta a JOIN malachi.range_meta b
			    ON b.topic_id = a.topic_id AND b.state = 'active'
			   AND b.key_lo = (a.key_lo # (a.key_hi - a.key_lo))
			   AND b.key_hi - b.key_lo = a.key_hi - a.key_lo
			 WHERE a.topic_id = t AND a.state = 'active' AND a.key_lo < b.key_lo
			 ORDER BY a.key_lo OFFSET floor(random() * n) LIMIT 1;
			-- either argument order must do
			IF random() < 0.5 THEN
				PERFORM malachi.merge_ranges(r.a_id, r.b_id);
			ELSE
				PERFORM malachi.merge_ranges(r.b_id, r.a_id);
			END IF;
			op := 'merge';
			key_lo := r.lo;
			key_hi := r.hi;
			RETURN;
		END IF;
	END IF;
	SELECT count(*) INTO n FROM malachi.range_meta m
	 WHERE m.topic_id = t AND m.state = 'active' AND m.key_hi - m.key_lo > 1;
	SELECT m.range_id, m.key_lo AS lo, m.key_hi AS hi INTO r
	  FROM malachi.range_meta m
	 WHERE m.topic_id = t AND m.state = 'active' AND m.key_hi - m.key_lo > 1
	 ORDER BY m.key_lo OFFSET floor(random() * n) LIMIT 1;
	PERFORM malachi.split_range(r.range_id);
	op := 'split';
	key_lo := r.lo;
	key_hi := r.hi;
END
$$;

-- Run A: every operation in its own committed transaction; check everything
-- after each commit.
CREATE PROCEDURE pg_temp.tiling_each_committed(topic_name text, nops int, seed float8)
LANGUAGE plpgsql AS $$
DECLARE
	o record;
	failure text;
BEGIN
	PERFORM setseed(seed);
	PERFORM malachi.create_topic(topic_name, 4);
	COMMIT;
	FOR i IN 1..nops LOOP
		BEGIN
			o := pg_temp.tiling_op(topic_name);
		EXCEPTION WHEN OTHERS THEN
			failure := format('the operation failed: %s %s', SQLSTATE, SQLERRM);
		END;
		IF failure IS NOT NULL THEN
			ROLLBACK;
			INSERT INTO tiling_bad VALUES ('each', i, failure);
			COMMIT;
			RETURN;
		END IF;
		INSERT INTO tiling_ops VALUES ('each', i, o.op, o.key_lo, o.key_hi);
		COMMIT;
		IF i % 25 = 0 THEN
			ANALYZE malachi.range_meta;	-- keep the checks' plans sane as ranges pile up
		END IF;
		INSERT INTO tiling_bad
		SELECT 'each', i, p
		  FROM pg_temp.tiling_problems(topic_name, true) p;
		IF FOUND THEN
			COMMIT;
			RETURN;				-- one broken state is enough to report
		END IF;
	END LOOP;
	COMMIT;
END
$$;

-- Run B: the same operations in the caller's single transaction.
CREATE FUNCTION pg_temp.tiling_one_transaction(topic_name text, nops int, seed float8)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	o record;
BEGIN
	PERFORM setseed(seed);
	PERFORM malachi.create_topic(topic_name, 4);
	FOR i IN 1..nops LOOP
		o := pg_temp.tiling_op(topic_name);
		INSERT INTO tiling_ops VALUES ('one_tx', i, o.op, o.key_lo, o.key_hi);
		IF i % 25 = 0 THEN
			ANALYZE malachi.range_meta;
		END IF;
		IF i % 10 = 0 THEN
			INSERT INTO tiling_bad
			SELECT 'one_tx', i, p FROM pg_temp.tiling_problems(topic_name, true) p;
		END IF;
	END LOOP;
END
$$;

---- the two runs (real commits) -----------------------------------------------

-- a failure here is reported by the assertions below, not by stopping psql
\set ON_ERROR_STOP 0
CALL pg_temp.tiling_each_committed('tiling_each', 500, 0.2718);

BEGIN;
DO $$ BEGIN PERFORM pg_temp.tiling_one_transaction('tiling_one_tx', 500, 0.2718); END $$;
COMMIT;
\set ON_ERROR_STOP 1

---- report -----------------------------------------------------------------------

BEGIN;
SET LOCAL search_path = public;
SELECT plan(31);

-- run A: one commit per operation
SELECT is((SELECT count(*)::int FROM tiling_ops WHERE run = 'each'), 500,
          'run A: all 500 operations committed one by one');
SELECT is_empty($$SELECT format('after op %s: %s', n, problem) FROM tiling_bad WHERE run = 'each' ORDER BY n$$,
                'run A: tiling, key order, active_range_ids, sealed children and routes held after every commit');
SELECT cmp_ok((SELECT count(*)::int FROM tiling_ops WHERE run = 'each' AND op = 'merge'), '>=', 100,
              'run A: the sequence merges at least 100 times');
SELECT cmp_ok((SELECT count(*)::int FROM tiling_ops WHERE run = 'each' AND op = 'split'), '>=', 100,
              'run A: the sequence splits at least 100 times');
SELECT ok(EXISTS (SELECT FROM tiling_ops WHERE run = 'each' AND op = 'merge'
                   AND key_hi - key_lo > 1073741824),
          'run A: some merge goes above the 4 pre-split ranges');
SELECT cmp_ok((SELECT max(key_hi - key_lo) FROM tiling_ops WHERE run = 'each' AND op = 'split')::numeric
              / (SELECT min(key_hi - key_lo) FROM tiling_ops WHERE run = 'each' AND op = 'split'),
              '>=', 64::numeric,
              'run A: splits happen at many depths of the halving tree');

-- run A's committed state, checked afresh here (not by the helper)
SELECT is((SELECT key_lo FROM malachi.ranges WHERE topic = 'tiling_each' AND state = 'active'
            ORDER BY key_lo LIMIT 1), 0::bigint,
          'run A: the first active range starts at 0');
SELECT is((SELECT key_hi FROM malachi.ranges WHERE topic = 'tiling_each' AND state = 'active'
            ORDER BY key_lo DESC LIMIT 1), 4294967296::bigint,
          'run A: the last active range ends at 2^32');
SELECT is_empty($$
	SELECT range_id FROM (
		SELECT range_id, key_lo, lag(key_hi) OVER (ORDER BY key_lo) AS prev_hi
		  FROM malachi.ranges WHERE topic = 'tiling_each' AND state = 'active') a
	 WHERE prev_hi IS NOT NULL AND key_lo <> prev_hi
$$, 'run A: each active range starts where the previous one ends');
SELECT is_empty($$
	SELECT a.range_id, b.range_id
	  FROM malachi.ranges a JOIN malachi.ranges b
	    ON a.topic = b.topic AND a.range_id < b.range_id
	   AND a.key_lo < b.key_hi AND b.key_lo < a.key_hi
	 WHERE a.topic = 'tiling_each' AND a.state = 'active' AND b.state = 'active'
$$, 'run A: no two active ranges overlap');
SELECT is((SELECT sum(key_hi - key_lo) FROM malachi.ranges
            WHERE topic = 'tiling_each' AND state = 'active'), 4294967296::numeric,
          'run A: active ranges cover 2^32 hashes');
SELECT results_eq(
	$$SELECT id FROM malachi.active_range_ids('tiling_each') id$$,
	$$SELECT range_id FROM malachi.ranges WHERE topic = 'tiling_each' AND state = 'active' ORDER BY key_lo$$,
	'run A: active_range_ids lists the active ranges by key_lo');
SELECT is_empty($$
	SELECT s.range_id FROM malachi.ranges s
	 WHERE s.topic = 'tiling_each' AND s.state = 'sealed'
	   -- no merge child holding it
	   AND NOT EXISTS (SELECT FROM malachi.ranges c
	                    WHERE c.topic = s.topic AND c.parents @> ARRAY[s.range_id]
	                      AND cardinality(c.parents) = 2
	                      AND c.key_lo <= s.key_lo AND c.key_hi >= s.key_hi)
	   -- nor two split children inside it that cover it exactly
	   AND NOT coalesce((SELECT count(*) = 2
	                            AND bool_and(c.key_lo >= s.key_lo AND c.key_hi <= s.key_hi)
	                            AND sum(c.key_hi - c.key_lo) = s.key_hi - s.key_lo
	                       FROM malachi.ranges c
	                      WHERE c.topic = s.topic AND c.parents = ARRAY[s.range_id]), false)
$$, 'run A: every sealed range is covered by its split children or its merge child');
SELECT is_empty($$
	SELECT k FROM (SELECT 'key-' || i AS k FROM generate_series(1, 200) i) keys
	  LEFT JOIN malachi.ranges r ON r.range_id = malachi.route('tiling_each', k)
	 WHERE r.topic IS DISTINCT FROM 'tiling_each' OR r.state <> 'active'
	    OR malachi.key_hash(k) < r.key_lo OR malachi.key_hash(k) >= r.key_hi
$$, 'run A: route() sends 200 keys to the active range holding their hash');
SELECT is((SELECT count(*)::int FROM malachi.ranges WHERE topic = 'tiling_each'),
          7 + 2 * (SELECT count(*)::int FROM tiling_ops WHERE run = 'each' AND op = 'split')
            + (SELECT count(*)::int FROM tiling_ops WHERE run = 'each' AND op = 'merge'),
          'run A: each split added two ranges and each merge one');
SELECT is((SELECT count(*)::int FROM malachi.ranges WHERE topic = 'tiling_each' AND state = 'active'),
          4 + (SELECT count(*)::int FROM tiling_ops WHERE run = 'each' AND op = 'split')
            - (SELECT count(*)::int FROM tiling_ops WHERE run = 'each' AND op = 'merge'),
          'run A: the active count moved by +1 per split and -1 per merge');

-- run B: one transaction, one commit
SELECT is((SELECT count(*)::int FROM malachi.topic_meta WHERE topic = 'tiling_one_tx'), 1,
          'run B: the single transaction of 500 operations committed (the deferred tiling check accepted it)');
SELECT is((SELECT count(*)::int FROM tiling_ops WHERE run = 'one_tx'), 500,
          'run B: all 500 operations ran in it');
SELECT is_empty($$SELECT format('after op %s: %s', n, problem) FROM tiling_bad WHERE run = 'one_tx' ORDER BY n$$,
                'run B: the invariants held every 10 operations inside the transaction');
SELECT results_eq($$SELECT n, op, key_lo, key_hi FROM tiling_ops WHERE run = 'each' ORDER BY n$$,
                  $$SELECT n, op, key_lo, key_hi FROM tiling_ops WHERE run = 'one_tx' ORDER BY n$$,
                  'run B replayed run A''s sequence of operations');
SELECT results_eq(
	$$SELECT key_lo, key_hi, state COLLATE "default", cardinality(parents) FROM malachi.ranges WHERE topic = 'tiling_each' ORDER BY range_id$$,
	$$SELECT key_lo, key_hi, state COLLATE "default", cardinality(parents) FROM malachi.ranges WHERE topic = 'tiling_one_tx' ORDER BY range_id$$,
	'run B committed the same ranges, in the same order, as run A');
SELECT is_empty($$SELECT * FROM pg_temp.tiling_problems('tiling_one_tx', true)$$,
                'run B: the committed ranges tile, and route() agrees with them');
SELECT is((SELECT count(DISTINCT range_id)::int FROM malachi.ranges
            WHERE topic IN ('tiling_each', 'tiling_one_tx')),
          (SELECT count(*)::int FROM malachi.ranges
            WHERE topic IN ('tiling_each', 'tiling_one_tx')),
          'range ids are unique across both topics');

-- the deferred check is live: a broken tiling of that topic is refused
SELECT coalesce(min(range_id), 0) AS one_tx_first FROM malachi.ranges
 WHERE topic = 'tiling_one_tx' AND state = 'active' AND key_lo = 0 \gset
SELECT throws_ok(
	format('DELETE FROM malachi.range_meta WHERE range_id = %s; SET CONSTRAINTS ALL IMMEDIATE', :one_tx_first),
	'MA010', NULL, 'run B: deleting an active range fails the deferred tiling check');
SELECT throws_ok(
	format('UPDATE malachi.range_meta SET state = ''sealed'', sealed_at = now(), end_offset = 0 WHERE range_id = %s; SET CONSTRAINTS ALL IMMEDIATE', :one_tx_first),
	'MA010', NULL, 'run B: sealing an active range without children fails the deferred tiling check');
SELECT throws_ok(
	format('UPDATE malachi.range_meta SET state = ''sealed'', sealed_at = now() WHERE range_id = %s', :one_tx_first),
	'23514', NULL, 'run B: a range cannot be sealed without its final end offset');
SELECT throws_ok(
	format('SELECT malachi.split_range(%s); UPDATE malachi.range_meta SET state = ''active'', sealed_at = NULL WHERE range_id = %s',
	       :one_tx_first, :one_tx_first),
	'MA011', NULL, 'run B: a sealed range cannot be reactivated');
-- and a valid batch in this transaction passes it
SELECT lives_ok(
	format('SELECT malachi.split_range(%s); SELECT malachi.merge_ranges(l, r) FROM (SELECT max(range_id) - 1 AS l, max(range_id) AS r FROM malachi.range_meta) x; SET CONSTRAINTS ALL IMMEDIATE',
	       :one_tx_first),
	'run B: a split and a merge back pass the deferred tiling check');
SELECT lives_ok('SET CONSTRAINTS ALL DEFERRED', 'deferred again');
SELECT is((SELECT count(*)::int FROM malachi.ranges WHERE topic = 'tiling_one_tx' AND state = 'active'),
          (SELECT count(*)::int FROM malachi.ranges WHERE topic = 'tiling_each' AND state = 'active'),
          'run B: the split and merge back left the active count unchanged');
SELECT is_empty($$SELECT * FROM pg_temp.tiling_problems('tiling_one_tx', true)$$,
                'run B: still tiled after the split and merge back');

SELECT * FROM finish();
ROLLBACK;

-- clean up the committed topics
DO $$ BEGIN
	PERFORM malachi.drop_topic(topic) FROM malachi.topic_meta
	  WHERE topic IN ('tiling_each', 'tiling_one_tx');
END $$;
