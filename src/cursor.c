/*-------------------------------------------------------------------------
 *
 * cursor.c
 *	  Positions in a range's cross-epoch stream, and cursors that carry them.
 *
 * The stream of a range is the records its ancestors hold for its slice,
 * oldest ancestor first, then its own records.  It is built recursively:
 * the stream of a range is, for each parent in order, the parent's stream
 * restricted to the range's slice, then the range's own records.  A split
 * child thus reads its parent's records of its half; a merge child reads
 * one parent's slice fully, then the other's.  Every ancestor comes before
 * its descendants, so each key's records arrive in the order they were
 * produced, across any number of splits and merges.
 *
 * A position (StreamPos) lists the sources not yet finished, each with the
 * slice of keys it contributes and the next offset to read.  Positions of
 * consumer groups are stored as bigint[] in malachi.group_positions;
 * readers of read_consume and stream_history get them as opaque cursors:
 * base64 of a versioned binary image with a CRC32C.  Both are validated
 * against the range's history: every source must be an ancestor (or the
 * range itself) with exactly the slice the stream takes from it, in stream
 * order.  A forged cursor can therefore only ever name records of the
 * range's own stream: it is refused, never read as something else.
 *
 * Ranges never change their slice or parents (a trigger forbids it), so a
 * range's place in the history is cached per backend; the cache is dropped
 * when the metadata generation moves, which covers a dropped topic.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/base64.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "port/pg_bswap.h"
#include "port/pg_crc32c.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "cursor.h"
#include "errors.h"
#include "metacache.h"
#include "read.h"
#include "util.h"

/* Cursor image: magic and version, range, count, entries, CRC32C */
#define CURSOR_MAGIC		0x4d430001	/* "MC", version 1 */
#define CURSOR_HEADER_SIZE	(4 + 8 + 4)
#define CURSOR_ENTRY_SIZE	(4 * 8)
#define CURSOR_MAX_ENTRIES	65536

/*
 * Cached StreamRange with its stream's start.  The hash and everything its
 * entries point to live in stream_ranges_cxt, dropped whole when the
 * metadata generation moves: a pointer into the cache is good only until
 * the next lookup (StreamRangeGet hands out copies).
 */
typedef struct StreamRangeEntry
{
	int64		range_id;		/* hash key */
	StreamRange range;
	StreamPos  *start;			/* built on first use; stream_ranges_cxt */
} StreamRangeEntry;

static MemoryContext stream_ranges_cxt = NULL;
static HTAB *stream_ranges = NULL;
static uint64 stream_ranges_generation = 0;

static SpiQuery q_range = {
	"SELECT topic_id, key_lo, key_hi, parents FROM malachi.range_meta "
	"WHERE range_id = $1",
	1, {INT8OID}, NULL
};

/* The cache entry of a range, loaded when missing; no_such_range. */
static StreamRangeEntry *
stream_range_entry(int64 range_id)
{
	StreamRangeEntry *entry;
	bool		found;
	uint64		generation = MetaCacheGeneration();
	Datum		args[1] = {Int64GetDatum(range_id)};
	ArrayType  *parents;
	Datum	   *elems;
	int			nelems;
	int			i;
	bool		isnull;

	if (stream_ranges != NULL && stream_ranges_generation != generation)
	{
		MemoryContextDelete(stream_ranges_cxt);
		stream_ranges_cxt = NULL;
		stream_ranges = NULL;
	}
	if (stream_ranges == NULL)
	{
		stream_ranges_cxt = AllocSetContextCreate(CacheMemoryContext,
												  "malachi stream ranges",
												  ALLOCSET_SMALL_SIZES);
		stream_ranges = Int64HashCreate("malachi stream ranges",
										sizeof(StreamRangeEntry),
										stream_ranges_cxt);
		stream_ranges_generation = generation;
	}
	entry = hash_search(stream_ranges, &range_id, HASH_FIND, NULL);
	if (entry != NULL)
		return entry;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SpiQueryRun(&q_range, args, GetLatestSnapshot()) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
				 errmsg("range " INT64_FORMAT " does not exist", range_id)));
	parents = DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 4, &isnull));
	deconstruct_array(parents, INT8OID, 8, true, TYPALIGN_DOUBLE,
					  &elems, NULL, &nelems);

	entry = hash_search(stream_ranges, &range_id, HASH_ENTER, &found);
	entry->range.range_id = range_id;
	entry->range.topic_id = SpiInt64(0, 1, NULL);
	entry->range.key_lo = SpiInt64(0, 2, NULL);
	entry->range.key_hi = SpiInt64(0, 3, NULL);
	entry->range.nparents = nelems;
	entry->range.parents = MemoryContextAlloc(stream_ranges_cxt,
											  sizeof(int64) * Max(nelems, 1));
	for (i = 0; i < nelems; i++)
		entry->range.parents[i] = DatumGetInt64(elems[i]);
	entry->start = NULL;
	SPI_finish();
	return entry;
}

/*
 * A range's slice and parents, copied (a later lookup may drop the cache);
 * no_such_range when it does not exist.
 */
const StreamRange *
StreamRangeGet(int64 range_id)
{
	const StreamRange *cached = &stream_range_entry(range_id)->range;
	StreamRange *copy = palloc(sizeof(StreamRange));

	*copy = *cached;
	copy->parents = palloc(sizeof(int64) * Max(cached->nparents, 1));
	memcpy(copy->parents, cached->parents, sizeof(int64) * cached->nparents);
	return copy;
}

/* An empty position in a range's stream. */
StreamPos *
StreamPosNew(int64 range_id)
{
	StreamPos  *pos = palloc0(sizeof(StreamPos));

	pos->range_id = range_id;
	pos->topic_id = StreamRangeGet(range_id)->topic_id;
	pos->cap = 4;
	pos->entries = palloc(sizeof(StreamEntry) * pos->cap);
	return pos;
}

void
StreamPosAppend(StreamPos *pos, const StreamEntry *entry)
{
	if (pos->n == pos->cap)
	{
		pos->cap *= 2;
		pos->entries = repalloc(pos->entries, sizeof(StreamEntry) * pos->cap);
	}
	pos->entries[pos->n++] = *entry;
}

/*
 * StreamPosRestrict
 *		Append to dst the entries of src (a parent's position) narrowed to
 *		dst's range's slice; entries whose slice misses it are dropped.
 */
void
StreamPosRestrict(StreamPos *dst, const StreamPos *src)
{
	const StreamRange *r = StreamRangeGet(dst->range_id);
	int			i;

	for (i = 0; i < src->n; i++)
	{
		StreamEntry e = src->entries[i];

		e.key_lo = Max(e.key_lo, r->key_lo);
		e.key_hi = Min(e.key_hi, r->key_hi);
		if (e.key_lo < e.key_hi)
			StreamPosAppend(dst, &e);
	}
}

/* A copy of a position, in the current memory context. */
StreamPos *
StreamPosCopy(const StreamPos *src)
{
	StreamPos  *pos = palloc(sizeof(StreamPos));

	*pos = *src;
	pos->cap = Max(src->n, 4);
	pos->entries = palloc(sizeof(StreamEntry) * pos->cap);
	memcpy(pos->entries, src->entries, sizeof(StreamEntry) * src->n);
	return pos;
}

/*
 * The start of a range's stream, cached (stream_ranges_cxt): good until
 * the next lookup in the cache.
 */
static const StreamPos *
stream_start_cached(int64 range_id)
{
	StreamRangeEntry *entry = stream_range_entry(range_id);
	StreamRange range;
	int64	   *parents;
	StreamPos  *pos;
	StreamEntry own;
	int			i;

	if (entry->start != NULL)
		return entry->start;
	check_stack_depth();
	/* copies: a metadata change seen during the recursion resets the cache */
	range = entry->range;
	parents = palloc(sizeof(int64) * Max(range.nparents, 1));
	memcpy(parents, range.parents, sizeof(int64) * range.nparents);
	pos = StreamPosNew(range_id);
	for (i = 0; i < range.nparents; i++)
		StreamPosRestrict(pos, StreamPosCopy(stream_start_cached(parents[i])));
	own.source_id = range_id;
	own.key_lo = range.key_lo;
	own.key_hi = range.key_hi;
	own.offset = 0;
	StreamPosAppend(pos, &own);

	/* look the entry up again, for the same reason */
	entry = stream_range_entry(range_id);
	if (entry->start == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(stream_ranges_cxt);

		entry->start = StreamPosCopy(pos);
		MemoryContextSwitchTo(old);
	}
	return entry->start;
}

/*
 * StreamStart
 *		The beginning of a range's stream: every ancestor's records for its
 *		slice, oldest first, then its own, all from offset 0.
 */
StreamPos *
StreamStart(int64 range_id)
{
	return StreamPosCopy(stream_start_cached(range_id));
}

/*
 * StreamPosOwnOffset
 *		The next offset of the range's own records: 0 while the stream is
 *		still in its ancestors, -1 when it was read to its end.  "Still in
 *		its ancestors" is any ancestor entry left, also one before an own
 *		entry past 0 (a reset to a time puts the range's own records
 *		stamped before it behind): reported as that own offset, the
 *		position fed back would drop the ancestors' records.
 */
int64
StreamPosOwnOffset(const StreamPos *pos)
{
	if (pos->n == 0)
		return -1;
	if (pos->entries[0].source_id != pos->range_id)
		return 0;
	return pos->entries[pos->n - 1].offset;
}

/* Report a cursor or stored position that does not fit its range. */
static void
invalid_position(const char *what, int64 range_id, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_MALACHI_INVALID_CURSOR),
			 errmsg("invalid %s for range " INT64_FORMAT, what, range_id),
			 errdetail("%s", detail),
			 strcmp(what, "cursor") == 0 ?
			 errhint("Start from a NULL cursor, or pass the next_cursor a page returned for this range.") :
			 errhint("Set the group's positions again with malachi.reset_group() or malachi.commit_offset().")));
}

/*
 * A cursor's (or a stored position's) offsets lie within what its sources
 * hold: readable ends only move forward, so an offset past one is a cursor
 * of another installation (whose range ids the new one reuses), forged, or
 * of records a crash took back (synchronous_commit = off): resuming there
 * would silently skip the offsets before it once they are produced.
 */
static void
cursor_check_ends(const StreamPos *pos, const char *what)
{
	int			i;

	for (i = 0; i < pos->n; i++)
	{
		const StreamEntry *e = &pos->entries[i];
		int64		end = ReadRangeEnd(e->source_id, NULL);

		if (e->offset > end)
			invalid_position(what, pos->range_id,
							 psprintf("It holds offset " INT64_FORMAT " of range " INT64_FORMAT ", past the range's end " INT64_FORMAT ".",
									  e->offset, e->source_id, end));
	}
}

/*
 * StreamPosValidate
 *		A position's entries must be a subsequence of its range's stream
 *		(same sources, same slices, in order) with offsets that are not
 *		negative, ending with the range's own records unless it is empty
 *		(only a sealed range is ever read to its end).
 */
void
StreamPosValidate(const StreamPos *pos, const char *what)
{
	const StreamPos *full = stream_start_cached(pos->range_id);
	int			j = 0;
	int			i;

	for (i = 0; i < pos->n; i++)
	{
		const StreamEntry *e = &pos->entries[i];

		if (e->offset < 0)
			invalid_position(what, pos->range_id, "It holds a negative offset.");
		while (j < full->n &&
			   (full->entries[j].source_id != e->source_id ||
				full->entries[j].key_lo != e->key_lo ||
				full->entries[j].key_hi != e->key_hi))
			j++;
		if (j == full->n)
			invalid_position(what, pos->range_id,
							 psprintf("It names range " INT64_FORMAT " [" INT64_FORMAT ", " INT64_FORMAT "), which is not in this range's history there.",
									  e->source_id, e->key_lo, e->key_hi));
		j++;
	}
	if (pos->n > 0 && pos->entries[pos->n - 1].source_id != pos->range_id)
		invalid_position(what, pos->range_id,
						 "It does not end with the range's own records.");
	if (pos->n == 0)
	{
		bool		sealed;

		(void) ReadRangeEnd(pos->range_id, &sealed);
		if (!sealed)
			invalid_position(what, pos->range_id,
							 "It is empty (read to the end), but the range is still active.");
	}
}

/* Big-endian writers and readers of the cursor image. */
static char *
put64(char *p, int64 v)
{
	uint64		be = pg_hton64((uint64) v);

	memcpy(p, &be, 8);
	return p + 8;
}

static const char *
get64(const char *p, int64 *v)
{
	uint64		be;

	memcpy(&be, p, 8);
	*v = (int64) pg_ntoh64(be);
	return p + 8;
}

static char *
put32(char *p, uint32 v)
{
	uint32		be = pg_hton32(v);

	memcpy(p, &be, 4);
	return p + 4;
}

static const char *
get32(const char *p, uint32 *v)
{
	uint32		be;

	memcpy(&be, p, 4);
	*v = pg_ntoh32(be);
	return p + 4;
}

/* The opaque text form of a position. */
text *
CursorEncode(const StreamPos *pos)
{
	Size		len = CURSOR_HEADER_SIZE + CURSOR_ENTRY_SIZE * pos->n + 4;
	char	   *image = palloc(len);
	char	   *p = image;
	pg_crc32c	crc;
	int			enclen;
	text	   *result;
	int			i;

	p = put32(p, CURSOR_MAGIC);
	p = put64(p, pos->range_id);
	p = put32(p, (uint32) pos->n);
	for (i = 0; i < pos->n; i++)
	{
		p = put64(p, pos->entries[i].source_id);
		p = put64(p, pos->entries[i].key_lo);
		p = put64(p, pos->entries[i].key_hi);
		p = put64(p, pos->entries[i].offset);
	}
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, image, p - image);
	FIN_CRC32C(crc);
	p = put32(p, crc);

	enclen = pg_b64_enc_len(len);
	result = palloc(VARHDRSZ + enclen);
	enclen = pg_b64_encode(image, len, VARDATA(result), enclen);
	if (enclen < 0)
		elog(ERROR, "could not encode a cursor");
	SET_VARSIZE(result, VARHDRSZ + enclen);
	return result;
}

/* Report a cursor that is not one of ours. */
static void
malformed_cursor(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_MALACHI_INVALID_CURSOR),
			 errmsg("malformed cursor"),
			 errdetail("%s", detail),
			 errhint("Pass a next_cursor exactly as a page returned it, or NULL to start from the beginning.")));
}

/*
 * CursorDecode
 *		The position a cursor carries, checked to be intact (CRC), to belong
 *		to range_id, and to fit the range's history; an error otherwise.
 */
StreamPos *
CursorDecode(text *cursor, int64 range_id)
{
	int			srclen = VARSIZE_ANY_EXHDR(cursor);
	int			declen = pg_b64_dec_len(srclen);
	char	   *image;
	const char *p;
	int			len;
	uint32		magic;
	uint32		n;
	uint32		crc_stored;
	pg_crc32c	crc;
	int64		cursor_range;
	StreamPos  *pos;
	uint32		i;

	if (srclen == 0 || srclen > 4 * (CURSOR_HEADER_SIZE + 4 +
									 CURSOR_ENTRY_SIZE * CURSOR_MAX_ENTRIES) / 3 + 4)
		malformed_cursor("Its length is wrong.");
	image = palloc(declen);
	len = pg_b64_decode(VARDATA_ANY(cursor), srclen, image, declen);
	if (len < CURSOR_HEADER_SIZE + 4)
		malformed_cursor("It is not a cursor Malachi made.");
	p = get32(image, &magic);
	p = get64(p, &cursor_range);
	p = get32(p, &n);
	if (magic != CURSOR_MAGIC || n > CURSOR_MAX_ENTRIES ||
		len != CURSOR_HEADER_SIZE + CURSOR_ENTRY_SIZE * (int) n + 4)
		malformed_cursor("It is not a cursor Malachi made.");
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, image, len - 4);
	FIN_CRC32C(crc);
	(void) get32(image + len - 4, &crc_stored);
	if (crc != crc_stored)
		malformed_cursor("Its checksum does not match: it was altered.");
	if (cursor_range != range_id)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_INVALID_CURSOR),
				 errmsg("cursor belongs to range " INT64_FORMAT ", not to range " INT64_FORMAT,
						cursor_range, range_id),
				 errhint("Pass each range its own cursor.")));

	pos = StreamPosNew(range_id);
	for (i = 0; i < n; i++)
	{
		StreamEntry e;

		p = get64(p, &e.source_id);
		p = get64(p, &e.key_lo);
		p = get64(p, &e.key_hi);
		p = get64(p, &e.offset);
		StreamPosAppend(pos, &e);
	}
	StreamPosValidate(pos, "cursor");
	cursor_check_ends(pos, "cursor");
	return pos;
}

/* A position as stored in malachi.group_positions.pending. */
ArrayType *
StreamPosToArray(const StreamPos *pos)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(pos->n * 4, 1));
	int			i;

	for (i = 0; i < pos->n; i++)
	{
		elems[4 * i] = Int64GetDatum(pos->entries[i].source_id);
		elems[4 * i + 1] = Int64GetDatum(pos->entries[i].key_lo);
		elems[4 * i + 2] = Int64GetDatum(pos->entries[i].key_hi);
		elems[4 * i + 3] = Int64GetDatum(pos->entries[i].offset);
	}
	return construct_array(elems, pos->n * 4, INT8OID, 8, true, TYPALIGN_DOUBLE);
}

/* The position a stored bigint[] holds, validated like a cursor. */
StreamPos *
StreamPosFromArray(ArrayType *array, int64 range_id)
{
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	StreamPos  *pos = StreamPosNew(range_id);
	int			i;

	deconstruct_array(array, INT8OID, 8, true, TYPALIGN_DOUBLE,
					  &elems, &nulls, &nelems);
	if (nelems % 4 != 0 || ARR_NDIM(array) > 1)
		invalid_position("stored position", range_id,
						 "It is not a list of (range, key_lo, key_hi, offset).");
	for (i = 0; i < nelems; i += 4)
	{
		StreamEntry e;

		if (nulls[i] || nulls[i + 1] || nulls[i + 2] || nulls[i + 3])
			invalid_position("stored position", range_id, "It holds a NULL.");
		e.source_id = DatumGetInt64(elems[i]);
		e.key_lo = DatumGetInt64(elems[i + 1]);
		e.key_hi = DatumGetInt64(elems[i + 2]);
		e.offset = DatumGetInt64(elems[i + 3]);
		StreamPosAppend(pos, &e);
	}
	StreamPosValidate(pos, "stored position");
	cursor_check_ends(pos, "stored position");
	return pos;
}
