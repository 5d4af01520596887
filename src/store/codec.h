/*-------------------------------------------------------------------------
 *
 * codec.h
 *	  The on-disk encoding of record batches and seal trailers.
 *
 * A segment file is a sequence of batches, optionally ended by a seal
 * trailer.  Everything is little-endian, written byte by byte, so a file
 * reads the same on any host.  This file and codec.c depend only on c.h,
 * pg_crc32c and libzstd: the server, the unit test binary and the fuzz
 * target link the same code.
 *
 * Batch header (CODEC_HEADER_SIZE = 64 bytes):
 *
 *	 off size field
 *	   0   4 magic "MLCB" (bytes 'M','L','C','B')
 *	   4   2 format version (CODEC_VERSION)
 *	   6   2 codec: CODEC_NONE or CODEC_ZSTD
 *	   8   4 record count (>= 1; 0 in a filler)
 *	  12   4 flags (CODEC_FLAG_*)
 *	  16   8 base offset (offset of the first record)
 *	  24   4 payload length: bytes stored after the header
 *	  28   4 raw length: bytes of the encoded records before compression
 *	  32   8 first timestamp (TimestampTz: microseconds since 2000-01-01)
 *	  40   8 max timestamp
 *	  48   8 producing transaction id (FullTransactionId; 0 = immediate)
 *	  56   4 payload CRC32C: over the stored payload
 *	  60   4 header CRC32C: over the segment id (8 bytes, not stored), then
 *	         bytes [0, 60) (the payload CRC included)
 *
 * The segment id in the header CRC ties a batch to its segment: a file that
 * held another segment before (a recycled file, segfile.c) may hold that
 * segment's batches after the data, and they fail the check as any garbage
 * would, whatever offsets they carry.
 *
 * Raw payload: record_count records, each
 *
 *	   4 key length, or CODEC_NULL_LEN for a NULL key;  key bytes
 *	   4 value length, or CODEC_NULL_LEN for a NULL value;  value bytes
 *	   4 headers length, or CODEC_NULL_LEN for none;  headers bytes (JSON text)
 *	   8 timestamp
 *
 * With CODEC_ZSTD the stored payload is one zstd frame of the raw payload;
 * with CODEC_NONE it is the raw payload itself (payload length = raw length).
 *
 * A filler (flag CODEC_FLAG_FILLER) is a batch of no records: codec NONE,
 * record count 0, base offset = the offset of the next record, transaction
 * id 0, a payload of zero bytes (possibly none) under the usual CRC.  It
 * pads the file so that a large batch can start and end on a block
 * boundary and be written with direct I/O (append.c); readers step over it.
 *
 * Seal trailer (CODEC_TRAILER_SIZE = 64 bytes), written after the last
 * batch when a segment is fenced:
 *
 *	   0   4 magic "MLCS"
 *	   4   2 format version
 *	   6   2 reserved, zero
 *	   8   8 segment id
 *	  16   8 end offset (one past the last record)
 *	  24   8 byte size: file position where the trailer starts
 *	  32   8 sealed-at timestamp
 *	  40  20 reserved, zero
 *	  60   4 CRC32C over bytes [0, 60)
 *
 * A region of zero bytes (preallocated space) decodes as CODEC_END: the end
 * of the data, not corruption.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_CODEC_H
#define MALACHI_CODEC_H

#include "c.h"

#define CODEC_HEADER_SIZE	64
#define CODEC_SECTOR		512		/* the smallest unit a disk writes whole */
#define CODEC_TRAILER_SIZE	64
#define CODEC_VERSION		2		/* 2: the header CRC covers the segment id */
#define CODEC_NULL_LEN		0xFFFFFFFFu

/* Largest stored or raw payload of one batch */
#define CODEC_MAX_PAYLOAD	(256 * 1024 * 1024)

/* codecs */
#define CODEC_NONE			0
#define CODEC_ZSTD			1

/* flags */
#define CODEC_FLAG_VOID		0x0001	/* transaction aborted: skip on read */
#define CODEC_FLAG_FILLER	0x0002	/* padding: no records */

/* results of decoding */
typedef enum CodecResult
{
	CODEC_OK = 0,
	CODEC_END,					/* all-zero header: end of written data */
	CODEC_TRAILER,				/* a valid seal trailer, not a batch */
	CODEC_SHORT,				/* input ends before the structure does */
	CODEC_BAD_MAGIC,
	CODEC_BAD_VERSION,
	CODEC_BAD_HEADER,			/* impossible lengths, counts or codec */
	CODEC_BAD_CRC,
	CODEC_BAD_PAYLOAD,			/* decompression or record parsing failed */
	CODEC_NO_SPACE,				/* output buffer too small */
	CODEC_ZSTD_ERROR			/* compression failed */
} CodecResult;

/* One record, pointing at bytes the caller owns. */
typedef struct CodecRecord
{
	const char *key;			/* NULL for a NULL key */
	uint32		key_len;
	const char *value;			/* NULL for a NULL value */
	uint32		value_len;
	const char *headers;		/* NULL when there are none */
	uint32		headers_len;
	int64		timestamp;
} CodecRecord;

/* A decoded batch header. */
typedef struct CodecHeader
{
	uint16		codec;
	uint32		record_count;
	uint32		flags;
	int64		base_offset;
	uint32		payload_len;
	uint32		raw_len;
	int64		first_timestamp;
	int64		max_timestamp;
	uint64		xid;
	uint32		payload_crc;
	uint32		crc;			/* the header CRC */
} CodecHeader;

/* A decoded seal trailer. */
typedef struct CodecTrailer
{
	int64		segment_id;
	int64		end_offset;
	int64		byte_size;
	int64		sealed_at;
} CodecTrailer;

/* encoding */
extern uint32 CodecCrc32c(const void *data, size_t len);
extern size_t CodecRawSize(const CodecRecord *records, int nrecords);
extern size_t CodecBatchBound(const CodecRecord *records, int nrecords,
							  int codec);
extern CodecResult CodecEncodeBatch(const CodecRecord *records, int nrecords,
									int64 base_offset, uint64 xid,
									int codec, int zstd_level,
									char *out, size_t out_cap,
									size_t *out_len);
extern CodecResult CodecEncodeFiller(int64 segment_id, int64 base_offset,
									 char *out, size_t len);
extern void CodecSetFlags(char *batch, int64 segment_id, uint32 flags);
extern void CodecPlace(char *batch, int64 segment_id, int64 base_offset);
extern void CodecEncodeTrailer(const CodecTrailer *trailer, char *out);

/* decoding */
extern CodecResult CodecDecodeHeader(const char *buf, size_t len,
									 CodecHeader *header);
extern CodecResult CodecCheckHeader(const char *buf,
									const CodecHeader *header,
									int64 segment_id);
extern CodecResult CodecCheckBatch(const char *batch, size_t len,
								   const CodecHeader *header,
								   int64 segment_id);
extern bool CodecTornVoid(const char *batch, size_t len, CodecHeader *header,
						  int64 segment_id, uint64 pos);
extern CodecResult CodecDecodeRecords(const CodecHeader *header,
									  const char *payload,
									  char *scratch, size_t scratch_cap,
									  CodecRecord *records);
extern CodecResult CodecDecodeTrailer(const char *buf, size_t len,
									  CodecTrailer *trailer);
extern const char *CodecResultString(CodecResult result);

#endif							/* MALACHI_CODEC_H */
