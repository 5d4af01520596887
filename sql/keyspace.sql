-- keyspace: the key hash is part of the contract; these values never change
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS malachi;
RESET client_min_messages;
CREATE EXTENSION malachi;

-- golden values (MurmurHash3 x86_32, seed 0, over UTF-8 bytes)
SELECT k, malachi.key_hash(k)
  FROM unnest(ARRAY['', 'a', 'ab', 'abc', 'abcd', 'hello', 'Hello, world!',
                    'The quick brown fox jumps over the lazy dog',
                    'order-42', 'customer:1001']) AS k;

-- non-ASCII keys hash their UTF-8 bytes
SELECT malachi.key_hash('café') AS cafe, malachi.key_hash('日本') AS nihon;

-- the hash is a bigint in [0, 2^32)
SELECT min(h) >= 0 AS nonneg, max(h) < 4294967296 AS below_2_32, count(DISTINCT h) AS distinct_hashes
  FROM (SELECT malachi.key_hash('key-' || i) AS h FROM generate_series(1, 10000) i) s;

-- a long key
SELECT malachi.key_hash(repeat('x', 100000));

-- NULL in, NULL out (a NULL key has no hash)
SELECT malachi.key_hash(NULL) IS NULL AS null_hash;
