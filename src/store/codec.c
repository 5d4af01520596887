/*-------------------------------------------------------------------------
 *
 * codec.c
 *	  Encode and decode record batches and seal trailers.
 *
 * The format is described in codec.h.  This file turns an array of
 * CodecRecord into one batch (header and payload) and back, and writes and
 * reads the seal trailer that ends a fenced segment.
 *
 * Rules:
 *
 * - Pure code: no global state (but CodecCrc32c's tables, built once per
 *   process), no memory contexts, no ereport.  Results
 *   are CodecResult values; the caller decides what an error means.  Any
 *   process may call any function, concurrently; a process is one thread
 *   (the tables' lazy build is not thread-safe).  Only c.h, pg_crc32c,
 *   libzstd and, on x86-64, the compiler's <cpuid.h> and <nmmintrin.h> are
 *   used, so the server, the unit test and the fuzz target all link this
 *   very file.
 * - Memory: output goes to buffers the caller provides and sizes
 *   (CodecBatchBound, CODEC_TRAILER_SIZE, a scratch of raw_len bytes).  Only
 *   zstd allocates, inside one call, and frees before the call returns,
 *   failure or not.
 * - Byte order: every integer is written and read byte by byte,
 *   little-endian, at the offsets codec.h lists; no struct is ever copied
 *   to or from disk bytes.
 * - A batch is immutable once encoded, except through CodecSetFlags and
 *   CodecPlace, which rewrite one header field and re-seal the header CRC
 *   (the payload's own CRC is untouched: stamping the offsets of a 1 MiB
 *   batch costs 68 bytes of CRC, not another pass over the payload).  They
 *   trust the batch: call them only on a batch this process encoded or
 *   checked.
 * - Reading is a fixed sequence: CodecDecodeHeader on the first
 *   CODEC_HEADER_SIZE bytes (END, TRAILER, or a plausible header whose CRC
 *   is not checked yet); read payload_len more bytes; CodecCheckBatch (the
 *   CRC); CodecDecodeRecords.  Decoded records point into the payload or
 *   the scratch buffer and live as long as those do.  A walk over the
 *   headers alone (an index build) checks each with CodecCheckHeader.
 * - Decoders are total: for any bytes and any length they return a
 *   CodecResult and never read outside [buf, buf + len), the payload's
 *   payload_len bytes or the scratch's scratch_cap bytes.  The fuzz target
 *   (test/fuzz/fuzz_codec.c) holds them to it.
 * - The writer stores a zstd frame only when it is smaller than the raw
 *   records; otherwise the batch says CODEC_NONE.  The frame declares its
 *   content size, and a reader accepts exactly one frame of exactly raw_len
 *   bytes.
 *
 *-------------------------------------------------------------------------
 */
#include "c.h"

#include <zstd.h>

#include "port/pg_crc32c.h"

#include "codec.h"

/* Fixed bytes of one raw record: three lengths and the timestamp */
#define CODEC_RECORD_OVERHEAD	20

/* Offsets in the batch header */
#define HDR_MAGIC			0
#define HDR_VERSION			4
#define HDR_CODEC			6
#define HDR_COUNT			8
#define HDR_FLAGS			12
#define HDR_BASE_OFFSET		16
#define HDR_PAYLOAD_LEN		24
#define HDR_RAW_LEN			28
#define HDR_FIRST_TS		32
#define HDR_MAX_TS			40
#define HDR_XID				48
#define HDR_PAYLOAD_CRC		56
#define HDR_CRC				60

/* Offsets in the seal trailer */
#define TRL_MAGIC			0
#define TRL_VERSION			4
#define TRL_RESERVED1		6
#define TRL_SEGMENT_ID		8
#define TRL_END_OFFSET		16
#define TRL_BYTE_SIZE		24
#define TRL_SEALED_AT		32
#define TRL_RESERVED2		40
#define TRL_RESERVED2_LEN	20
#define TRL_CRC				60

#define CODEC_BATCH_MAGIC	"MLCB"
#define CODEC_TRAILER_MAGIC "MLCS"
#define CODEC_KNOWN_FLAGS	(CODEC_FLAG_VOID | CODEC_FLAG_FILLER)

/* Small writes are gathered into this many bytes before zstd sees them */
#define CODEC_STAGE_SIZE	1024

/*
 * Where CodecEncodeBatch's raw records go: straight to the output, or
 * through a zstd stream into it.
 */
typedef struct CodecWriter
{
	char	   *out;			/* the stored payload starts here */
	size_t		cap;			/* bytes that may be written at out */
	size_t		len;			/* bytes written at out so far */
	ZSTD_CCtx  *cctx;			/* NULL: store raw bytes as they are */
	size_t		staged;			/* bytes waiting in stage (zstd only) */
	CodecResult result;			/* CODEC_OK until the first failure */
	char		stage[CODEC_STAGE_SIZE];
} CodecWriter;

StaticAssertDecl(CODEC_HEADER_SIZE == HDR_CRC + 4,
				 "the CRC ends the batch header");
StaticAssertDecl(CODEC_TRAILER_SIZE == TRL_CRC + 4,
				 "the CRC ends the seal trailer");
StaticAssertDecl(TRL_RESERVED2 + TRL_RESERVED2_LEN == TRL_CRC,
				 "the trailer's reserved bytes reach its CRC");

/*---- byte order ----*/

/* Store a 16-bit integer little-endian. */
static inline void
put_u16(char *p, uint16 v)
{
	p[0] = (char) (v & 0xff);
	p[1] = (char) (v >> 8);
}

/* Store a 32-bit integer little-endian. */
static inline void
put_u32(char *p, uint32 v)
{
	int			i;

	for (i = 0; i < 4; i++)
		p[i] = (char) ((v >> (8 * i)) & 0xff);
}

/* Store a 64-bit integer little-endian. */
static inline void
put_u64(char *p, uint64 v)
{
	int			i;

	for (i = 0; i < 8; i++)
		p[i] = (char) ((v >> (8 * i)) & 0xff);
}

/* Load a little-endian 16-bit integer. */
static inline uint16
get_u16(const char *p)
{
	const unsigned char *b = (const unsigned char *) p;

	return (uint16) (b[0] | (b[1] << 8));
}

/* Load a little-endian 32-bit integer. */
static inline uint32
get_u32(const char *p)
{
	const unsigned char *b = (const unsigned char *) p;

	return (uint32) b[0] | ((uint32) b[1] << 8) |
		((uint32) b[2] << 16) | ((uint32) b[3] << 24);
}

/* Load a little-endian 64-bit integer. */
static inline uint64
get_u64(const char *p)
{
	return (uint64) get_u32(p) | ((uint64) get_u32(p + 4) << 32);
}

/*---- checksums ----*/

/*
 * A payload's CRC32C in three streams.
 *
 * pg_comp_crc32c feeds each 8-byte crc32 instruction the result of the one
 * before, so it waits out the instruction's latency (3 cycles) on every
 * step: 118 us per MiB in a C loop here, and 11 % of the backend's CPU
 * samples in an immediate produce of 1,000 x 1 KiB (perf, dev node).  The
 * instruction can start once a cycle, so three independent chains over
 * three adjacent stripes cost about what one does.  They are joined with
 * the register's linearity over GF(2): from state s, running A then B
 * gives shift(crc(s, A)) xor crc(0, B), where shift(v) is v run over |B|
 * zero bytes.  For the fixed stripe length, shift is a linear map on 32
 * bits, kept as four 256-entry tables that each process builds once, by
 * running COMP_CRC32C itself over zeros.  The result is CRC32C bit for bit
 * (test_codec checks CodecCrc32c against a bitwise CRC at lengths and
 * alignments around the stripes); only the time differs (46 us per MiB).
 * Elsewhere, or without SSE 4.2, COMP_CRC32C does it all.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CODEC_CRC_STRIPED 1

#include <cpuid.h>
#include <nmmintrin.h>

/* Bytes of one stream per round; a round covers three */
#define CRC_STRIPE			1024

/*
 * Process-local, written once by codec_crc_init before crc_ready is set and
 * only read after: the one piece of global state in this file.  No
 * PostgreSQL process has threads.
 */
static bool crc_ready;			/* the CPU checked (with SSE 4.2, the tables
								 * built) */
static bool crc_sse42;			/* the CPU has the crc32 instruction */
static uint32 crc_shift[4][256];	/* shift over CRC_STRIPE zero bytes, by
									 * byte of the register */

static void
codec_crc_init(void)
{
	static const char zeros[CRC_STRIPE];
	unsigned int eax,
				ebx,
				ecx,
				edx;
	uint32		column[32];

	crc_sse42 = __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
		(ecx & bit_SSE4_2) != 0;

	/* The image of each bit of the register, then of each byte value */
	for (int bit = 0; crc_sse42 && bit < 32; bit++)
	{
		pg_crc32c	v = (pg_crc32c) 1 << bit;

		COMP_CRC32C(v, zeros, CRC_STRIPE);
		column[bit] = v;
	}
	for (int k = 0; crc_sse42 && k < 4; k++)
		for (int b = 0; b < 256; b++)
		{
			uint32		v = 0;

			for (int j = 0; j < 8; j++)
				if (b & (1 << j))
					v ^= column[8 * k + j];
			crc_shift[k][b] = v;
		}
	crc_ready = true;
}

/* The register v run over CRC_STRIPE zero bytes. */
static inline uint32
codec_crc_shift(uint32 v)
{
	return crc_shift[0][v & 0xFF] ^ crc_shift[1][(v >> 8) & 0xFF] ^
		crc_shift[2][(v >> 16) & 0xFF] ^ crc_shift[3][v >> 24];
}

/* Run the register crc over rounds x 3 x CRC_STRIPE bytes at p. */
__attribute__((target("sse4.2")))
static uint32
codec_crc_rounds(uint32 crc, const char *p, size_t rounds)
{
	for (size_t r = 0; r < rounds; r++, p += 3 * CRC_STRIPE)
	{
		uint64		a = crc;
		uint64		b = 0;
		uint64		c = 0;

		for (size_t i = 0; i < CRC_STRIPE; i += 8)
		{
			uint64		x,
						y,
						z;

			memcpy(&x, p + i, 8);
			memcpy(&y, p + CRC_STRIPE + i, 8);
			memcpy(&z, p + 2 * CRC_STRIPE + i, 8);
			a = _mm_crc32_u64(a, x);
			b = _mm_crc32_u64(b, y);
			c = _mm_crc32_u64(c, z);
		}
		crc = codec_crc_shift(codec_crc_shift((uint32) a) ^ (uint32) b) ^
			(uint32) c;
	}
	return crc;
}
#endif							/* x86-64 */

/* CRC32C of len bytes. */
uint32
CodecCrc32c(const void *data, size_t len)
{
	const char *p = data;
	pg_crc32c	crc;

	INIT_CRC32C(crc);
#ifdef CODEC_CRC_STRIPED
	if (len >= 3 * CRC_STRIPE)
	{
		if (!crc_ready)
			codec_crc_init();
		if (crc_sse42)
		{
			size_t		rounds = len / (3 * CRC_STRIPE);

			crc = codec_crc_rounds(crc, p, rounds);
			p += rounds * 3 * CRC_STRIPE;
			len -= rounds * 3 * CRC_STRIPE;
		}
	}
#endif
	if (len > 0)
		COMP_CRC32C(crc, p, len);
	FIN_CRC32C(crc);
	return crc;
}

/*
 * The header CRC of a batch in segment segment_id: over the segment id (8
 * bytes, little-endian), then the 60 header bytes before the CRC, payload
 * CRC included.  The id is not stored, only checked: a batch that a file
 * held for an earlier segment (a recycled file) fails it.
 */
static uint32
codec_header_crc(const char *batch, int64 segment_id)
{
	char		id[8];
	pg_crc32c	crc;

	put_u64(id, (uint64) segment_id);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, id, sizeof(id));
	COMP_CRC32C(crc, batch, HDR_CRC);
	FIN_CRC32C(crc);
	return crc;
}

/* Store the header CRC of a batch in segment segment_id. */
static void
codec_seal_header(char *batch, int64 segment_id)
{
	put_u32(batch + HDR_CRC, codec_header_crc(batch, segment_id));
}

/* Store both CRCs of a batch whose payload follows its header in memory. */
static void
codec_seal_batch(char *batch, int64 segment_id, uint32 payload_len)
{
	put_u32(batch + HDR_PAYLOAD_CRC,
			CodecCrc32c(batch + CODEC_HEADER_SIZE, payload_len));
	codec_seal_header(batch, segment_id);
}

/*---- validation ----*/

/* Are all n bytes at p zero? */
static inline bool
CheckAllZero(const char *p, size_t n)
{
	size_t		i;

	for (i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

/*
 * Can a header with these fields describe a batch this version writes?
 * Everything that can be judged without the payload is judged here.
 */
static inline CodecResult
CheckHeaderFields(const CodecHeader *h)
{
	if (h->codec != CODEC_NONE && h->codec != CODEC_ZSTD)
		return CODEC_BAD_HEADER;
	if ((h->flags & ~(uint32) CODEC_KNOWN_FLAGS) != 0)
		return CODEC_BAD_HEADER;
	if (h->flags & CODEC_FLAG_FILLER)
	{
		/* nothing but padding: no records, no transaction, no codec */
		if (h->flags != CODEC_FLAG_FILLER || h->record_count != 0 ||
			h->codec != CODEC_NONE || h->xid != 0 ||
			h->first_timestamp != 0 || h->max_timestamp != 0)
			return CODEC_BAD_HEADER;
	}
	else if (h->record_count == 0)
		return CODEC_BAD_HEADER;
	if (h->payload_len > CODEC_MAX_PAYLOAD || h->raw_len > CODEC_MAX_PAYLOAD)
		return CODEC_BAD_HEADER;
	if (h->codec == CODEC_NONE && h->payload_len != h->raw_len)
		return CODEC_BAD_HEADER;
	if ((uint64) h->raw_len <
		(uint64) CODEC_RECORD_OVERHEAD * h->record_count)
		return CODEC_BAD_HEADER;
	return CODEC_OK;
}

/*
 * Read one length-prefixed field of a raw record at *pos, advancing *pos.
 * False when the prefix or the bytes would run past len.
 */
static inline bool
CheckField(const char *raw, size_t len, size_t *pos,
		   const char **data, uint32 *data_len)
{
	uint32		n;

	if (len - *pos < 4)
		return false;
	n = get_u32(raw + *pos);
	*pos += 4;
	if (n == CODEC_NULL_LEN)
	{
		*data = NULL;
		*data_len = 0;
		return true;
	}
	if (n > len - *pos)
		return false;
	*data = raw + *pos;
	*data_len = n;
	*pos += n;
	return true;
}

/*---- encoding ----*/

/* Add without wrapping: sizes that overflow stay at SIZE_MAX. */
static inline size_t
codec_add_size(size_t a, size_t b)
{
	return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* Bytes of one field with its length prefix; NULL data stores no bytes. */
static inline size_t
codec_field_size(const char *data, uint32 len)
{
	return codec_add_size(4, data != NULL ? (size_t) len : 0);
}

/*
 * CodecRawSize
 *		Bytes the records take encoded, before compression.
 *
 * A NULL pointer is a NULL field whatever its length says.  The sum
 * saturates at SIZE_MAX, which CodecEncodeBatch rejects as too large.
 */
size_t
CodecRawSize(const CodecRecord *records, int nrecords)
{
	size_t		total = 0;
	int			i;

	for (i = 0; i < nrecords; i++)
	{
		const CodecRecord *r = &records[i];

		total = codec_add_size(total, 8);
		total = codec_add_size(total, codec_field_size(r->key, r->key_len));
		total = codec_add_size(total,
							   codec_field_size(r->value, r->value_len));
		total = codec_add_size(total,
							   codec_field_size(r->headers, r->headers_len));
	}
	return total;
}

/*
 * CodecBatchBound
 *		An output size that CodecEncodeBatch always finds big enough.
 */
size_t
CodecBatchBound(const CodecRecord *records, int nrecords, int codec)
{
	size_t		raw = CodecRawSize(records, nrecords);
	size_t		stored = raw;

	/* beyond the limit the size does not matter: encoding refuses */
	if (codec == CODEC_ZSTD && raw <= CODEC_MAX_PAYLOAD)
		stored = Max(raw, ZSTD_compressBound(raw));
	return codec_add_size(CODEC_HEADER_SIZE, stored);
}

/* Start writing at out, at most cap bytes, through cctx unless NULL. */
static void
codec_writer_init(CodecWriter *w, char *out, size_t cap, ZSTD_CCtx *cctx)
{
	w->out = out;
	w->cap = cap;
	w->len = 0;
	w->cctx = cctx;
	w->staged = 0;
	w->result = CODEC_OK;
}

/*
 * Push n bytes through the writer's zstd stream, or finish the frame when
 * end is ZSTD_e_end.  Running out of output space is CODEC_NO_SPACE.
 */
static void
codec_zstd_feed(CodecWriter *w, const char *data, size_t n,
				ZSTD_EndDirective end)
{
	ZSTD_inBuffer in = {data, n, 0};
	ZSTD_outBuffer out = {w->out, w->cap, w->len};

	for (;;)
	{
		size_t		in_before = in.pos;
		size_t		out_before = out.pos;
		size_t		left = ZSTD_compressStream2(w->cctx, &out, &in, end);

		w->len = out.pos;
		if (ZSTD_isError(left))
		{
			w->result = CODEC_ZSTD_ERROR;
			return;
		}
		if (end == ZSTD_e_end ? left == 0 : in.pos == in.size)
			return;
		if (out.pos == out.size ||
			(in.pos == in_before && out.pos == out_before))
		{
			w->result = CODEC_NO_SPACE;
			return;
		}
	}
}

/* Hand the staged bytes to zstd. */
static void
codec_flush_stage(CodecWriter *w)
{
	if (w->staged > 0 && w->result == CODEC_OK)
		codec_zstd_feed(w, w->stage, w->staged, ZSTD_e_continue);
	w->staged = 0;
}

/* Append n raw bytes to the payload: copied, or staged for zstd. */
static void
codec_write(CodecWriter *w, const char *data, size_t n)
{
	if (n == 0 || w->result != CODEC_OK)
		return;
	if (w->cctx == NULL)
	{
		if (n > w->cap - w->len)
		{
			w->result = CODEC_NO_SPACE;
			return;
		}
		memcpy(w->out + w->len, data, n);
		w->len += n;
		return;
	}
	if (n > CODEC_STAGE_SIZE - w->staged)
	{
		codec_flush_stage(w);
		if (n > CODEC_STAGE_SIZE)
		{
			codec_zstd_feed(w, data, n, ZSTD_e_continue);
			return;
		}
	}
	memcpy(w->stage + w->staged, data, n);
	w->staged += n;
}

/* Append one field: its length (or CODEC_NULL_LEN), then its bytes. */
static void
codec_write_field(CodecWriter *w, const char *data, uint32 len)
{
	char		prefix[4];

	put_u32(prefix, data != NULL ? len : CODEC_NULL_LEN);
	codec_write(w, prefix, 4);
	if (data != NULL)
		codec_write(w, data, len);
}

/* Append every record in the raw layout of codec.h. */
static void
codec_write_records(CodecWriter *w, const CodecRecord *records, int nrecords)
{
	int			i;

	for (i = 0; i < nrecords; i++)
	{
		const CodecRecord *r = &records[i];
		char		ts[8];

		codec_write_field(w, r->key, r->key_len);
		codec_write_field(w, r->value, r->value_len);
		codec_write_field(w, r->headers, r->headers_len);
		put_u64(ts, (uint64) r->timestamp);
		codec_write(w, ts, 8);
	}
}

/*
 * Compress the records as one zstd frame of at most cap bytes at out.
 * CODEC_NO_SPACE when the frame does not fit.
 */
static CodecResult
codec_compress(const CodecRecord *records, int nrecords, size_t raw,
			   int level, char *out, size_t cap, size_t *len)
{
	CodecWriter w;
	ZSTD_CCtx  *cctx = ZSTD_createCCtx();

	if (cctx == NULL)
		return CODEC_ZSTD_ERROR;
	codec_writer_init(&w, out, cap, cctx);
	/* the frame declares raw as its content size; readers insist on it */
	if (ZSTD_isError(ZSTD_CCtx_setParameter(w.cctx, ZSTD_c_compressionLevel,
											level)) ||
		ZSTD_isError(ZSTD_CCtx_setParameter(w.cctx, ZSTD_c_contentSizeFlag,
											1)) ||
		ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(w.cctx, raw)))
		w.result = CODEC_ZSTD_ERROR;

	codec_write_records(&w, records, nrecords);
	codec_flush_stage(&w);
	if (w.result == CODEC_OK)
		codec_zstd_feed(&w, NULL, 0, ZSTD_e_end);
	ZSTD_freeCCtx(w.cctx);
	*len = w.len;
	return w.result;
}

/* Copy the records uncompressed to out, which has room for raw bytes. */
static void
codec_store_raw(const CodecRecord *records, int nrecords, char *out,
				size_t raw)
{
	CodecWriter w;

	codec_writer_init(&w, out, raw, NULL);
	codec_write_records(&w, records, nrecords);
}

/* Write a batch header from h (its crc is ignored) into out. */
static void
codec_put_header(char *out, const CodecHeader *h)
{
	memcpy(out + HDR_MAGIC, CODEC_BATCH_MAGIC, 4);
	put_u16(out + HDR_VERSION, CODEC_VERSION);
	put_u16(out + HDR_CODEC, h->codec);
	put_u32(out + HDR_COUNT, h->record_count);
	put_u32(out + HDR_FLAGS, h->flags);
	put_u64(out + HDR_BASE_OFFSET, (uint64) h->base_offset);
	put_u32(out + HDR_PAYLOAD_LEN, h->payload_len);
	put_u32(out + HDR_RAW_LEN, h->raw_len);
	put_u64(out + HDR_FIRST_TS, (uint64) h->first_timestamp);
	put_u64(out + HDR_MAX_TS, (uint64) h->max_timestamp);
	put_u64(out + HDR_XID, h->xid);
	put_u32(out + HDR_PAYLOAD_CRC, 0);
	put_u32(out + HDR_CRC, 0);
}

/*
 * CodecEncodeBatch
 *		Encode nrecords records as one batch at out.
 *
 * With CODEC_ZSTD the payload is compressed at zstd_level, unless the frame
 * would not be smaller than the raw records: then they are stored as they
 * are and the header says CODEC_NONE.  On success *out_len is the batch's
 * size, header included; on failure it is 0 and out holds garbage.  The
 * batch is sealed for segment 0, which no segment has: CodecPlace gives it
 * its segment (and offsets) before it is written.
 */
CodecResult
CodecEncodeBatch(const CodecRecord *records, int nrecords,
				 int64 base_offset, uint64 xid,
				 int codec, int zstd_level,
				 char *out, size_t out_cap, size_t *out_len)
{
	CodecHeader h;
	size_t		raw;
	size_t		stored = 0;
	int			i;

	*out_len = 0;
	if (nrecords < 1 || (codec != CODEC_NONE && codec != CODEC_ZSTD))
		return CODEC_BAD_HEADER;
	raw = CodecRawSize(records, nrecords);
	if (raw > CODEC_MAX_PAYLOAD)
		return CODEC_BAD_HEADER;
	if (out_cap < CODEC_HEADER_SIZE)
		return CODEC_NO_SPACE;

	memset(&h, 0, sizeof(h));
	h.codec = CODEC_NONE;
	if (codec == CODEC_ZSTD)
	{
		/* a frame of raw bytes or more is no gain: cap it below raw */
		CodecResult r = codec_compress(records, nrecords, raw, zstd_level,
									   out + CODEC_HEADER_SIZE,
									   Min(out_cap - CODEC_HEADER_SIZE,
										   raw - 1),
									   &stored);

		if (r == CODEC_OK)
			h.codec = CODEC_ZSTD;
		else if (r != CODEC_NO_SPACE)
			return r;
	}
	if (h.codec == CODEC_NONE)
	{
		if (out_cap - CODEC_HEADER_SIZE < raw)
			return CODEC_NO_SPACE;
		codec_store_raw(records, nrecords, out + CODEC_HEADER_SIZE, raw);
		stored = raw;
	}

	h.record_count = (uint32) nrecords;
	h.flags = 0;
	h.base_offset = base_offset;
	h.payload_len = (uint32) stored;
	h.raw_len = (uint32) raw;
	h.first_timestamp = records[0].timestamp;
	h.max_timestamp = records[0].timestamp;
	for (i = 1; i < nrecords; i++)
		h.max_timestamp = Max(h.max_timestamp, records[i].timestamp);
	h.xid = xid;
	codec_put_header(out, &h);
	codec_seal_batch(out, 0, h.payload_len);
	*out_len = CODEC_HEADER_SIZE + stored;
	return CODEC_OK;
}

/*
 * CodecEncodeFiller
 *		Write a filler of len bytes (header included, at least
 *		CODEC_HEADER_SIZE) at out: padding in segment segment_id before the
 *		record with offset base_offset.
 */
CodecResult
CodecEncodeFiller(int64 segment_id, int64 base_offset, char *out, size_t len)
{
	CodecHeader h;

	if (len < CODEC_HEADER_SIZE ||
		len - CODEC_HEADER_SIZE > CODEC_MAX_PAYLOAD)
		return CODEC_BAD_HEADER;
	memset(&h, 0, sizeof(h));
	h.codec = CODEC_NONE;
	h.flags = CODEC_FLAG_FILLER;
	h.base_offset = base_offset;
	h.payload_len = h.raw_len = (uint32) (len - CODEC_HEADER_SIZE);
	memset(out + CODEC_HEADER_SIZE, 0, h.payload_len);
	codec_put_header(out, &h);
	codec_seal_batch(out, segment_id, h.payload_len);
	return CODEC_OK;
}

/*
 * CodecSetFlags
 *		Replace the flags of a batch of segment segment_id and recompute its
 *		header CRC.
 *
 * batch is a checked or freshly placed header; its payload need not be in
 * memory.
 */
void
CodecSetFlags(char *batch, int64 segment_id, uint32 flags)
{
	put_u32(batch + HDR_FLAGS, flags);
	codec_seal_header(batch, segment_id);
}

/*
 * CodecPlace
 *		Give an encoded batch its segment and base offset: store the offset
 *		and recompute the header CRC for that segment.
 *
 * A batch is encoded before its segment and offsets are known (compression
 * happens outside the append lock); the appender places it once reserved.
 */
void
CodecPlace(char *batch, int64 segment_id, int64 base_offset)
{
	put_u64(batch + HDR_BASE_OFFSET, (uint64) base_offset);
	codec_seal_header(batch, segment_id);
}

/*---- decoding ----*/

/*
 * CodecDecodeHeader
 *		Decode and sanity-check the batch header at the start of buf.
 *
 * The CRC is not checked: it covers the payload, which the caller reads
 * next and passes to CodecCheckBatch.  A zeroed header is CODEC_END and a
 * valid seal trailer CODEC_TRAILER (a trailer that fails its own checks
 * gives CodecDecodeTrailer's verdict, e.g. CODEC_BAD_CRC); *header is then
 * all zero.  With CODEC_BAD_HEADER the fields are filled in, for messages.
 */
CodecResult
CodecDecodeHeader(const char *buf, size_t len, CodecHeader *header)
{
	CodecTrailer trailer;
	CodecResult r;

	memset(header, 0, sizeof(*header));
	if (len < CODEC_HEADER_SIZE)
		return CODEC_SHORT;
	if (CheckAllZero(buf, CODEC_HEADER_SIZE))
		return CODEC_END;
	if (memcmp(buf + HDR_MAGIC, CODEC_TRAILER_MAGIC, 4) == 0)
	{
		r = CodecDecodeTrailer(buf, len, &trailer);
		return r == CODEC_OK ? CODEC_TRAILER : r;
	}
	if (memcmp(buf + HDR_MAGIC, CODEC_BATCH_MAGIC, 4) != 0)
		return CODEC_BAD_MAGIC;
	if (get_u16(buf + HDR_VERSION) != CODEC_VERSION)
		return CODEC_BAD_VERSION;

	header->codec = get_u16(buf + HDR_CODEC);
	header->record_count = get_u32(buf + HDR_COUNT);
	header->flags = get_u32(buf + HDR_FLAGS);
	header->base_offset = (int64) get_u64(buf + HDR_BASE_OFFSET);
	header->payload_len = get_u32(buf + HDR_PAYLOAD_LEN);
	header->raw_len = get_u32(buf + HDR_RAW_LEN);
	header->first_timestamp = (int64) get_u64(buf + HDR_FIRST_TS);
	header->max_timestamp = (int64) get_u64(buf + HDR_MAX_TS);
	header->xid = get_u64(buf + HDR_XID);
	header->payload_crc = get_u32(buf + HDR_PAYLOAD_CRC);
	header->crc = get_u32(buf + HDR_CRC);
	return CheckHeaderFields(header);
}

/*
 * CodecTornVoid
 *		Is a batch whose CodecCheckBatch failed one whose void mark was torn
 *		by a crash?  If so, set CODEC_FLAG_VOID in *header and return true.
 *
 * Marking a batch void rewrites its header in place (CodecSetFlags: the
 * VOID bit, in byte HDR_FLAGS, and the header CRC, 48 bytes further on).
 * A crash or a power loss can tear that write where the header crosses a
 * sector boundary (CODEC_SECTOR; the page cache's pages are whole
 * sectors): the bytes before the boundary come from one version and the
 * bytes after it from the other.  pos is the header's position in its
 * file, which says where a boundary can fall; a header that crosses none
 * cannot be torn.  Only a transaction's batch is ever marked void, and
 * only that one change is ever made, so the two possible tears are known
 * exactly: anything else (a flipped bit where no boundary lies, say) is
 * still corruption.  The payload's own CRC must check.
 */
bool
CodecTornVoid(const char *batch, size_t len, CodecHeader *header,
			  int64 segment_id, uint64 pos)
{
	char		before[CODEC_HEADER_SIZE];	/* the header not yet marked */
	char		after[CODEC_HEADER_SIZE];	/* the header marked void */
	uint32		flags = get_u32(batch + HDR_FLAGS);
	size_t		cut = (size_t) (CODEC_SECTOR - pos % CODEC_SECTOR);

	if (cut >= CODEC_HEADER_SIZE || len < CODEC_HEADER_SIZE ||
		len - CODEC_HEADER_SIZE < header->payload_len ||
		header->xid == 0 || (header->flags & CODEC_FLAG_FILLER) ||
		CodecCrc32c(batch + CODEC_HEADER_SIZE, header->payload_len) !=
		get_u32(batch + HDR_PAYLOAD_CRC))
		return false;

	memcpy(before, batch, CODEC_HEADER_SIZE);
	CodecSetFlags(before, segment_id, flags & ~(uint32) CODEC_FLAG_VOID);
	memcpy(after, batch, CODEC_HEADER_SIZE);
	CodecSetFlags(after, segment_id, flags | CODEC_FLAG_VOID);

	/* the write reached the disk up to the boundary, or only after it */
	if ((memcmp(batch, after, cut) == 0 &&
		 memcmp(batch + cut, before + cut, CODEC_HEADER_SIZE - cut) == 0) ||
		(memcmp(batch, before, cut) == 0 &&
		 memcmp(batch + cut, after + cut, CODEC_HEADER_SIZE - cut) == 0))
	{
		header->flags |= CODEC_FLAG_VOID;
		return true;
	}
	return false;
}

/*
 * CodecCheckHeader
 *		Whether a decoded header's CRC holds for a batch of segment
 *		segment_id: the header alone (buf holds at least its 64 bytes), for
 *		a walk over the headers that does not read the payloads.
 */
CodecResult
CodecCheckHeader(const char *buf, const CodecHeader *header, int64 segment_id)
{
	uint32		crc = codec_header_crc(buf, segment_id);

	if (crc != get_u32(buf + HDR_CRC) || crc != header->crc)
		return CODEC_BAD_CRC;
	return CODEC_OK;
}

/*
 * CodecCheckBatch
 *		Verify the CRCs of a batch whose header CodecDecodeHeader accepted,
 *		as a batch of segment segment_id.
 *
 * batch holds len bytes: the header, then at least payload_len bytes.
 */
CodecResult
CodecCheckBatch(const char *batch, size_t len, const CodecHeader *header,
				int64 segment_id)
{
	uint32		crc;

	if (len < CODEC_HEADER_SIZE ||
		len - CODEC_HEADER_SIZE < header->payload_len)
		return CODEC_SHORT;
	if (CodecCheckHeader(batch, header, segment_id) != CODEC_OK)
		return CODEC_BAD_CRC;
	crc = CodecCrc32c(batch + CODEC_HEADER_SIZE, header->payload_len);
	if (crc != get_u32(batch + HDR_PAYLOAD_CRC) || crc != header->payload_crc)
		return CODEC_BAD_CRC;
	return CODEC_OK;
}

/*
 * Decompress a zstd payload into scratch.  The payload must be exactly one
 * frame that declares, and yields, raw_len bytes.
 */
static CodecResult
codec_decompress(const CodecHeader *header, const char *payload,
				 char *scratch, size_t scratch_cap)
{
	unsigned long long declared;
	size_t		n;

	if (scratch_cap < header->raw_len)
		return CODEC_NO_SPACE;
	declared = ZSTD_getFrameContentSize(payload, header->payload_len);
	if (declared != header->raw_len)
		return CODEC_BAD_PAYLOAD;
	n = ZSTD_findFrameCompressedSize(payload, header->payload_len);
	if (ZSTD_isError(n) || n != header->payload_len)
		return CODEC_BAD_PAYLOAD;
	n = ZSTD_decompress(scratch, header->raw_len, payload,
						header->payload_len);
	if (ZSTD_isError(n) || n != header->raw_len)
		return CODEC_BAD_PAYLOAD;
	return CODEC_OK;
}

/*
 * CodecDecodeRecords
 *		Parse a checked batch's payload into header->record_count records.
 *
 * A zstd payload is decompressed into scratch (raw_len bytes needed) and
 * the records point there; otherwise they point into payload.  The raw
 * bytes must hold exactly record_count records, no more, no less.
 */
CodecResult
CodecDecodeRecords(const CodecHeader *header, const char *payload,
				   char *scratch, size_t scratch_cap,
				   CodecRecord *records)
{
	const char *raw = payload;
	size_t		len = header->raw_len;
	size_t		pos = 0;
	CodecResult r;
	uint32		i;

	if ((r = CheckHeaderFields(header)) != CODEC_OK)
		return r;
	if (header->flags & CODEC_FLAG_FILLER)
		return CODEC_OK;		/* padding: its bytes are no records */
	if (header->codec == CODEC_ZSTD)
	{
		if ((r = codec_decompress(header, payload, scratch,
								  scratch_cap)) != CODEC_OK)
			return r;
		raw = scratch;
	}

	for (i = 0; i < header->record_count; i++)
	{
		CodecRecord *rec = &records[i];

		if (!CheckField(raw, len, &pos, &rec->key, &rec->key_len) ||
			!CheckField(raw, len, &pos, &rec->value, &rec->value_len) ||
			!CheckField(raw, len, &pos, &rec->headers, &rec->headers_len) ||
			len - pos < 8)
			return CODEC_BAD_PAYLOAD;
		rec->timestamp = (int64) get_u64(raw + pos);
		pos += 8;
	}
	return pos == len ? CODEC_OK : CODEC_BAD_PAYLOAD;
}

/*---- seal trailer ----*/

/*
 * CodecEncodeTrailer
 *		Write the seal trailer into out's CODEC_TRAILER_SIZE bytes.
 */
void
CodecEncodeTrailer(const CodecTrailer *trailer, char *out)
{
	memset(out, 0, CODEC_TRAILER_SIZE);
	memcpy(out + TRL_MAGIC, CODEC_TRAILER_MAGIC, 4);
	put_u16(out + TRL_VERSION, CODEC_VERSION);
	put_u64(out + TRL_SEGMENT_ID, (uint64) trailer->segment_id);
	put_u64(out + TRL_END_OFFSET, (uint64) trailer->end_offset);
	put_u64(out + TRL_BYTE_SIZE, (uint64) trailer->byte_size);
	put_u64(out + TRL_SEALED_AT, (uint64) trailer->sealed_at);
	put_u32(out + TRL_CRC, CodecCrc32c(out, TRL_CRC));
}

/*
 * CodecDecodeTrailer
 *		Decode and verify a seal trailer at the start of buf.
 */
CodecResult
CodecDecodeTrailer(const char *buf, size_t len, CodecTrailer *trailer)
{
	memset(trailer, 0, sizeof(*trailer));
	if (len < CODEC_TRAILER_SIZE)
		return CODEC_SHORT;
	if (memcmp(buf + TRL_MAGIC, CODEC_TRAILER_MAGIC, 4) != 0)
		return CODEC_BAD_MAGIC;
	if (CodecCrc32c(buf, TRL_CRC) != get_u32(buf + TRL_CRC))
		return CODEC_BAD_CRC;
	if (get_u16(buf + TRL_VERSION) != CODEC_VERSION)
		return CODEC_BAD_VERSION;
	if (get_u16(buf + TRL_RESERVED1) != 0 ||
		!CheckAllZero(buf + TRL_RESERVED2, TRL_RESERVED2_LEN))
		return CODEC_BAD_HEADER;

	trailer->segment_id = (int64) get_u64(buf + TRL_SEGMENT_ID);
	trailer->end_offset = (int64) get_u64(buf + TRL_END_OFFSET);
	trailer->byte_size = (int64) get_u64(buf + TRL_BYTE_SIZE);
	trailer->sealed_at = (int64) get_u64(buf + TRL_SEALED_AT);
	return CODEC_OK;
}

/*---- messages ----*/

/*
 * CodecResultString
 *		A short lower-case phrase for a result, for error messages.
 */
const char *
CodecResultString(CodecResult result)
{
	switch (result)
	{
		case CODEC_OK:
			return "ok";
		case CODEC_END:
			return "end of data";
		case CODEC_TRAILER:
			return "seal trailer";
		case CODEC_SHORT:
			return "truncated data";
		case CODEC_BAD_MAGIC:
			return "bad magic number";
		case CODEC_BAD_VERSION:
			return "unsupported format version";
		case CODEC_BAD_HEADER:
			return "invalid header";
		case CODEC_BAD_CRC:
			return "checksum mismatch";
		case CODEC_BAD_PAYLOAD:
			return "corrupt payload";
		case CODEC_NO_SPACE:
			return "output buffer too small";
		case CODEC_ZSTD_ERROR:
			return "zstd compression failed";
	}
	return "unknown codec result";
}
