-- a full disk: the failing produce gets disk_full (53100), nothing acknowledged
-- is lost, the head stays consistent, and producing works once space is back
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
-- this file tests immediate produce (durable at the call), then at its end
-- a transactional commit that does not fit
SET malachi.produce_mode = immediate;

-- produce one record; a full disk is reported with its SQLSTATE
CREATE FUNCTION produce_until_full(topic text, value text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM malachi.produce(topic, 'k', value);
	RETURN 'produced';
EXCEPTION WHEN disk_full THEN
	RETURN format('%s (%s)', regexp_replace(SQLERRM, 'segment \d+', 'segment N'), SQLSTATE);
END $$;

SELECT malachi.create_topic('df') AS r \gset
SELECT malachi.produce('df', 'k', 'before the disk filled'::text) = :r AS produced;
SELECT byte_size AS size FROM malachi.segments WHERE range_id = :r \gset

-- the next batch does not fit: this session's disk is "full" past :size + 10
SELECT set_config('malachi.inject_disk_limit', (:size + 10)::text, false) IS NOT NULL AS limited;
SELECT produce_until_full('df', 'does not fit');
-- the head was fenced at the last good batch; sealing it needs space too
DO $$
BEGIN
	PERFORM malachi.produce_batch('df', ARRAY['k', 'k'], ARRAY['still', 'full']);
EXCEPTION WHEN disk_full THEN
	RAISE NOTICE 'produce_batch: % (%)', regexp_replace(SQLERRM, 'segment \d+', 'segment N'), SQLSTATE;
END $$;
SELECT "offset", convert_from(value, 'UTF8') AS value FROM malachi.read(:r, 0, 10);

-- space is back: the fenced head is sealed where it was, a new head opens
RESET malachi.inject_disk_limit;
SELECT malachi.produce('df', 'k', 'after space came back'::text) = :r AS produced;
SELECT "offset", convert_from(value, 'UTF8') AS value FROM malachi.read(:r, 0, 10);
SELECT seq, base_offset, end_offset, state, byte_size = :size AS sealed_at_last_good_batch
  FROM malachi.segments WHERE range_id = :r ORDER BY seq;

SELECT malachi.drop_topic('df');

-- the disk fills in the middle of a large batch written through the page
-- cache, after its first piece (up to the file's first 256 kB boundary)
-- was written: still disk_full, the batch is not part of the log (the head
-- is fenced at the last good batch), and producing works once space is
-- back.  (Tests run with fsync = off, so no writeback is started here.)
SELECT malachi.create_topic('dc') AS r \gset
SELECT malachi.produce('dc', 'k', 'small'::text) = :r AS produced;
SELECT byte_size AS size FROM malachi.segments WHERE range_id = :r \gset
SELECT set_config('malachi.inject_disk_limit', (:size + 300000)::text, false) IS NOT NULL AS limited;
SELECT produce_until_full('dc', repeat('x', 600000));
RESET malachi.inject_disk_limit;
SELECT malachi.produce('dc', 'k', repeat('y', 600000)) = :r AS produced;
SELECT "offset", left(convert_from(value, 'UTF8'), 5) AS value, length(value)
  FROM malachi.read(:r, 0, 10);
SELECT seq, base_offset, end_offset, state, byte_size = :size AS sealed_at_last_good_batch
  FROM malachi.segments WHERE range_id = :r ORDER BY seq;
SELECT malachi.drop_topic('dc');

-- with direct I/O a batch of 64 kB or more is written with O_DIRECT, and
-- the disk fills part way through it: the kernel writes whole blocks, then
-- fails.  Still disk_full (was 58030, "wrote 8192 of ... bytes"), the head
-- is fenced at the last good batch, and producing works once space is back
SET malachi.direct_io = on;
SELECT malachi.create_topic('dd') AS r \gset
SELECT malachi.produce('dd', 'k', 'small'::text) = :r AS produced;
SELECT set_config('malachi.inject_disk_limit', '12288', false) IS NOT NULL AS limited;
SELECT produce_until_full('dd', repeat('x', 100000));
RESET malachi.inject_disk_limit;
SELECT malachi.produce('dd', 'k', repeat('y', 100000)) = :r AS produced;
SELECT "offset", length(value) FROM malachi.read(:r, 0, 10);
SELECT seq, state FROM malachi.segments WHERE range_id = :r ORDER BY seq;
RESET malachi.direct_io;
SELECT malachi.drop_topic('dd');

-- transactional: the commit appends one batch per topic (per range), in
-- the order first produced; when a later one does not fit, COMMIT fails
-- with disk_full, and the batches already appended are void: never read,
-- their offsets burned.  Once space is back the retry commits once.
SET malachi.produce_mode = transactional;
SELECT malachi.create_topic('ta') AS ra \gset
SELECT malachi.create_topic('tb') AS rb \gset
SELECT malachi.produce('ta', 'k', 'a0'::text) = :ra AS produced;
SELECT malachi.produce('tb', 'k', 'b0'::text) = :rb AS produced;
SELECT max(byte_size) AS size FROM malachi.segments WHERE range_id IN (:ra, :rb) \gset
SELECT set_config('malachi.inject_disk_limit', (:size + 500)::text, false) IS NOT NULL AS limited;
BEGIN;
SELECT malachi.produce('ta', 'k', 'a1, fits'::text) = :ra AS buffered;
SELECT malachi.produce('tb', 'k', repeat('b', 2000)) = :rb AS buffered;
\set VERBOSITY sqlstate
COMMIT;
\set VERBOSITY default
RESET malachi.inject_disk_limit;
SELECT "offset", convert_from(value, 'UTF8') AS value FROM malachi.read(:ra, 0, 10);
SELECT "offset", length(value) FROM malachi.read(:rb, 0, 10);
BEGIN;
SELECT malachi.produce('ta', 'k', 'a1, again'::text) = :ra AS buffered;
SELECT malachi.produce('tb', 'k', repeat('b', 2000)) = :rb AS buffered;
COMMIT;
SELECT "offset", convert_from(value, 'UTF8') AS value FROM malachi.read(:ra, 0, 10);
SELECT "offset", length(value) FROM malachi.read(:rb, 0, 10);
RESET malachi.produce_mode;
SELECT malachi.drop_topic('ta'), malachi.drop_topic('tb');
DROP FUNCTION produce_until_full(text, text);
