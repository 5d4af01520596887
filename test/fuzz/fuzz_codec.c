/*-------------------------------------------------------------------------
 *
 * fuzz_codec.c
 *	  Fuzz target for src/store/codec.c: any bytes decode safely, and any
 *	  records encode and decode back to themselves.
 *
 * Each input is used three ways:
 *
 * 1. As segment bytes: decoded as a batch (header, CRC, records, whatever
 *    the CRC says, so the record parser sees garbage too) and as a trailer;
 *    and as the fields of a trailer that must decode back to them.
 * 2. As the raw records of a batch with a valid header, for every record
 *    count that fits, stored raw and as a zstd frame: the record parser is
 *    fed directly.
 * 3. As a recipe for records (NULLs, lengths, bytes, timestamps, the zstd
 *    level), which are encoded with both codecs and must decode to the same
 *    records, also after CodecSetFlags and CodecPlace (and only in the
 *    segment it was placed in); no proper
 *    prefix of their raw bytes parses; the batch is then truncated,
 *    bit-flipped, and changed in its payload and re-sealed at points the
 *    input chooses.
 *
 * Whatever decodes must be consistent: fields inside the decoded bytes,
 * and the records re-encode to exactly those bytes.  Every decode runs on
 * a malloc'd copy of exactly the bytes given, so ASan sees any over-read.
 *
 *-------------------------------------------------------------------------
 */
#include "c.h"

#include <zstd.h>

#include "codec.h"
#include "fuzz.h"
#include "port/pg_crc32c.h"

/* Limits that keep one input cheap; larger claims are only partly decoded */
#define FUZZ_MAX_RECORDS	(1 << 16)
#define FUZZ_MAX_SCRATCH	(1 << 20)
#define FUZZ_RECIPE_RECORDS 64
#define FUZZ_RAW_COUNTS		16
#define FUZZ_PREFIXES		128

/* One decode of some bytes, from the header to the records. */
typedef struct FuzzBatch
{
	CodecResult result;			/* first failure, or CODEC_OK */
	CodecHeader header;
	char	   *bytes;			/* the input, exactly len bytes */
	char	   *scratch;
	CodecRecord *records;		/* header.record_count of them when OK */
} FuzzBatch;

/*---- helpers ----*/

/* malloc that never returns NULL, even for 0 bytes. */
static void *
fuzz_alloc(size_t size)
{
	void	   *p = malloc(size > 0 ? size : 1);

	CHECK(p != NULL);
	return p;
}

/* Do two fields hold the same bytes (and the same NULL-ness)? */
static bool
fuzz_field_eq(const char *a, uint32 alen, const char *b, uint32 blen)
{
	if (a == NULL || b == NULL)
		return a == b && alen == 0 && blen == 0;
	return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

/* Does decoded record d equal original o (a NULL field has no length)? */
static bool
fuzz_record_eq(const CodecRecord *o, const CodecRecord *d)
{
	return fuzz_field_eq(o->key, o->key ? o->key_len : 0,
						 d->key, d->key_len) &&
		fuzz_field_eq(o->value, o->value ? o->value_len : 0,
					  d->value, d->value_len) &&
		fuzz_field_eq(o->headers, o->headers ? o->headers_len : 0,
					  d->headers, d->headers_len) &&
		o->timestamp == d->timestamp;
}

/* Is a decoded field NULL with length 0, or inside [base, base + len)? */
static bool
fuzz_field_inside(const char *p, uint32 n, const char *base, size_t len)
{
	if (p == NULL)
		return n == 0;
	return p >= base && (size_t) (p - base) <= len &&
		n <= len - (size_t) (p - base);
}

/*---- decoding ----*/

/* The documented header rules, written independently of codec.c. */
static bool
fuzz_header_sane(const CodecHeader *h)
{
	return (h->codec == CODEC_NONE || h->codec == CODEC_ZSTD) &&
		h->record_count >= 1 &&
		(h->flags & ~(uint32) CODEC_FLAG_VOID) == 0 &&
		h->payload_len <= CODEC_MAX_PAYLOAD &&
		h->raw_len <= CODEC_MAX_PAYLOAD &&
		(h->codec != CODEC_NONE || h->payload_len == h->raw_len) &&
		(uint64) h->raw_len >= 20 * (uint64) h->record_count;
}

/*
 * Records that decoded from raw bytes lie inside them and re-encode to
 * exactly them.
 */
static void
fuzz_check_records(const CodecHeader *h, const char *raw,
				   const CodecRecord *records)
{
	size_t		cap;
	size_t		len;
	char	   *out;
	uint32		i;

	for (i = 0; i < h->record_count; i++)
	{
		CHECK(fuzz_field_inside(records[i].key, records[i].key_len,
								raw, h->raw_len));
		CHECK(fuzz_field_inside(records[i].value, records[i].value_len,
								raw, h->raw_len));
		CHECK(fuzz_field_inside(records[i].headers, records[i].headers_len,
								raw, h->raw_len));
	}
	CHECK(CodecRawSize(records, (int) h->record_count) == h->raw_len);
	cap = CodecBatchBound(records, (int) h->record_count, CODEC_NONE);
	CHECK(cap == CODEC_HEADER_SIZE + (size_t) h->raw_len);
	out = fuzz_alloc(cap);
	CHECK(CodecEncodeBatch(records, (int) h->record_count, h->base_offset,
						   h->xid, CODEC_NONE, 0, out, cap, &len) == CODEC_OK);
	CHECK(len == cap);
	CHECK(memcmp(out + CODEC_HEADER_SIZE, raw, h->raw_len) == 0);
	free(out);
}

/*
 * Decode len bytes as a reader of segment segment_id would: header, CRC,
 * records.  The records are parsed even when the CRC fails, and every
 * result is checked against what the input allows.
 */
static FuzzBatch
fuzz_decode_in(const void *data, size_t len, int64 segment_id)
{
	FuzzBatch	b;
	CodecTrailer trailer;
	CodecResult crc;
	size_t		scratch_cap;
	const char *raw;

	memset(&b, 0, sizeof(b));
	b.bytes = fuzz_alloc(len);
	if (len > 0)
		memcpy(b.bytes, data, len);

	b.result = CodecDecodeHeader(b.bytes, len, &b.header);
	CHECK(b.result >= CODEC_OK && b.result <= CODEC_BAD_CRC);
	CHECK((b.result == CODEC_SHORT) == (len < CODEC_HEADER_SIZE));
	if (b.result == CODEC_TRAILER)
		CHECK(CodecDecodeTrailer(b.bytes, len, &trailer) == CODEC_OK);
	if (b.result != CODEC_OK)
		return b;
	CHECK(fuzz_header_sane(&b.header));

	crc = CodecCheckBatch(b.bytes, len, &b.header, segment_id);
	CHECK(crc == CODEC_OK || crc == CODEC_SHORT || crc == CODEC_BAD_CRC);
	CHECK((crc == CODEC_SHORT) ==
		  (len - CODEC_HEADER_SIZE < b.header.payload_len));
	b.result = crc;
	if (crc == CODEC_BAD_CRC)
	{
		/* a torn void mark: within the bytes, and only ever sets VOID */
		CodecHeader torn = b.header;
		uint64		pos = (uint64) CODEC_SECTOR - 1 - (len % CODEC_HEADER_SIZE);

		if (CodecTornVoid(b.bytes, len, &torn, segment_id, pos))
		{
			CHECK(torn.flags == (b.header.flags | CODEC_FLAG_VOID));
			CHECK(b.header.xid != 0);
		}
	}
	if (crc == CODEC_SHORT || b.header.record_count > FUZZ_MAX_RECORDS)
		return b;

	scratch_cap = Min(b.header.raw_len, FUZZ_MAX_SCRATCH);
	b.scratch = fuzz_alloc(scratch_cap);
	b.records = fuzz_alloc(sizeof(CodecRecord) * b.header.record_count);
	raw = b.header.codec == CODEC_ZSTD ? b.scratch :
		b.bytes + CODEC_HEADER_SIZE;
	switch (CodecDecodeRecords(&b.header, b.bytes + CODEC_HEADER_SIZE,
							   b.scratch, scratch_cap, b.records))
	{
		case CODEC_OK:
			fuzz_check_records(&b.header, raw, b.records);
			break;
		case CODEC_NO_SPACE:
			CHECK(b.header.codec == CODEC_ZSTD &&
				  scratch_cap < b.header.raw_len);
			b.result = b.result == CODEC_OK ? CODEC_NO_SPACE : b.result;
			break;
		case CODEC_BAD_PAYLOAD:
			b.result = b.result == CODEC_OK ? CODEC_BAD_PAYLOAD : b.result;
			break;
		default:
			CHECK(false);		/* no other result is documented */
	}
	return b;
}

/* fuzz_decode_in as a batch not placed in any segment (segment 0). */
static FuzzBatch
fuzz_decode(const void *data, size_t len)
{
	return fuzz_decode_in(data, len, 0);
}

/* Release what fuzz_decode allocated. */
static void
fuzz_batch_free(FuzzBatch *b)
{
	free(b->bytes);
	free(b->scratch);
	free(b->records);
}

/* 1. The input as segment bytes: a batch, a trailer, a trailer's fields. */
static void
fuzz_segment_bytes(const uint8_t *data, size_t size)
{
	FuzzBatch	b = fuzz_decode(data, size);
	CodecTrailer t;
	CodecTrailer back;
	CodecHeader h;
	char		again[CODEC_TRAILER_SIZE];
	size_t		pos = 0;
	int			flip;

	fuzz_batch_free(&b);
	if (CodecDecodeTrailer((const char *) data, size, &t) == CODEC_OK)
	{
		CodecEncodeTrailer(&t, again);
		CHECK(memcmp(again, data, CODEC_TRAILER_SIZE) == 0);
	}

	t.segment_id = (int64) fuzz_take(data, size, &pos, 8);
	t.end_offset = (int64) fuzz_take(data, size, &pos, 8);
	t.byte_size = (int64) fuzz_take(data, size, &pos, 8);
	t.sealed_at = (int64) fuzz_take(data, size, &pos, 8);
	CodecEncodeTrailer(&t, again);
	CHECK(CodecDecodeTrailer(again, sizeof(again), &back) == CODEC_OK);
	CHECK(memcmp(&t, &back, sizeof(t)) == 0);
	CHECK(CodecDecodeHeader(again, sizeof(again), &h) == CODEC_TRAILER);
	flip = (int) fuzz_take(data, size, &pos, 2);
	again[flip % CODEC_TRAILER_SIZE] ^= (char) (1 << (flip / 64 % 8));
	CHECK(CodecDecodeTrailer(again, sizeof(again), &back) != CODEC_OK);
}

/*
 * Parse raw bytes as count records under a header that passes every check;
 * returns the result and, when OK, checks the records.
 */
static CodecResult
fuzz_parse(const char *payload, uint32 payload_len, uint32 raw_len,
		   int codec, uint32 count, CodecRecord *records)
{
	CodecHeader h;
	char	   *scratch = codec == CODEC_ZSTD ? fuzz_alloc(raw_len) : NULL;
	CodecResult r;

	memset(&h, 0, sizeof(h));
	h.codec = codec;
	h.record_count = count;
	h.payload_len = payload_len;
	h.raw_len = raw_len;
	r = CodecDecodeRecords(&h, payload, scratch, scratch ? raw_len : 0,
						   records);
	CHECK(r == CODEC_OK || r == CODEC_BAD_PAYLOAD);
	if (r == CODEC_OK)
		fuzz_check_records(&h, codec == CODEC_ZSTD ? scratch : payload,
						   records);
	free(scratch);
	return r;
}

/*
 * 2. The input as raw records, for each count that could fit: at most one
 * parses, and the zstd frame of the same bytes gives the same verdict.
 */
static void
fuzz_raw_records(const uint8_t *data, size_t size)
{
	CodecRecord records[FUZZ_RAW_COUNTS];
	char	   *raw;
	char	   *frame;
	size_t		frame_cap = ZSTD_compressBound(size);
	size_t		frame_len;
	uint32		count;
	int			parsed = 0;

	if (size < 20 || size > FUZZ_MAX_SCRATCH)
		return;
	raw = fuzz_alloc(size);
	memcpy(raw, data, size);
	frame = fuzz_alloc(frame_cap);
	frame_len = ZSTD_compress(frame, frame_cap, raw, size, 1);
	CHECK(!ZSTD_isError(frame_len));

	for (count = 1; count <= FUZZ_RAW_COUNTS && count <= size / 20; count++)
	{
		CodecResult none = fuzz_parse(raw, size, size, CODEC_NONE, count,
									  records);

		/* decompressing costs: the count that parses, and count 1 */
		if (none == CODEC_OK || count == 1)
			CHECK(fuzz_parse(frame, frame_len, size, CODEC_ZSTD, count,
							 records) == none);
		parsed += none == CODEC_OK;
	}
	CHECK(parsed <= 1);
	free(frame);
	free(raw);
}

/*
 * The longest proper prefixes of valid raw records (FUZZ_PREFIXES of them,
 * which cut every field of the last records) fail to parse as their count.
 * Each prefix sits at the very end of its buffer, so ASan sees any read
 * past it.
 */
static void
fuzz_raw_prefixes(const char *raw, uint32 raw_len, uint32 count)
{
	char	   *buf = fuzz_alloc(raw_len);
	CodecRecord *records = fuzz_alloc(sizeof(CodecRecord) * count);
	uint32		len = Max(20 * count, raw_len - Min(raw_len, FUZZ_PREFIXES));

	for (; len < raw_len; len++)
	{
		char	   *p = buf + (raw_len - len);

		memcpy(p, raw, len);
		CHECK(fuzz_parse(p, len, len, CODEC_NONE, count, records) ==
			  CODEC_BAD_PAYLOAD);
	}
	free(records);
	free(buf);
}

/*---- encoding ----*/

/* Take one field from the recipe: NULL, or up to 255 (or 65535) bytes. */
static void
fuzz_take_field(const uint8_t *data, size_t size, size_t *pos, bool null,
				bool wide, const char **p, uint32 *len)
{
	size_t		n = fuzz_take(data, size, pos, wide ? 2 : 1);

	if (null)
	{
		*p = NULL;
		*len = (uint32) n;		/* ignored for a NULL field */
		return;
	}
	n = Min(n, *pos < size ? size - *pos : 0);
	*p = (const char *) data + Min(*pos, size);
	*len = (uint32) n;
	*pos += n;
}

/*
 * Records from the recipe: per record a control byte (bits 0-2: key,
 * value, headers are NULL; bit 3: the value's length takes two bytes),
 * then each field's length and bytes, then an 8-byte timestamp.
 */
static int
fuzz_recipe(const uint8_t *data, size_t size, size_t *pos,
			CodecRecord *records)
{
	int			n = 0;

	while (*pos < size && n < FUZZ_RECIPE_RECORDS)
	{
		CodecRecord *r = &records[n++];
		int			ctl = (int) fuzz_take(data, size, pos, 1);

		fuzz_take_field(data, size, pos, ctl & 1, false, &r->key,
						&r->key_len);
		fuzz_take_field(data, size, pos, ctl & 2, ctl & 8, &r->value,
						&r->value_len);
		fuzz_take_field(data, size, pos, ctl & 4, false, &r->headers,
						&r->headers_len);
		r->timestamp = (int64) fuzz_take(data, size, pos, 8);
	}
	if (n == 0)
	{
		memset(&records[0], 0, sizeof(CodecRecord));
		n = 1;
	}
	return n;
}

/* A batch's bytes with one change, decoded: the verdict. */
static CodecResult
fuzz_decode_changed(const char *batch, size_t len, size_t cut, size_t pos,
					uint8 xor, bool reseal)
{
	char	   *copy = fuzz_alloc(len);
	FuzzBatch	b;
	CodecResult r;

	memcpy(copy, batch, len);
	copy[pos] ^= (char) xor;
	if (reseal)
	{
		/* a new payload CRC (bytes 56..60), then the header's */
		pg_crc32c	crc;

		INIT_CRC32C(crc);
		COMP_CRC32C(crc, copy + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE);
		FIN_CRC32C(crc);
		for (int i = 0; i < 4; i++)
			copy[56 + i] = (char) (crc >> (8 * i));
		CodecSetFlags(copy, 0, 0);
	}
	b = fuzz_decode(copy, Min(cut, len));
	r = b.result;
	fuzz_batch_free(&b);
	free(copy);
	return r;
}

/*
 * Encode the records with codec; the batch must decode to them, hold its
 * size, survive CodecSetFlags and reject a cut or a flipped bit.  spot
 * says where to cut, flip and change.
 */
static void
fuzz_encode(const CodecRecord *records, int n, int64 base, uint64 xid,
			int codec, int level, uint64 spot)
{
	size_t		bound = CodecBatchBound(records, n, codec);
	size_t		raw = CodecRawSize(records, n);
	char	   *out = fuzz_alloc(bound);
	char	   *exact;
	size_t		len;
	size_t		len2;
	size_t		at = (size_t) (spot & 0xffffff);
	int			bit = (int) (spot >> 24) % 8;
	uint8		xor = (uint8) ((spot >> 32) | 1);
	int64		max_ts = records[0].timestamp;
	FuzzBatch	b;
	CodecResult r;
	int			i;

	CHECK(CodecEncodeBatch(records, n, base, xid, codec, level, out, bound,
						   &len) == CODEC_OK);
	CHECK(len <= bound && len > CODEC_HEADER_SIZE);

	b = fuzz_decode(out, len);
	CHECK(b.result == CODEC_OK);
	CHECK(b.header.record_count == (uint32) n && b.header.flags == 0);
	CHECK(b.header.base_offset == base && b.header.xid == xid);
	CHECK(b.header.raw_len == raw);
	CHECK(len == CODEC_HEADER_SIZE + b.header.payload_len);
	CHECK(codec == CODEC_ZSTD || b.header.codec == CODEC_NONE);
	CHECK(b.header.codec == CODEC_NONE || b.header.payload_len < raw);
	for (i = 0; i < n; i++)
	{
		CHECK(fuzz_record_eq(&records[i], &b.records[i]));
		max_ts = Max(max_ts, records[i].timestamp);
	}
	CHECK(b.header.first_timestamp == records[0].timestamp);
	CHECK(b.header.max_timestamp == max_ts);
	if (b.header.codec == CODEC_NONE)
		fuzz_raw_prefixes(b.bytes + CODEC_HEADER_SIZE, b.header.raw_len, n);
	fuzz_batch_free(&b);

	/* exactly len bytes are enough, and give the same bytes; fewer are not */
	exact = fuzz_alloc(len);
	CHECK(CodecEncodeBatch(records, n, base, xid, codec, level, exact, len,
						   &len2) == CODEC_OK);
	CHECK(len2 == len && memcmp(exact, out, len) == 0);
	CHECK(CodecEncodeBatch(records, n, base, xid, codec, level, exact,
						   len - 1, &len2) == CODEC_NO_SPACE && len2 == 0);
	free(exact);

	/* flags and base offset: set with a valid CRC */
	CodecSetFlags(out, 0, CODEC_FLAG_VOID);
	CodecPlace(out, 0, (int64) ~spot);
	b = fuzz_decode(out, len);
	CHECK(b.result == CODEC_OK && b.header.flags == CODEC_FLAG_VOID);
	CHECK(b.header.base_offset == (int64) ~spot && b.header.xid == xid);
	CHECK(fuzz_record_eq(&records[n - 1], &b.records[n - 1]));
	fuzz_batch_free(&b);

	/* placed in a segment, it checks there and nowhere else */
	CodecPlace(out, (int64) (spot | 1), (int64) ~spot);
	b = fuzz_decode_in(out, len, (int64) (spot | 1));
	CHECK(b.result == CODEC_OK && b.header.base_offset == (int64) ~spot);
	fuzz_batch_free(&b);
	b = fuzz_decode_in(out, len, (int64) (spot | 1) ^ 2);
	CHECK(b.result == CODEC_BAD_CRC);
	fuzz_batch_free(&b);
	CodecPlace(out, 0, (int64) ~spot);
	CodecSetFlags(out, 0, 0);

	/* a cut, a flipped bit: rejected; a changed payload byte, re-sealed */
	CHECK(fuzz_decode_changed(out, len, at % len, 0, 0, false) ==
		  CODEC_SHORT);
	r = fuzz_decode_changed(out, len, len, at % len, (uint8) (1 << bit),
							false);
	CHECK(r != CODEC_OK && r != CODEC_END && r != CODEC_TRAILER);
	r = fuzz_decode_changed(out, len, len,
							CODEC_HEADER_SIZE + at % (len - CODEC_HEADER_SIZE),
							xor, true);
	CHECK(r == CODEC_OK || r == CODEC_BAD_PAYLOAD);
	free(out);
}

/*
 * 3. The input as a recipe of records, encoded with both codecs.  It
 * starts with the zstd level, the base offset, the xid and each codec's
 * spot to change; the records follow.
 */
static void
fuzz_round_trip(const uint8_t *data, size_t size)
{
	CodecRecord records[FUZZ_RECIPE_RECORDS];
	size_t		pos = 0;
	int			level = (int) (fuzz_take(data, size, &pos, 1) % 8) - 3;
	int64		base = (int64) fuzz_take(data, size, &pos, 8);
	uint64		xid = fuzz_take(data, size, &pos, 8);
	uint64		spot_none = fuzz_take(data, size, &pos, 5);
	uint64		spot_zstd = fuzz_take(data, size, &pos, 5);
	int			n = fuzz_recipe(data, size, &pos, records);

	fuzz_encode(records, n, base, xid, CODEC_NONE, 0, spot_none);
	fuzz_encode(records, n, base, xid, CODEC_ZSTD, level, spot_zstd);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_segment_bytes(data, size);
	fuzz_raw_records(data, size);
	fuzz_round_trip(data, size);
	return 0;
}
