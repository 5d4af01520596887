-- a full disk: the failing produce gets disk_full (53100), nothing acknowledged
-- is lost, the head stays consistent, and producing works once space is back
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
-- this file tests immediate produce (durable at the call); see transactional.sql
SET malachi.produce_mode = immediate;

SELECT malachi.create_topic('df') AS r \gset
SELECT malachi.produce('df', 'k', 'before the disk filled'::text) = :r AS produced;
SELECT byte_size AS size FROM malachi.segments WHERE range_id = :r \gset

-- the next batch does not fit: this session's disk is "full" past :size + 10
SELECT set_config('malachi.inject_disk_limit', (:size + 10)::text, false) IS NOT NULL AS limited;
DO $$
BEGIN
	PERFORM malachi.produce('df', 'k', 'does not fit'::text);
EXCEPTION WHEN disk_full THEN
	RAISE NOTICE 'produce: % (%)', regexp_replace(SQLERRM, 'segment \d+', 'segment N'), SQLSTATE;
END $$;
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

-- with direct I/O a batch of 64 kB or more is written with O_DIRECT, and
-- the disk fills part way through it: the kernel writes whole blocks, then
-- fails.  Still disk_full (was 58030, "wrote 8192 of ... bytes"), the head
-- is fenced at the last good batch, and producing works once space is back
SET malachi.direct_io = on;
SELECT malachi.create_topic('dd') AS r \gset
SELECT malachi.produce('dd', 'k', 'small'::text) = :r AS produced;
SELECT set_config('malachi.inject_disk_limit', '12288', false) IS NOT NULL AS limited;
DO $$
BEGIN
	PERFORM malachi.produce('dd', 'k', repeat('x', 100000));
EXCEPTION WHEN disk_full THEN
	RAISE NOTICE 'produce: % (%)', regexp_replace(SQLERRM, 'segment \d+', 'segment N'), SQLSTATE;
END $$;
RESET malachi.inject_disk_limit;
SELECT malachi.produce('dd', 'k', repeat('y', 100000)) = :r AS produced;
SELECT "offset", length(value) FROM malachi.read(:r, 0, 10);
SELECT seq, state FROM malachi.segments WHERE range_id = :r ORDER BY seq;
RESET malachi.direct_io;
SELECT malachi.drop_topic('dd');
