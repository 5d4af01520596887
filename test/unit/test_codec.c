/*-------------------------------------------------------------------------
 *
 * test_codec.c
 *	  Unit tests of src/store/codec.c: the batch and trailer encoding.
 *
 * A plain C program linked with codec.c, libzstd and PostgreSQL's libpgport
 * (for CRC32C) that prints TAP; see tap.h.  Every decode works on a
 * malloc'd copy of exactly the bytes it is given, so the sanitizers of the
 * unit build catch any read past the end.
 *
 * The golden bytes below pin the on-disk format, and their CRCs are
 * checked against an independent bitwise CRC32C.  Never "fix" a golden
 * value to make a test pass: a change there is a format change.
 *
 *-------------------------------------------------------------------------
 */
#include "c.h"

#include <zstd.h>

#include "codec.h"
#include "tap.h"

#define MIB		(1024 * 1024)
#define AAAA	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* A decode of some bytes, from header to records; see decode_all(). */
typedef struct Decoded
{
	CodecResult result;			/* first failure, or CODEC_OK */
	CodecHeader header;
	CodecRecord *records;		/* header.record_count of them */
	char	   *copy;			/* the input, exactly len bytes */
	char	   *scratch;		/* raw_len bytes for zstd */
} Decoded;

static uint64 rng_state = 0x9e3779b97f4a7c15ULL;

/*---- helpers ----*/

/* xorshift64*: a fixed pseudo-random sequence. */
static uint64
rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

/* malloc that cannot fail quietly; never returns NULL for size 0. */
static void *
xmalloc(size_t size)
{
	void	   *p = malloc(size > 0 ? size : 1);

	if (p == NULL)
	{
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

/* A record of C strings (NULL for a NULL field). */
static CodecRecord
rec(const char *key, const char *value, const char *headers, int64 ts)
{
	CodecRecord r;

	r.key = key;
	r.key_len = key ? (uint32) strlen(key) : 0;
	r.value = value;
	r.value_len = value ? (uint32) strlen(value) : 0;
	r.headers = headers;
	r.headers_len = headers ? (uint32) strlen(headers) : 0;
	r.timestamp = ts;
	return r;
}

/* Do two fields hold the same bytes (and the same NULL-ness)? */
static bool
field_eq(const char *a, uint32 alen, const char *b, uint32 blen)
{
	if (a == NULL || b == NULL)
		return a == b;
	return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

/* Do two record arrays hold the same records? */
static bool
records_eq(const CodecRecord *a, const CodecRecord *b, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (!field_eq(a[i].key, a[i].key_len, b[i].key, b[i].key_len) ||
			!field_eq(a[i].value, a[i].value_len, b[i].value, b[i].value_len) ||
			!field_eq(a[i].headers, a[i].headers_len,
					  b[i].headers, b[i].headers_len) ||
			a[i].timestamp != b[i].timestamp)
			return false;
	return true;
}

/* Encode into a malloc'd buffer of exactly CodecBatchBound bytes. */
static CodecResult
encode(const CodecRecord *records, int n, int codec, char **out,
	   size_t *len)
{
	size_t		cap = CodecBatchBound(records, n, codec);

	*out = xmalloc(cap);
	return CodecEncodeBatch(records, n, 1000, 77, codec, 3, *out, cap, len);
}

/*
 * Decode len bytes the way a reader of segment segment_id does: header,
 * CRC, records.  The bytes are copied to a buffer of exactly len bytes
 * first.
 */
static Decoded
decode_in(const char *buf, size_t len, int64 segment_id)
{
	Decoded		d;

	memset(&d, 0, sizeof(d));
	d.copy = xmalloc(len);
	if (len > 0)
		memcpy(d.copy, buf, len);
	d.result = CodecDecodeHeader(d.copy, len, &d.header);
	if (d.result == CODEC_OK)
		d.result = CodecCheckBatch(d.copy, len, &d.header, segment_id);
	if (d.result == CODEC_OK)
	{
		d.records = xmalloc(sizeof(CodecRecord) * d.header.record_count);
		d.scratch = xmalloc(d.header.raw_len);
		d.result = CodecDecodeRecords(&d.header, d.copy + CODEC_HEADER_SIZE,
									  d.scratch, d.header.raw_len,
									  d.records);
	}
	return d;
}

/* decode_in for a batch that was encoded and not placed: segment 0. */
static Decoded
decode_all(const char *buf, size_t len)
{
	return decode_in(buf, len, 0);
}

/* Release what decode_all allocated. */
static void
decoded_free(Decoded *d)
{
	free(d->records);
	free(d->copy);
	free(d->scratch);
}

/* Encode with codec, decode, compare; the stored codec goes to *stored. */
static bool
round_trip(const CodecRecord *records, int n, int codec, int *stored)
{
	char	   *buf;
	size_t		len;
	Decoded		d;
	bool		good;

	good = encode(records, n, codec, &buf, &len) == CODEC_OK;
	d = decode_all(buf, len);
	good = good && d.result == CODEC_OK &&
		d.header.record_count == (uint32) n &&
		len == CODEC_HEADER_SIZE + d.header.payload_len &&
		d.header.raw_len == CodecRawSize(records, n) &&
		records_eq(records, d.records, n);
	if (!good)
		printf("# decode: %s\n", CodecResultString(d.result));
	*stored = d.header.codec;
	decoded_free(&d);
	free(buf);
	return good;
}

/* Bitwise CRC32C (Castagnoli, reflected), independent of pg_crc32c. */
static uint32
crc32c_bitwise(uint32 crc, const unsigned char *p, size_t n)
{
	size_t		i;
	int			k;

	for (i = 0; i < n; i++)
	{
		crc ^= p[i];
		for (k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
	}
	return crc;
}

/* The CRC32C of a trailer's bytes [0,60), computed bit by bit. */
static uint32
expected_crc(const char *trailer)
{
	uint32		crc = 0xFFFFFFFFu;

	crc = crc32c_bitwise(crc, (const unsigned char *) trailer, 60);
	return crc ^ 0xFFFFFFFFu;
}

/*
 * The header CRC32C of a batch of segment segment_id, computed bit by bit:
 * over the id (8 bytes, little-endian), then header bytes [0,60).
 */
static uint32
expected_batch_crc(const char *batch, int64 segment_id)
{
	unsigned char id[8];
	uint32		crc = 0xFFFFFFFFu;
	int			i;

	for (i = 0; i < 8; i++)
		id[i] = (unsigned char) ((uint64) segment_id >> (8 * i));
	crc = crc32c_bitwise(crc, id, sizeof(id));
	crc = crc32c_bitwise(crc, (const unsigned char *) batch, 60);
	return crc ^ 0xFFFFFFFFu;
}

/* The payload CRC32C of a batch, computed bit by bit. */
static uint32
expected_payload_crc(const char *batch, size_t payload_len)
{
	uint32		crc = 0xFFFFFFFFu;

	crc = crc32c_bitwise(crc, (const unsigned char *) batch + 64, payload_len);
	return crc ^ 0xFFFFFFFFu;
}

/*
 * CodecCrc32c against the bitwise CRC: lengths on both sides of the
 * three-stripe rounds (1024-byte stripes on x86-64) and of the tail, at
 * every alignment of the start, over bytes that are not a repeating pattern
 * of any stripe's length.
 */
static void
test_crc_lengths(void)
{
	static const size_t lengths[] = {
		0, 1, 7, 8, 9, 1024, 3071, 3072, 3073, 3080, 6143, 6144, 6145,
		5 * 3072 + 13, 65536 + 5, 1048576 + 3
	};
	size_t		cap = 1048576 + 3 + 8;
	unsigned char *buf = malloc(cap);
	uint32		x = 2463534242u;
	int			bad = 0;
	size_t		i;
	int			off;

	for (i = 0; i < cap; i++)
	{
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (unsigned char) x;
	}
	for (i = 0; i < lengthof(lengths); i++)
		for (off = 0; off < 8; off += (lengths[i] > 65536 ? 7 : 1))
		{
			uint32		want = crc32c_bitwise(0xFFFFFFFFu, buf + off,
											  lengths[i]) ^ 0xFFFFFFFFu;

			if (CodecCrc32c(buf + off, lengths[i]) != want)
			{
				printf("# CodecCrc32c differs at length %zu, offset %d\n",
					   lengths[i], off);
				bad++;
			}
		}
	ok(bad == 0,
	   "CodecCrc32c: the bitwise CRC32C at lengths and alignments around the stripes");
	/* The standard check value of CRC-32C */
	ok(CodecCrc32c("123456789", 9) == 0xE3069283u,
	   "CodecCrc32c: \"123456789\" gives 0xE3069283");
	free(buf);
}

/* Little-endian 32-bit store, for forging headers. */
static void
poke_u32(char *p, uint32 v)
{
	p[0] = (char) v;
	p[1] = (char) (v >> 8);
	p[2] = (char) (v >> 16);
	p[3] = (char) (v >> 24);
}

/* Little-endian 32-bit load. */
static uint32
peek_u32(const char *p)
{
	const unsigned char *b = (const unsigned char *) p;

	return b[0] | (b[1] << 8) | (b[2] << 16) | ((uint32) b[3] << 24);
}

/* Recompute the CRC of a forged batch or trailer (payload_len 0). */
static void
fix_crc(char *buf, size_t payload_len)
{
	if (memcmp(buf, "MLCB", 4) == 0)
	{
		poke_u32(buf + 56, expected_payload_crc(buf, payload_len));
		poke_u32(buf + 60, expected_batch_crc(buf, 0));
	}
	else
		poke_u32(buf + 60, expected_crc(buf));
}

/* Lower-case hex of n bytes into a malloc'd string. */
static char *
to_hex(const char *p, size_t n)
{
	char	   *s = xmalloc(2 * n + 1);
	size_t		i;

	for (i = 0; i < n; i++)
		sprintf(s + 2 * i, "%02x", (unsigned char) p[i]);
	s[2 * n] = '\0';
	return s;
}

/* A few mixed records: NULL and empty fields of every kind. */
static int
mixed_records(CodecRecord *r)
{
	r[0] = rec("user-1", "{\"a\":1}", "{\"h\":\"x\"}", 700);
	r[1] = rec(NULL, "no key", NULL, 500);
	r[2] = rec("k", NULL, "{}", 900);	/* NULL value: a tombstone */
	r[3] = rec("", "", "", -5);
	r[4] = rec(NULL, NULL, NULL, 0);
	return 5;
}

/* n bytes of incompressible data. */
static char *
random_bytes(size_t n)
{
	char	   *p = xmalloc(n);
	size_t		i;

	for (i = 0; i < n; i++)
		p[i] = (char) (rng_next() >> 56);
	return p;
}

/*---- round trips ----*/

/* Every kind of record survives both codecs. */
static void
test_round_trips(void)
{
	static const int codecs[] = {CODEC_NONE, CODEC_ZSTD};
	CodecRecord mixed[5];
	CodecRecord big[2];
	CodecRecord *many = xmalloc(sizeof(CodecRecord) * 1000);
	char	   *mib = xmalloc(MIB);
	char		names[1000][16];
	int			nmixed = mixed_records(mixed);
	int			stored;
	int			c;
	int			i;

	for (i = 0; i < MIB; i++)
		mib[i] = "abcdefgh"[(i / 3) % 8];
	big[0] = rec("big", NULL, NULL, 1);
	big[0].value = mib;
	big[0].value_len = MIB;
	big[1] = rec("after", "x", NULL, 2);
	for (i = 0; i < 1000; i++)
	{
		snprintf(names[i], sizeof(names[i]), "key-%d", i);
		many[i] = rec(names[i], names[i] + 4, i % 7 ? NULL : "{\"n\":1}",
					  (int64) 1700000000000000LL + i);
	}

	for (c = 0; c < 2; c++)
	{
		const char *name = codecs[c] == CODEC_NONE ? "none" : "zstd";

		ok(round_trip(mixed, nmixed, codecs[c], &stored),
		   "%s: NULL key, NULL value, NULL headers, empty fields", name);
		ok(round_trip(mixed, 1, codecs[c], &stored),
		   "%s: a single record", name);
		ok(round_trip(big, 2, codecs[c], &stored),
		   "%s: a 1 MiB value", name);
		ok(round_trip(many, 1000, codecs[c], &stored),
		   "%s: 1000 records", name);
	}

	free(mib);
	free(many);
}

/* zstd shrinks what compresses and falls back to raw for what does not. */
static void
test_compression_choice(void)
{
	CodecRecord r[200];
	char	   *noise = random_bytes(64 * 1024);
	char	   *buf;
	size_t		len;
	Decoded		d;
	int			stored;
	int			i;

	for (i = 0; i < 200; i++)
		r[i] = rec("sensor-17",
				   "{\"temperature\": 21.5, \"humidity\": 40, "
				   "\"status\": \"nominal\", \"site\": \"north\"}",
				   "{\"source\":\"test\"}", i);
	encode(r, 200, CODEC_ZSTD, &buf, &len);
	d = decode_all(buf, len);
	ok(d.result == CODEC_OK && d.header.codec == CODEC_ZSTD &&
	   d.header.payload_len * 10 < d.header.raw_len &&
	   len == CODEC_HEADER_SIZE + d.header.payload_len,
	   "compressible records shrink more than 10x with zstd (%u -> %u)",
	   d.header.raw_len, d.header.payload_len);
	decoded_free(&d);
	free(buf);

	encode(r, 200, CODEC_NONE, &buf, &len);
	d = decode_all(buf, len);
	ok(d.result == CODEC_OK && d.header.codec == CODEC_NONE &&
	   d.header.payload_len == d.header.raw_len,
	   "CODEC_NONE stores the records raw");
	decoded_free(&d);
	free(buf);

	r[0] = rec("noise", NULL, NULL, 1);
	r[0].value = noise;
	r[0].value_len = 64 * 1024;
	encode(r, 1, CODEC_ZSTD, &buf, &len);
	d = decode_all(buf, len);
	ok(d.result == CODEC_OK && d.header.codec == CODEC_NONE &&
	   d.header.payload_len == d.header.raw_len &&
	   len == CODEC_HEADER_SIZE + CodecRawSize(r, 1),
	   "incompressible records fall back to CODEC_NONE");
	decoded_free(&d);
	free(buf);

	r[0] = rec(NULL, NULL, NULL, 1);
	ok(round_trip(r, 1, CODEC_ZSTD, &stored) && stored == CODEC_NONE,
	   "a 20-byte batch asked for zstd is stored raw");
	free(noise);
}

/* The header says what was encoded. */
static void
test_header_fields(void)
{
	CodecRecord r[4];
	char	   *buf;
	size_t		cap;
	size_t		len;
	Decoded		d;

	r[0] = rec("a", "1", NULL, 5000);
	r[1] = rec("b", "2", NULL, 9000);
	r[2] = rec("c", "3", NULL, -3);
	r[3] = rec("d", "4", NULL, 8000);
	cap = CodecBatchBound(r, 4, CODEC_NONE);
	buf = xmalloc(cap);
	ok(CodecEncodeBatch(r, 4, INT64CONST(1234567890123),
						UINT64CONST(0xabcdef0123), CODEC_NONE, 0, buf, cap,
						&len) == CODEC_OK &&
	   len == cap, "encode fills exactly CodecBatchBound bytes with none");
	d = decode_all(buf, len);
	ok(d.result == CODEC_OK, "the batch decodes");
	ok(d.header.base_offset == INT64CONST(1234567890123), "base offset");
	ok(d.header.record_count == 4, "record count");
	ok(d.header.first_timestamp == 5000, "first timestamp is record 0's");
	ok(d.header.max_timestamp == 9000, "max timestamp is the largest");
	ok(d.header.xid == UINT64CONST(0xabcdef0123), "transaction id");
	ok(d.header.flags == 0, "flags are 0");
	ok(d.header.raw_len == CodecRawSize(r, 4) && d.header.raw_len == 4 * 22,
	   "raw length is CodecRawSize: 4 records of 22 bytes");
	ok(d.header.payload_crc == expected_payload_crc(buf, d.header.payload_len),
	   "the payload CRC is CRC32C of the payload");
	ok(d.header.crc == expected_batch_crc(buf, 0),
	   "the header CRC is CRC32C of the segment id (0 until placed) and header bytes [0,60)");
	decoded_free(&d);

	/* the header alone, as a walk over the headers checks it */
	{
		CodecHeader h;

		buf[CODEC_HEADER_SIZE + 3] ^= 0x01;		/* in the payload */
		ok(CodecDecodeHeader(buf, CODEC_HEADER_SIZE, &h) == CODEC_OK &&
		   CodecCheckHeader(buf, &h, 0) == CODEC_OK,
		   "CodecCheckHeader: a header checks whatever its payload holds");
		ok(CodecCheckHeader(buf, &h, 1) == CODEC_BAD_CRC,
		   "CodecCheckHeader: not as a header of another segment");
		buf[40] ^= 0x01;		/* its max timestamp */
		ok(CodecDecodeHeader(buf, CODEC_HEADER_SIZE, &h) == CODEC_OK &&
		   CodecCheckHeader(buf, &h, 0) == CODEC_BAD_CRC,
		   "CodecCheckHeader: a bit flipped in its max timestamp: BAD_CRC");
	}
	free(buf);
}

/*---- corruption ----*/

/* Any one bit flipped, or byte inverted, anywhere is rejected. */
static void
test_flips(const char *name, const CodecRecord *r, int n, int codec)
{
	char	   *buf;
	size_t		len;
	size_t		pos;
	int			bit;
	int			accepted = 0;
	Decoded		d;

	encode(r, n, codec, &buf, &len);
	d = decode_all(buf, len);
	ok(d.result == CODEC_OK && d.header.codec == codec,
	   "%s: the unflipped %zu-byte batch decodes", name, len);
	decoded_free(&d);

	for (pos = 0; pos < len; pos++)
		for (bit = 0; bit <= 8; bit++)
		{
			char		saved = buf[pos];

			buf[pos] ^= bit < 8 ? (char) (1 << bit) : (char) 0xff;
			d = decode_all(buf, len);
			if (d.result == CODEC_OK || d.result == CODEC_END ||
				d.result == CODEC_TRAILER)
			{
				accepted++;
				printf("# accepted a flip at byte %zu bit %d\n", pos, bit);
			}
			decoded_free(&d);
			buf[pos] = saved;
		}
	ok(accepted == 0, "%s: each of %zu single-bit flips and byte inversions "
	   "is rejected", name, len * 9);
	free(buf);
}

/* Every proper prefix of a batch is CODEC_SHORT. */
static void
test_truncation(const char *name, const CodecRecord *r, int n, int codec)
{
	char	   *buf;
	size_t		len;
	size_t		cut;
	int			bad = 0;
	Decoded		d;

	encode(r, n, codec, &buf, &len);
	for (cut = 0; cut < len; cut++)
	{
		d = decode_all(buf, cut);
		if (d.result != CODEC_SHORT)
		{
			bad++;
			printf("# %zu bytes: %s\n", cut, CodecResultString(d.result));
		}
		decoded_free(&d);
	}
	ok(bad == 0, "%s: all %zu truncations are CODEC_SHORT", name, len);
	free(buf);
}

/* A zeroed region is the end of data, not corruption. */
static void
test_zero_block(void)
{
	char		zero[100];
	CodecHeader h;

	memset(zero, 0, sizeof(zero));
	ok(CodecDecodeHeader(zero, 64, &h) == CODEC_END, "64 zero bytes: END");
	ok(CodecDecodeHeader(zero, 100, &h) == CODEC_END,
	   "a longer zero region: END");
	ok(CodecDecodeHeader(zero, 63, &h) == CODEC_SHORT,
	   "63 zero bytes: SHORT");
	zero[63] = 1;
	ok(CodecDecodeHeader(zero, 64, &h) == CODEC_BAD_MAGIC,
	   "zeros with one set byte: BAD_MAGIC");
}

/* Forge one header field of a valid batch; expect DecodeHeader's verdict. */
static void
check_forged(const char *base, int off, uint32 value, CodecResult expect,
			 const char *what)
{
	char		buf[CODEC_HEADER_SIZE];
	CodecHeader h;
	CodecResult r;

	memcpy(buf, base, CODEC_HEADER_SIZE);
	poke_u32(buf + off, value);
	fix_crc(buf, 0);
	r = CodecDecodeHeader(buf, sizeof(buf), &h);
	if (!ok(r == expect, "%s: %s", what, CodecResultString(expect)))
		printf("# got %s\n", CodecResultString(r));
}

/* Header sanity checks, each on its own. */
static void
test_header_checks(void)
{
	CodecRecord r[2];
	char	   *buf;
	size_t		len;
	uint32		word2;

	r[0] = rec("a", "b", NULL, 1);
	r[1] = rec("c", "d", NULL, 2);
	encode(r, 2, CODEC_NONE, &buf, &len);
	word2 = peek_u32(buf + 4);

	check_forged(buf, 0, 0x4342434d, CODEC_BAD_MAGIC, "magic MCBC");
	check_forged(buf, 4, (word2 & 0xffff0000) | 1, CODEC_BAD_VERSION,
				 "version 1 (a header CRC without the segment id)");
	check_forged(buf, 4, (word2 & 0xffff0000) | 3, CODEC_BAD_VERSION,
				 "version 3");
	check_forged(buf, 4, (word2 & 0xffff) | (2 << 16), CODEC_BAD_HEADER,
				 "codec 2");
	check_forged(buf, 8, 0, CODEC_BAD_HEADER, "record count 0");
	check_forged(buf, 8, 2, CODEC_OK, "record count 2 (the original)");
	check_forged(buf, 8, 44 / 20 + 1, CODEC_BAD_HEADER,
				 "raw length (44) below 20 bytes a record");
	check_forged(buf, 12, CODEC_FLAG_FILLER, CODEC_BAD_HEADER,
				 "flag FILLER on a batch of records");
	check_forged(buf, 12, 4, CODEC_BAD_HEADER, "unknown flag 0x4");
	check_forged(buf, 12, CODEC_FLAG_VOID, CODEC_OK, "flag VOID");
	check_forged(buf, 24, 45, CODEC_BAD_HEADER,
				 "payload length != raw length with none");
	check_forged(buf, 24, CODEC_MAX_PAYLOAD + 1, CODEC_BAD_HEADER,
				 "payload length over the maximum");
	check_forged(buf, 28, CODEC_MAX_PAYLOAD + 1, CODEC_BAD_HEADER,
				 "raw length over the maximum");
	free(buf);
}

/* Fillers: padding batches of no records that readers step over. */
static void
test_filler(void)
{
	char		buf[CODEC_HEADER_SIZE + 4096];
	Decoded		d;

	ok(CodecEncodeFiller(0, 500, buf, CODEC_HEADER_SIZE) == CODEC_OK,
	   "a filler of a bare header encodes");
	d = decode_all(buf, CODEC_HEADER_SIZE);
	ok(d.result == CODEC_OK && d.header.record_count == 0 &&
	   d.header.flags == CODEC_FLAG_FILLER && d.header.base_offset == 500 &&
	   d.header.payload_len == 0 && d.header.codec == CODEC_NONE,
	   "it decodes: no records, FILLER, the next offset, no payload");
	decoded_free(&d);

	ok(CodecEncodeFiller(0, 7, buf, sizeof(buf)) == CODEC_OK,
	   "a filler of a header and 4096 bytes encodes");
	d = decode_all(buf, sizeof(buf));
	ok(d.result == CODEC_OK && d.header.record_count == 0 &&
	   d.header.payload_len == 4096 && d.header.raw_len == 4096,
	   "it decodes with its payload length");
	decoded_free(&d);
	d = decode_all(buf, sizeof(buf) - 1);
	ok(d.result == CODEC_SHORT, "a truncated filler: SHORT");
	decoded_free(&d);
	buf[CODEC_HEADER_SIZE + 100] ^= 0x10;
	d = decode_all(buf, sizeof(buf));
	ok(d.result == CODEC_BAD_CRC, "a bit flipped in its payload: BAD_CRC");
	decoded_free(&d);
	ok(CodecEncodeFiller(0, 7, buf, CODEC_HEADER_SIZE - 1) == CODEC_BAD_HEADER,
	   "a filler shorter than a header is refused");

	CodecEncodeFiller(0, 7, buf, CODEC_HEADER_SIZE);
	check_forged(buf, 8, 1, CODEC_BAD_HEADER, "a filler with a record count");
	check_forged(buf, 4, peek_u32(buf + 4) | (CODEC_ZSTD << 16),
				 CODEC_BAD_HEADER, "a filler with codec zstd");
	check_forged(buf, 12, CODEC_FLAG_FILLER | CODEC_FLAG_VOID,
				 CODEC_BAD_HEADER, "a filler flagged VOID");
	check_forged(buf, 32, 1, CODEC_BAD_HEADER, "a filler with a timestamp");
	check_forged(buf, 48, 1, CODEC_BAD_HEADER,
				 "a filler with a transaction id");
	check_forged(buf, 16, 9, CODEC_OK, "a filler with another base offset");
}

/* Forge a CODEC_NONE batch around raw bytes; the records' verdict. */
static CodecResult
decode_forged_raw(const char *raw, uint32 raw_len, uint32 count)
{
	char	   *buf = xmalloc(CODEC_HEADER_SIZE + raw_len);
	CodecRecord r = rec(NULL, NULL, NULL, 0);
	char	   *tmp;
	size_t		len;
	Decoded		d;
	CodecResult result;

	/* take a real header and rewrite its count and lengths */
	encode(&r, 1, CODEC_NONE, &tmp, &len);
	memcpy(buf, tmp, CODEC_HEADER_SIZE);
	free(tmp);
	memcpy(buf + CODEC_HEADER_SIZE, raw, raw_len);
	poke_u32(buf + 8, count);
	poke_u32(buf + 24, raw_len);
	poke_u32(buf + 28, raw_len);
	fix_crc(buf, raw_len);
	d = decode_all(buf, CODEC_HEADER_SIZE + raw_len);
	result = d.result;
	decoded_free(&d);
	free(buf);
	return result;
}

/* Raw payloads that do not parse into exactly record_count records. */
static void
test_bad_records(void)
{
	/* one record: key "ab", NULL value, no headers, timestamp 1 */
	static const char good[] =
	"\x02\x00\x00\x00" "ab" "\xff\xff\xff\xff" "\xff\xff\xff\xff"
	"\x01\x00\x00\x00\x00\x00\x00\x00";
	char		raw[64];
	uint32		n = sizeof(good) - 1;
	CodecHeader h;
	CodecRecord out[1];

	memcpy(raw, good, n);
	ok(decode_forged_raw(raw, n, 1) == CODEC_OK, "a forged record parses");
	memset(&h, 0, sizeof(h));
	h.codec = CODEC_NONE;
	h.record_count = 1;
	h.payload_len = n;
	h.raw_len = n + 1;
	ok(CodecDecodeRecords(&h, raw, NULL, 0, out) == CODEC_BAD_HEADER,
	   "CodecDecodeRecords re-checks the header: BAD_HEADER");
	memset(raw + n, 0, sizeof(raw) - n);
	ok(decode_forged_raw(raw, n + 1, 1) == CODEC_BAD_PAYLOAD,
	   "one byte after the last record: BAD_PAYLOAD");
	ok(decode_forged_raw(raw, 40, 2) == CODEC_BAD_PAYLOAD,
	   "a second record cut short: BAD_PAYLOAD");
	raw[0] = 3;
	ok(decode_forged_raw(raw, n, 1) == CODEC_BAD_PAYLOAD,
	   "a key longer by one byte: BAD_PAYLOAD");
	poke_u32(raw, 0xfffffffe);
	ok(decode_forged_raw(raw, n, 1) == CODEC_BAD_PAYLOAD,
	   "a key length of 2^32-2: BAD_PAYLOAD");
	memcpy(raw, good, n);
	poke_u32(raw + 6, 12);
	ok(decode_forged_raw(raw, n, 1) == CODEC_BAD_PAYLOAD,
	   "a value that swallows the timestamp: BAD_PAYLOAD");
	poke_u32(raw + 6, 4);
	ok(decode_forged_raw(raw, n, 1) == CODEC_BAD_PAYLOAD,
	   "a value that leaves 4 bytes for the timestamp: BAD_PAYLOAD");
}

/*
 * No proper prefix of valid raw records parses as their count: for the
 * first k mixed records, every cut from 20 * k bytes on, so every field of
 * every record is cut somewhere.
 */
static void
test_raw_prefixes(void)
{
	CodecRecord r[5];
	int			n = mixed_records(r);
	int			k;
	char	   *buf;
	size_t		len;
	size_t		cut;
	int			cuts = 0;
	int			bad = 0;

	for (k = 1; k <= n; k++)
	{
		encode(r, k, CODEC_NONE, &buf, &len);
		len -= CODEC_HEADER_SIZE;
		if (decode_forged_raw(buf + CODEC_HEADER_SIZE, len, k) != CODEC_OK)
			bad++;
		for (cut = 20 * k; cut < len; cut++, cuts++)
			if (decode_forged_raw(buf + CODEC_HEADER_SIZE, cut, k) !=
				CODEC_BAD_PAYLOAD)
			{
				bad++;
				printf("# %d records cut at %zu bytes did not fail\n", k, cut);
			}
		free(buf);
	}
	ok(bad == 0, "each of %d cuts of raw records: BAD_PAYLOAD", cuts);
}

/* Forge a zstd batch around a payload; the records' verdict. */
static CodecResult
decode_forged_zstd(const char *payload, uint32 payload_len, uint32 raw_len,
				   size_t scratch_cap)
{
	CodecRecord records[1];
	CodecHeader h;
	char	   *copy = xmalloc(payload_len);
	char	   *scratch = xmalloc(scratch_cap);
	CodecResult r;

	memset(&h, 0, sizeof(h));
	h.codec = CODEC_ZSTD;
	h.record_count = 1;
	h.payload_len = payload_len;
	h.raw_len = raw_len;
	memcpy(copy, payload, payload_len);
	r = CodecDecodeRecords(&h, copy, scratch, scratch_cap, records);
	free(copy);
	free(scratch);
	return r;
}

/* zstd payloads: one frame of exactly raw_len bytes, or rejected. */
static void
test_bad_zstd(void)
{
	CodecRecord r = rec("key", "value", NULL, 3);
	char		raw[64];
	char		frame[2 * 256];
	char	   *buf;
	size_t		raw_len;
	size_t		flen;
	size_t		elen;
	size_t		len;

	encode(&r, 1, CODEC_NONE, &buf, &len);
	raw_len = len - CODEC_HEADER_SIZE;
	memcpy(raw, buf + CODEC_HEADER_SIZE, raw_len);
	free(buf);
	flen = ZSTD_compress(frame, 256, raw, raw_len, 1);

	ok(decode_forged_zstd(frame, flen, raw_len, raw_len) == CODEC_OK,
	   "zstd: one frame of raw_len bytes decodes");
	ok(decode_forged_zstd(frame, flen, raw_len, raw_len - 1) ==
	   CODEC_NO_SPACE, "zstd: scratch one byte short: NO_SPACE");
	ok(decode_forged_zstd(frame, flen, raw_len + 1, raw_len + 1) ==
	   CODEC_BAD_PAYLOAD, "zstd: frame smaller than raw_len: BAD_PAYLOAD");
	ok(decode_forged_zstd(frame, flen - 1, raw_len, raw_len) ==
	   CODEC_BAD_PAYLOAD, "zstd: truncated frame: BAD_PAYLOAD");
	memcpy(frame + flen, frame, flen);
	ok(decode_forged_zstd(frame, 2 * flen, raw_len, 2 * raw_len) ==
	   CODEC_BAD_PAYLOAD, "zstd: two frames: BAD_PAYLOAD");
	elen = ZSTD_compress(frame + flen, 256, raw, 0, 1);
	ok(decode_forged_zstd(frame, flen + elen, raw_len, raw_len) ==
	   CODEC_BAD_PAYLOAD, "zstd: a frame and an empty frame: BAD_PAYLOAD");
	memcpy(frame + flen, "\x50\x2a\x4d\x18\0\0\0\0", 8);
	ok(decode_forged_zstd(frame, flen + 8, raw_len, raw_len) ==
	   CODEC_BAD_PAYLOAD, "zstd: a frame and a skippable frame: BAD_PAYLOAD");
	ok(decode_forged_zstd(frame + flen, 8, raw_len, raw_len) ==
	   CODEC_BAD_PAYLOAD, "zstd: only a skippable frame: BAD_PAYLOAD");
	memset(frame, 0x5a, sizeof(frame));
	ok(decode_forged_zstd(frame, 100, raw_len, raw_len) == CODEC_BAD_PAYLOAD,
	   "zstd: garbage: BAD_PAYLOAD");
	flen = ZSTD_compress(frame, 256, raw, raw_len - 1, 1);
	ok(decode_forged_zstd(frame, flen, raw_len - 1, raw_len) ==
	   CODEC_BAD_PAYLOAD, "zstd: a frame that cuts the record: BAD_PAYLOAD");
}

/*---- torn void marks ----*/

/*
 * Does a copy of batch (len bytes) fail CodecCheckBatch in segment seg and
 * then pass CodecTornVoid at position pos, with the VOID flag set?
 */
static bool
torn_void_at(const char *batch, size_t len, int64 seg, uint64 pos)
{
	char	   *copy = xmalloc(len);
	CodecHeader h;
	bool		torn;

	memcpy(copy, batch, len);
	torn = CodecDecodeHeader(copy, len, &h) == CODEC_OK &&
		CodecCheckBatch(copy, len, &h, seg) == CODEC_BAD_CRC &&
		CodecTornVoid(copy, len, &h, seg, pos) &&
		(h.flags & CODEC_FLAG_VOID) != 0;
	free(copy);
	return torn;
}

/*
 * A void mark rewrites a header in place; torn at a sector boundary inside
 * the header, it leaves the bytes before the boundary from one version
 * and the rest from the other.  CodecTornVoid takes exactly those headers
 * for void batches, at the position where that boundary falls, and
 * nothing else.
 */
static void
test_torn_void(void)
{
	const int64 seg = 42;
	CodecRecord r[5];
	int			n = mixed_records(r);
	char	   *before;
	char	   *after;
	char	   *torn;
	char	   *immediate;
	size_t		len;
	size_t		ilen;
	size_t		cap;
	bool		all_torn = true;
	bool		none_elsewhere = true;
	bool		none_unbroken = true;
	int			ntorn = 0;
	int			k;
	int			dir;

	encode(r, n, CODEC_NONE, &before, &len);
	CodecPlace(before, seg, 1000);
	after = xmalloc(len);
	memcpy(after, before, len);
	CodecSetFlags(after, seg, CODEC_FLAG_VOID);
	torn = xmalloc(len);

	for (k = 1; k < CODEC_HEADER_SIZE; k++)
	{
		/* the boundary k bytes into the header: pos = CODEC_SECTOR - k */
		uint64		pos = 3 * CODEC_SECTOR - k;

		for (dir = 0; dir < 2; dir++)
		{
			const char *first = dir == 0 ? after : before;
			const char *second = dir == 0 ? before : after;

			memcpy(torn, second, len);
			memcpy(torn, first, k);
			if (memcmp(torn, before, CODEC_HEADER_SIZE) == 0 ||
				memcmp(torn, after, CODEC_HEADER_SIZE) == 0)
				continue;		/* the boundary missed every changed byte */
			ntorn++;
			if (!torn_void_at(torn, len, seg, pos))
				all_torn = false;
			if (torn_void_at(torn, len, seg, 5 * CODEC_SECTOR) ||
				torn_void_at(torn, len, seg, 5 * CODEC_SECTOR + 100) ||
				torn_void_at(torn, len, seg + 1, pos))
				none_elsewhere = false;
		}
	}
	ok(ntorn > 0 && all_torn,
	   "a void mark torn at any byte of the header (%d tears) checks as void where the boundary is", ntorn);
	ok(none_elsewhere,
	   "and not at a position whose header crosses no boundary, nor in another segment");

	/* a flipped VOID bit where no boundary falls is corruption */
	memcpy(torn, before, len);
	torn[12] ^= CODEC_FLAG_VOID;
	for (k = 0; k < CODEC_SECTOR; k++)
		if ((k == 0 || CODEC_SECTOR - k >= CODEC_HEADER_SIZE ||
			 CODEC_SECTOR - k <= 12) &&
			torn_void_at(torn, len, seg, 7 * CODEC_SECTOR + k))
			none_unbroken = false;
	ok(none_unbroken,
	   "a VOID bit flipped without its CRC is not a tear unless a boundary falls between the flags and the CRC");

	/* the payload must check too */
	memcpy(torn, after, len);
	memcpy(torn + 60, before + 60, 4);
	ok(torn_void_at(torn, len, seg, 3 * CODEC_SECTOR - 40),
	   "flags marked, CRC not yet: void");
	torn[len - 1] ^= 1;
	ok(!torn_void_at(torn, len, seg, 3 * CODEC_SECTOR - 40),
	   "but not with a payload byte flipped as well");

	/* an immediate batch (no transaction) is never marked void */
	cap = CodecBatchBound(r, n, CODEC_NONE);
	immediate = xmalloc(cap);
	CodecEncodeBatch(r, n, 1000, 0, CODEC_NONE, 3, immediate, cap, &ilen);
	CodecPlace(immediate, seg, 1000);
	memcpy(after, immediate, CODEC_HEADER_SIZE);
	CodecSetFlags(after, seg, CODEC_FLAG_VOID);
	memcpy(immediate + 60, after + 60, 4);	/* the CRC of the marked header */
	ok(!torn_void_at(immediate, ilen, seg, 3 * CODEC_SECTOR - 40),
	   "an immediate batch's header that looks torn is corrupt, not void");

	free(before);
	free(after);
	free(torn);
	free(immediate);
}

/*---- flags, space, trailer ----*/

/*
 * CodecSetFlags and CodecPlace keep the CRC valid; raw flips not.  A placed
 * batch checks only as a batch of its own segment.
 */
static void
test_set_fields(void)
{
	CodecRecord r[5];
	int			n = mixed_records(r);
	char	   *buf;
	size_t		len;
	Decoded		d;
	int			c;

	for (c = CODEC_NONE; c <= CODEC_ZSTD; c++)
	{
		encode(r, n, c, &buf, &len);
		CodecSetFlags(buf, 0, CODEC_FLAG_VOID);
		d = decode_all(buf, len);
		ok(d.result == CODEC_OK && d.header.flags == CODEC_FLAG_VOID &&
		   records_eq(r, d.records, n),
		   "codec %d: CodecSetFlags(VOID) decodes with the flag set", c);
		decoded_free(&d);

		CodecSetFlags(buf, 0, 0);
		d = decode_all(buf, len);
		ok(d.result == CODEC_OK && d.header.flags == 0,
		   "codec %d: CodecSetFlags(0) clears it", c);
		decoded_free(&d);

		CodecPlace(buf, 0, INT64CONST(-77));
		CodecPlace(buf, 0, INT64CONST(0x123456789abcdef));
		d = decode_all(buf, len);
		ok(d.result == CODEC_OK &&
		   d.header.base_offset == INT64CONST(0x123456789abcdef) &&
		   d.header.xid == 77 && records_eq(r, d.records, n),
		   "codec %d: CodecPlace stamps the offset, CRC valid", c);
		decoded_free(&d);

		CodecPlace(buf, INT64CONST(0x7000000000000009), 5);
		d = decode_in(buf, len, INT64CONST(0x7000000000000009));
		ok(d.result == CODEC_OK && d.header.base_offset == 5 &&
		   d.header.crc == expected_batch_crc(buf, INT64CONST(0x7000000000000009)) &&
		   records_eq(r, d.records, n),
		   "codec %d: placed in a segment, it checks in that segment", c);
		decoded_free(&d);
		d = decode_all(buf, len);
		ok(d.result == CODEC_BAD_CRC,
		   "codec %d: and not as an unplaced batch (segment 0): BAD_CRC", c);
		decoded_free(&d);
		d = decode_in(buf, len, INT64CONST(0x7000000000000008));
		ok(d.result == CODEC_BAD_CRC,
		   "codec %d: nor in a segment one id away: BAD_CRC", c);
		decoded_free(&d);
		CodecSetFlags(buf, INT64CONST(0x7000000000000009), CODEC_FLAG_VOID);
		d = decode_in(buf, len, INT64CONST(0x7000000000000009));
		ok(d.result == CODEC_OK && d.header.flags == CODEC_FLAG_VOID,
		   "codec %d: CodecSetFlags in its segment keeps it valid there", c);
		decoded_free(&d);
		CodecPlace(buf, 0, INT64CONST(0x123456789abcdef));
		CodecSetFlags(buf, 0, 0);
		buf[16] ^= 1;
		d = decode_all(buf, len);
		ok(d.result == CODEC_BAD_CRC,
		   "codec %d: a base offset changed without the CRC: BAD_CRC", c);
		decoded_free(&d);
		buf[16] ^= 1;

		buf[12] ^= CODEC_FLAG_VOID;
		d = decode_all(buf, len);
		ok(d.result == CODEC_BAD_CRC,
		   "codec %d: a flag flipped without the CRC: BAD_CRC", c);
		decoded_free(&d);
		free(buf);
	}
}

/* Buffers that are too small, and inputs that cannot be encoded. */
static void
test_no_space(void)
{
	CodecRecord r[200];
	CodecRecord huge;
	char	   *buf;
	size_t		raw;
	size_t		len;
	size_t		zlen;
	char		tiny[CODEC_HEADER_SIZE];
	int			i;

	for (i = 0; i < 200; i++)
		r[i] = rec("same key", "same value, again and again", NULL, i);
	raw = CodecRawSize(r, 200);
	buf = xmalloc(CodecBatchBound(r, 200, CODEC_ZSTD));

	ok(CodecEncodeBatch(r, 200, 0, 0, CODEC_NONE, 0, buf,
						CODEC_HEADER_SIZE + raw, &len) == CODEC_OK,
	   "none: header + raw bytes are enough");
	ok(CodecEncodeBatch(r, 200, 0, 0, CODEC_NONE, 0, buf,
						CODEC_HEADER_SIZE + raw - 1, &len) ==
	   CODEC_NO_SPACE && len == 0, "none: one byte less: NO_SPACE");
	ok(CodecEncodeBatch(r, 1, 0, 0, CODEC_NONE, 0, tiny, sizeof(tiny) - 1,
						&len) == CODEC_NO_SPACE,
	   "none: less than a header: NO_SPACE");

	CodecEncodeBatch(r, 200, 0, 0, CODEC_ZSTD, 3, buf,
					 CodecBatchBound(r, 200, CODEC_ZSTD), &zlen);
	ok(zlen < CODEC_HEADER_SIZE + raw &&
	   CodecEncodeBatch(r, 200, 0, 0, CODEC_ZSTD, 3, buf, zlen, &len) ==
	   CODEC_OK && len == zlen, "zstd: the compressed size is enough");
	ok(CodecEncodeBatch(r, 200, 0, 0, CODEC_ZSTD, 3, buf, zlen - 1, &len) ==
	   CODEC_NO_SPACE, "zstd: one byte less, and raw does not fit: NO_SPACE");

	ok(CodecEncodeBatch(r, 0, 0, 0, CODEC_NONE, 0, buf, zlen, &len) ==
	   CODEC_BAD_HEADER, "no records: BAD_HEADER");
	ok(CodecEncodeBatch(r, 1, 0, 0, 7, 0, buf, zlen, &len) ==
	   CODEC_BAD_HEADER, "unknown codec: BAD_HEADER");
	huge = rec(NULL, NULL, NULL, 0);
	huge.value = buf;			/* never read: the size is refused first */
	huge.value_len = CODEC_MAX_PAYLOAD;
	ok(CodecEncodeBatch(&huge, 1, 0, 0, CODEC_NONE, 0, buf, zlen, &len) ==
	   CODEC_BAD_HEADER, "raw size over CODEC_MAX_PAYLOAD: BAD_HEADER");
	free(buf);
}

/* Forge one byte of a trailer, with a valid CRC; expect the verdict. */
static void
check_forged_trailer(const char *base, int off, char value,
					 CodecResult expect, const char *what)
{
	char		buf[CODEC_TRAILER_SIZE];
	CodecTrailer t;
	CodecResult r;

	memcpy(buf, base, CODEC_TRAILER_SIZE);
	buf[off] = value;
	fix_crc(buf, 0);
	r = CodecDecodeTrailer(buf, sizeof(buf), &t);
	if (!ok(r == expect, "trailer with %s: %s", what,
			CodecResultString(expect)))
		printf("# got %s\n", CodecResultString(r));
}

/* Seal trailers: round trip, recognition, corruption. */
static void
test_trailer(void)
{
	static const char *golden =
	"4d4c4353" "0200" "0000"	/* magic "MLCS", version 2, reserved */
	"0700000000000000"			/* segment id 7 */
	"40e2010000000000"			/* end offset 123456 */
	"0010000000000000"			/* byte size 4096 */
	"402f072f00000000"			/* sealed at 789000000 */
	"0000000000000000000000000000000000000000"	/* reserved */
	"ec8d74a6";					/* CRC32C */
	CodecTrailer t = {7, 123456, 4096, 789000000};
	CodecTrailer back;
	CodecHeader h;
	char		buf[CODEC_TRAILER_SIZE];
	char		bad[CODEC_TRAILER_SIZE];
	char	   *hex;
	int			pos;
	int			bit;
	int			accepted = 0;

	CodecEncodeTrailer(&t, buf);
	hex = to_hex(buf, sizeof(buf));
	if (!ok(strcmp(hex, golden) == 0, "golden trailer bytes"))
		printf("# got %s\n", hex);
	free(hex);
	ok(crc32c_bitwise(0xFFFFFFFFu, (const unsigned char *) "123456789", 9) ==
	   (0xE3069283u ^ 0xFFFFFFFFu),
	   "the reference CRC32C gives the published check value");
	ok(peek_u32(buf + 60) == expected_crc(buf),
	   "the trailer CRC is CRC32C of bytes [0,60)");
	ok(CodecDecodeTrailer(buf, sizeof(buf), &back) == CODEC_OK &&
	   memcmp(&t, &back, sizeof(t)) == 0, "trailer round trip");
	ok(CodecDecodeHeader(buf, sizeof(buf), &h) == CODEC_TRAILER,
	   "a valid trailer read as a header: TRAILER");
	ok(CodecDecodeTrailer(buf, sizeof(buf) - 1, &back) == CODEC_SHORT,
	   "63 bytes of trailer: SHORT");

	for (pos = 0; pos < CODEC_TRAILER_SIZE; pos++)
		for (bit = 0; bit < 8; bit++)
		{
			memcpy(bad, buf, sizeof(buf));
			bad[pos] ^= (char) (1 << bit);
			if (CodecDecodeTrailer(bad, sizeof(bad), &back) == CODEC_OK ||
				CodecDecodeHeader(bad, sizeof(bad), &h) == CODEC_TRAILER)
				accepted++;
		}
	ok(accepted == 0, "each of 512 single-bit flips of a trailer is rejected");

	memcpy(bad, buf, sizeof(buf));
	bad[60] ^= 1;
	ok(CodecDecodeTrailer(bad, sizeof(bad), &back) == CODEC_BAD_CRC &&
	   CodecDecodeHeader(bad, sizeof(bad), &h) == CODEC_BAD_CRC,
	   "trailer with a bad CRC: BAD_CRC, also as a header");
	check_forged_trailer(buf, 2, 'X', CODEC_BAD_MAGIC, "magic MLXS");
	check_forged_trailer(buf, 4, 1, CODEC_BAD_VERSION, "version 1");
	check_forged_trailer(buf, 4, 3, CODEC_BAD_VERSION, "version 3");
	check_forged_trailer(buf, 6, 1, CODEC_BAD_HEADER,
						 "nonzero reserved bytes 6..7");
	check_forged_trailer(buf, 59, 1, CODEC_BAD_HEADER,
						 "nonzero reserved bytes 40..59");
}

/*---- the format itself ----*/

/* The exact bytes of one tiny CODEC_NONE batch, placed in segment 3. */
static void
test_golden_batch(void)
{
	static const char *golden =
	/* header */
	"4d4c4342" "0200" "0000"	/* magic "MLCB", version 2, codec none */
	"02000000" "00000000"		/* 2 records, flags 0 */
	"2a00000000000000"			/* base offset 42 */
	"2d000000" "2d000000"		/* payload 45 bytes, raw 45 bytes */
	"e803000000000000"			/* first timestamp 1000 */
	"e803000000000000"			/* max timestamp 1000 */
	"0700000000000000"			/* xid 7 */
	"0f81504d"					/* payload CRC32C */
	"a5cfc677"					/* header CRC32C, segment id 3 first */
	/* record 0: key "k", value "v1", no headers, timestamp 1000 */
	"01000000" "6b" "02000000" "7631" "ffffffff" "e803000000000000"
	/* record 1: NULL key, empty value, headers "{}", timestamp -1 */
	"ffffffff" "00000000" "02000000" "7b7d" "ffffffffffffffff";
	CodecRecord r[2];
	char		buf[256];
	char	   *hex;
	size_t		len;
	Decoded		d;

	r[0] = rec("k", "v1", NULL, 1000);
	r[1] = rec(NULL, "", "{}", -1);
	CodecEncodeBatch(r, 2, 0, 7, CODEC_NONE, 0, buf, sizeof(buf), &len);
	CodecPlace(buf, 3, 42);
	hex = to_hex(buf, len);
	if (!ok(strcmp(hex, golden) == 0, "golden bytes of a 2-record batch"))
		printf("# got %s\n", hex);
	ok(peek_u32(buf + 56) == expected_payload_crc(buf, len - CODEC_HEADER_SIZE) &&
	   peek_u32(buf + 60) == expected_batch_crc(buf, 3),
	   "its CRCs agree with a bitwise CRC32C");
	free(hex);

	/* the golden bytes decode to the records, wherever they come from */
	hex = (char *) golden;
	for (len = 0; hex[2 * len] != '\0'; len++)
	{
		unsigned int byte;

		sscanf(hex + 2 * len, "%2x", &byte);
		buf[len] = (char) byte;
	}
	d = decode_in(buf, len, 3);
	ok(d.result == CODEC_OK && records_eq(r, d.records, 2) &&
	   d.header.base_offset == 42 && d.header.xid == 7,
	   "the golden bytes decode to the records in segment 3");
	decoded_free(&d);
	d = decode_in(buf, len, 4);
	ok(d.result == CODEC_BAD_CRC, "and fail the CRC in segment 4");
	decoded_free(&d);
}

/* Every result has its own short lower-case phrase. */
static void
test_result_strings(void)
{
	const char *seen[CODEC_ZSTD_ERROR + 1];
	bool		good = true;
	int			i;
	int			j;

	for (i = CODEC_OK; i <= CODEC_ZSTD_ERROR; i++)
	{
		const char *s = CodecResultString((CodecResult) i);

		seen[i] = s;
		if (s == NULL || s[0] == '\0' || strlen(s) > 40)
			good = false;
		for (j = 0; s != NULL && s[j] != '\0'; j++)
			if (s[j] >= 'A' && s[j] <= 'Z')
				good = false;
		for (j = 0; j < i; j++)
			if (s != NULL && strcmp(seen[j], s) == 0)
				good = false;
	}
	ok(good, "CodecResultString: distinct short lower-case phrases");
}

int
main(void)
{
	CodecRecord small[5];
	CodecRecord squeezable[3];
	int			nsmall = mixed_records(small);
	int			i;

	for (i = 0; i < 3; i++)
		squeezable[i] = rec("key", AAAA AAAA AAAA, NULL, 10 + i);

	test_crc_lengths();
	test_round_trips();
	test_compression_choice();
	test_header_fields();
	test_flips("none", small, nsmall, CODEC_NONE);
	test_flips("zstd", squeezable, 3, CODEC_ZSTD);
	test_truncation("none", small, nsmall, CODEC_NONE);
	test_truncation("zstd", squeezable, 3, CODEC_ZSTD);
	test_zero_block();
	test_header_checks();
	test_filler();
	test_bad_records();
	test_raw_prefixes();
	test_bad_zstd();
	test_set_fields();
	test_torn_void();
	test_no_space();
	test_trailer();
	test_golden_batch();
	test_result_strings();
	return tap_done();
}
