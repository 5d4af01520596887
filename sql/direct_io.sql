-- Large batches: a region of whole 4 kB blocks (fillers before and after the
-- batch), written with direct I/O; readers step over the fillers.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;
SET malachi.produce_mode = 'immediate';
SET malachi.direct_io = on;
SELECT malachi.create_topic('dio', 1) > 0 AS created;
SELECT r AS r FROM malachi.active_range_ids('dio') r \gset
CREATE TEMP VIEW edge AS
  SELECT h.visible_offset, h.visible_bytes, h.visible_bytes % 4096 = 0 AS on_block
    FROM malachi.segments s JOIN malachi.head_state() h USING (segment_id)
   WHERE s.range_id = :r AND s.state = 'active';
-- a big batch: 100 records of 1,000 bytes (about 102 kB)
CREATE TEMP TABLE big AS
  SELECT array_agg('k' || i ORDER BY i) AS keys,
         array_agg(repeat(chr(65 + i % 26), 1000) ORDER BY i) AS vals
    FROM generate_series(1, 100) i;

-- small batches leave the edge inside a block
SELECT malachi.produce_batch('dio', ARRAY['a', 'b'], ARRAY['x', 'y']::text[]);
SELECT * FROM edge;
-- a big one starts after a filler and ends on a block boundary
SELECT malachi.produce_batch('dio', keys, vals) FROM big;
SELECT * FROM edge;
-- a small one after it, then a big one again
SELECT malachi.produce('dio', 'c', 'z'::text) = :r AS produced;
SELECT malachi.produce_batch('dio', keys, vals) FROM big;
SELECT * FROM edge;
-- without direct I/O the region is not padded
SET malachi.direct_io = off;
SELECT malachi.produce_batch('dio', keys, vals) FROM big;
SELECT * FROM edge;
SET malachi.direct_io = on;
-- a transactional big batch is padded too
SET malachi.produce_mode = 'transactional';
BEGIN;
SELECT malachi.produce_batch('dio', keys, vals) FROM big;
COMMIT;
SELECT * FROM edge;
-- an aborted one burns its offsets, its region stays padded
BEGIN;
SELECT malachi.produce_batch('dio', keys, vals) FROM big;
ROLLBACK;
SELECT malachi.produce('dio', 'd', 'w'::text) = :r AS produced;
SELECT * FROM edge;

-- every record reads back at a dense offset, fillers and the void batch skipped
SELECT count(*) AS records, min("offset"), max("offset"),
       count(*) FILTER (WHERE key LIKE 'k%' AND
                        value = convert_to(repeat(chr(65 + substr(key, 2)::int % 26), 1000), 'UTF8')) AS big_values_intact
  FROM malachi.read(:r, 0, 10000);
SELECT array_agg("offset" ORDER BY "offset") FILTER (WHERE key NOT LIKE 'k%') AS small_offsets
  FROM malachi.read(:r, 0, 10000);
-- reading from inside a big batch
SELECT "offset", key FROM malachi.read(:r, 150, 3);

-- the sealed segment's scan (its trailer after the last filler) agrees
SELECT malachi.roll(:r) > 0 AS rolled;
SELECT seq, state, end_offset, byte_size % 4096 AS byte_size_mod_4096
  FROM malachi.segments WHERE range_id = :r ORDER BY seq;
SELECT count(*) AS records_after_roll FROM malachi.read(:r, 0, 10000);
SELECT malachi.drop_topic('dio');
