-- transactional produce: records are readable if and only if their
-- transaction commits, in commit order
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
SHOW malachi.produce_mode;

SELECT malachi.create_topic('tx', 2) AS root \gset
SELECT malachi.create_topic('tx2') AS root2 \gset
CREATE VIEW everything AS
	SELECT r.topic, x.range_id - CASE r.topic WHEN 'tx' THEN :root ELSE :root2 END AS rel_range,
	       x."offset", x.key, convert_from(x.value, 'UTF8') AS value
	  FROM malachi.ranges r, malachi.read(r.range_id, 0, 1000) x
	 WHERE r.state = 'active'
	 ORDER BY 1, 2, 3;

-- rollback leaves nothing
BEGIN;
SELECT malachi.produce('tx', 'a', 'rolled back'::text) IS NOT NULL AS produced;
SELECT malachi.produce_batch('tx', ARRAY['b', 'c'], ARRAY['rolled', 'back']) AS buffered;
-- nothing is readable inside the transaction either: it is appended at commit
SELECT count(*) AS visible_before_commit FROM everything;
ROLLBACK;
SELECT count(*) AS after_rollback FROM everything;
SELECT count(*) AS no_segment_opened FROM malachi.segments;

-- commit makes everything visible, in the order produced
BEGIN;
SELECT malachi.produce('tx', 'a', 'a1'::text) = malachi.route('tx', 'a') AS returns_owner;
SELECT malachi.produce_batch('tx', ARRAY['a', 'b', 'c'], ARRAY['a2', 'b1', 'c1']);
SELECT malachi.produce('tx', NULL, 'null key'::text) IS NULL AS null_key_range_chosen_at_commit;
COMMIT;
SELECT * FROM everything;

-- a savepoint rolled back discards only its records
BEGIN;
SELECT malachi.produce('tx', 'a', 'kept 1'::text) IS NOT NULL AS p;
SAVEPOINT s1;
SELECT malachi.produce('tx', 'a', 'discarded'::text) IS NOT NULL AS p;
SAVEPOINT s2;
SELECT malachi.produce('tx', 'a', 'discarded too'::text) IS NOT NULL AS p;
ROLLBACK TO SAVEPOINT s1;
SELECT malachi.produce('tx', 'a', 'kept 2'::text) IS NOT NULL AS p;
SAVEPOINT s3;
SELECT malachi.produce('tx', 'a', 'kept 3'::text) IS NOT NULL AS p;
RELEASE SAVEPOINT s3;
COMMIT;
SELECT "offset", value FROM everything WHERE topic = 'tx' AND key = 'a' ORDER BY "offset";
-- an inner savepoint released, then its outer one rolled back: both go
BEGIN;
SELECT malachi.produce('tx', 'n', 'kept 1'::text) IS NOT NULL AS p;
SAVEPOINT outer_sp;
SELECT malachi.produce('tx', 'n', 'outer, discarded'::text) IS NOT NULL AS p;
SAVEPOINT inner_sp;
SELECT malachi.produce('tx', 'n', 'inner, released, discarded'::text) IS NOT NULL AS p;
RELEASE SAVEPOINT inner_sp;
SELECT malachi.produce('tx', 'n', 'outer again, discarded'::text) IS NOT NULL AS p;
ROLLBACK TO SAVEPOINT outer_sp;
SAVEPOINT again;
SELECT malachi.produce('tx', 'n', 'kept 2'::text) IS NOT NULL AS p;
RELEASE SAVEPOINT again;
RELEASE SAVEPOINT outer_sp;
COMMIT;
SELECT "offset", value FROM everything WHERE topic = 'tx' AND key = 'n' ORDER BY "offset";
-- an EXCEPTION block around each produce, every third one failing: the
-- others are kept, in order
BEGIN;
DO $$
BEGIN
	FOR i IN 1 .. 600 LOOP
		BEGIN
			PERFORM malachi.produce('tx', 'e', i::text);
			IF i % 3 = 0 THEN
				RAISE EXCEPTION 'fail %', i;
			END IF;
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
	END LOOP;
END $$;
COMMIT;
SELECT count(*) AS kept, count(*) FILTER (WHERE value::int % 3 = 0) AS failed_kept,
	   bool_and(value::int > prev) AS in_order
  FROM (SELECT value, lag(value::int, 1, 0) OVER (ORDER BY "offset") AS prev
		  FROM everything WHERE topic = 'tx' AND key = 'e') x;

-- records dropped by a rollback to a savepoint give their memory back at
-- once: a retry loop of 100 x 500 kB under a 2 MB limit stays small (it
-- grew by each record's size, to about 50 MB)
SET malachi.max_transaction_bytes = '2MB';
BEGIN;
DO $$
BEGIN
	FOR i IN 1 .. 100 LOOP
		BEGIN
			PERFORM malachi.produce('tx', 'k', repeat('r', 500000));
			RAISE EXCEPTION 'retry';
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
	END LOOP;
END $$;
SELECT sum(total_bytes) < 8 * 1024 * 1024 AS bounded
  FROM pg_backend_memory_contexts WHERE name = 'malachi pending records';
ROLLBACK;
RESET malachi.max_transaction_bytes;

-- several topics and ranges: all or nothing
BEGIN;
SELECT malachi.produce_batch('tx', ARRAY['a', 'b', 'c', 'd'], ARRAY['x1', 'x2', 'x3', 'x4']);
SELECT malachi.produce('tx2', 'k', 'x5'::text) IS NOT NULL AS p;
ROLLBACK;
SELECT count(*) AS none_of_x FROM everything WHERE value LIKE 'x%';
BEGIN;
SELECT malachi.produce_batch('tx', ARRAY['a', 'b', 'c', 'd'], ARRAY['y1', 'y2', 'y3', 'y4']);
SELECT malachi.produce('tx2', 'k', 'y5'::text) IS NOT NULL AS p;
COMMIT;
SELECT topic, count(*) AS all_of_y FROM everything WHERE value LIKE 'y%' GROUP BY topic ORDER BY topic;
-- topics interleaved: each topic's records keep the order they were produced in
BEGIN;
SELECT malachi.produce('tx2', 'k', 'z1'::text) IS NULL AS p1,
       malachi.produce('tx', 'q', 'z2'::text) IS NULL AS p2;
SELECT malachi.produce_batch('tx2', ARRAY['k', 'k'], ARRAY['z3', 'z4']) IS NULL AS p3;
SELECT malachi.produce('tx', 'q', 'z5'::text) IS NULL AS p5,
       malachi.produce('tx2', 'k', 'z6'::text) IS NULL AS p6;
COMMIT;
SELECT topic, string_agg(value, ',' ORDER BY "offset") AS in_order
  FROM everything WHERE value LIKE 'z%' GROUP BY topic ORDER BY topic;

-- NULL keys: each call takes the next range, as in immediate mode (the
-- range is chosen at commit, so the call returns NULL); the records of
-- one produce_batch call share one range
BEGIN;
SELECT malachi.produce('tx', NULL, 'n1'::text) IS NULL AS chosen_at_commit;
SELECT malachi.produce('tx', NULL, 'n2'::text) IS NULL AS chosen_at_commit;
SELECT malachi.produce_batch('tx', ARRAY[NULL, NULL], ARRAY['n3', 'n3']);
COMMIT;
SELECT count(DISTINCT rel_range) AS ranges_used FROM everything WHERE value IN ('n1', 'n2');
SELECT count(DISTINCT rel_range) AS ranges_used FROM everything WHERE value = 'n3';

-- a failure after the records were appended (at pre-commit) voids them:
-- readers skip them, their offsets are not reused
SET malachi.inject_wait = 'fail-after-flush';
BEGIN;
SELECT malachi.produce_batch('tx', ARRAY['a', 'b'], ARRAY['voided 1', 'voided 2']);
COMMIT;
RESET malachi.inject_wait;
SELECT count(*) AS voided_visible FROM everything WHERE value LIKE 'voided%';
SELECT malachi.produce('tx', 'a', 'after the void'::text) IS NOT NULL AS p;
SELECT "offset", value FROM everything WHERE topic = 'tx' AND key = 'a' ORDER BY "offset" DESC LIMIT 2;
-- the void is made durable when the head is sealed; it still reads the same
SELECT malachi.roll(malachi.route('tx', 'a')) IS NOT NULL AS rolled;
SELECT "offset", value FROM everything WHERE topic = 'tx' AND key = 'a' ORDER BY "offset" DESC LIMIT 2;

-- immediate mode ignores the transaction's fate, also per transaction
BEGIN;
SET LOCAL malachi.produce_mode = immediate;
SELECT malachi.produce('tx', 'i', 'immediate, rolled back'::text) IS NOT NULL AS p;
SELECT count(*) AS visible_at_once FROM everything WHERE key = 'i';
ROLLBACK;
SELECT count(*) AS still_there FROM everything WHERE key = 'i';
SHOW malachi.produce_mode;

-- refusals
BEGIN;
SELECT malachi.produce('tx', 'p', 'prepared'::text) IS NOT NULL AS p;
PREPARE TRANSACTION 'malachi_tx';
SELECT count(*) AS nothing_prepared FROM pg_prepared_xacts;
SET malachi.max_transaction_bytes = '4kB';
BEGIN;
SELECT malachi.produce('tx', 'big', repeat('x', 3000)) IS NOT NULL AS p;
SELECT malachi.produce('tx', 'big', repeat('x', 3000)) IS NOT NULL AS p;
ROLLBACK;
RESET malachi.max_transaction_bytes;
BEGIN;
SELECT malachi.create_topic('brand_new') > 0 AS created;
SELECT malachi.produce('brand_new', 'k', 'v'::text);
ROLLBACK;
-- a change rolled back to a savepoint is undone: producing is allowed
BEGIN;
SAVEPOINT s;
SELECT malachi.create_topic('brand_new') > 0 AS created;
ROLLBACK TO SAVEPOINT s;
SELECT malachi.produce('tx', 'k', 'after rollback to savepoint'::text) IS NOT NULL AS produced;
COMMIT;
SELECT count(*) AS brand_new_gone FROM malachi.topic_meta WHERE topic = 'brand_new';
SELECT malachi.produce('nope', 'k', 'v'::text);
BEGIN READ ONLY;
SELECT malachi.produce('tx', 'k', 'read only'::text);
ROLLBACK;
-- metadata changed after producing: the commit fails and rolls back
BEGIN;
SELECT malachi.produce('tx2', 'k', 'orphan'::text) IS NOT NULL AS p;
SELECT malachi.drop_topic('tx2');
COMMIT;
SELECT count(*) AS tx2_still_there FROM malachi.topic_meta WHERE topic = 'tx2';
SELECT count(*) AS no_orphan FROM everything WHERE value = 'orphan';

-- records produced only in a rolled-back savepoint: the commit appends
-- nothing, and opens no segment
SELECT malachi.create_topic('tx3') AS root3 \gset
BEGIN;
SAVEPOINT s;
SELECT malachi.produce('tx3', 'k', 'gone'::text) IS NOT NULL AS p;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) AS tx3_segments FROM malachi.segments WHERE range_id = :root3;

-- PREPARE is refused while records are buffered, inside a savepoint too;
-- not once a rollback to a savepoint dropped them all, nor for immediate
-- records (appended at once, whatever becomes of the transaction)
BEGIN;
SAVEPOINT s;
SELECT malachi.produce('tx', 'p', 'in a savepoint'::text) IS NOT NULL AS p;
PREPARE TRANSACTION 'malachi_tx2';
BEGIN;
SAVEPOINT s;
SELECT malachi.produce('tx', 'p', 'dropped'::text) IS NOT NULL AS p;
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'malachi_tx3';
BEGIN;
SET LOCAL malachi.produce_mode = 'immediate';
SELECT malachi.produce('tx', 'p', 'immediate'::text) IS NOT NULL AS p;
PREPARE TRANSACTION 'malachi_tx4';
SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'malachi%' ORDER BY gid;
ROLLBACK PREPARED 'malachi_tx3';
ROLLBACK PREPARED 'malachi_tx4';
SELECT value FROM everything WHERE key = 'p' ORDER BY "offset";

-- a deferred constraint trigger that produces: its records are appended
-- at the commit, which fires it before malachi appends
CREATE TABLE outbox (id int);
CREATE FUNCTION outbox_produce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM malachi.produce('tx', 'outbox', 'from the trigger, row ' || NEW.id);
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER outbox_produce AFTER INSERT ON outbox
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox_produce();
BEGIN;
INSERT INTO outbox VALUES (1), (2);
SELECT count(*) AS nothing_yet FROM everything WHERE key = 'outbox';
COMMIT;
SELECT value FROM everything WHERE key = 'outbox' ORDER BY "offset";
DROP TABLE outbox;
DROP FUNCTION outbox_produce();

-- a pre-commit callback of another library called after malachi's (failure
-- point produce-late stands in for one) cannot produce transactionally: the
-- commit fails, and the transaction's own record is void with it (before:
-- the commit succeeded, and the late record was silently dropped)
SELECT malachi.create_topic('late') AS late \gset
BEGIN;
SET LOCAL malachi.inject_wait = 'produce-late';
SELECT malachi.produce('tx', 'before-late', 'mine'::text) IS NOT NULL AS buffered;
COMMIT;
SELECT count(*) AS late_records FROM malachi.read(:late, 0, 10);
SELECT count(*) AS mine_records FROM everything WHERE key = 'before-late';
SELECT malachi.drop_topic('late');

DROP VIEW everything;
SELECT malachi.drop_topic('tx'), malachi.drop_topic('tx2'), malachi.drop_topic('tx3');
