/*-------------------------------------------------------------------------
 *
 * read.c
 *	  Reading a range: records by offset, across sealed and active segments.
 *
 * A range's segments tile its offsets.  Sealed segments are read up to the
 * end the control plane recorded; the active head only up to its visible
 * edge in shared memory (written and durable), so a reader never sees what
 * a crash could take away.  Within a segment a sparse index of batch
 * positions, kept per backend and for sealed segments also in a file
 * beside the segment (<id>.idx, segindex.c; rebuilt when missing or
 * damaged), finds the batch that holds an offset without scanning from
 * the start.  The sweeper saves a head's index too, up to its settled
 * prefix (ReadSaveHeadIndex), for the head's recovery; the first reader
 * of the segment once sealed completes it.  Each
 * point also carries the newest timestamp of the batches before it, and
 * the index the newest of the whole segment, so that offset_for_time
 * steps over whole segments and most of a segment without reading them.
 *
 * Rules:
 * - No SPI query per read while nothing changed: a range's segment list is
 *   cached per backend and reloaded when the writer's segments epoch or
 *   the metadata epoch moved.
 * - A batch that fails its CRC inside what was acknowledged is corruption:
 *   data_corrupted (XX001) naming the segment, offset and position, never
 *   garbage and never a silent stop.
 * - A head whose end cannot be learned (its file cannot be recovered) makes
 *   the read fail with metadata_unavailable, rather than answer an empty
 *   page that would look like "caught up".
 * - Batches of aborted transactions are skipped: marked VOID in the file,
 *   or, until that mark is on disk, listed void in the head's view.  A
 *   head's visible edge stops at the first batch still in doubt.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "append.h"
#include "catalog.h"
#include "codec.h"
#include "errors.h"
#include "inject.h"
#include "metacache.h"
#include "read.h"
#include "segfile.h"
#include "segindex.h"
#include "util.h"
#include "writer.h"

/* How often a long poll on a range with no head looks again */
#define READ_NO_HEAD_POLL_MS	10

/* Distance between two points of the sparse index */
#define READ_INDEX_STEP		(64 * 1024)
/*
 * Segments whose index a backend keeps (1,024 points, 16 kB, for a full
 * 64 MB segment): when the cache is full it starts over.
 */
#define READ_INDEX_CACHE_MAX	1024


/* One segment of a range, as the control plane records it. */
typedef struct SegInfo
{
	int64		segment_id;
	int64		base_offset;
	int64		end_offset;		/* sealed only */
	int64		byte_size;		/* sealed only */
	bool		active;
} SegInfo;

/* A range's segments, cached per backend. */
typedef struct RangeSegments
{
	int64		range_id;		/* hash key */
	uint64		segments_epoch;
	uint64		metadata_epoch;
	int64		final_end;		/* a sealed range's final end (range_meta);
								 * -1 while the range is active */
	int			nsegs;
	SegInfo    *segs;			/* by seq; CacheMemoryContext */
} RangeSegments;

/* A segment's sparse index, cached per backend. */
typedef struct SegIndex
{
	int64		segment_id;		/* hash key */
	int			npoints;
	int			cap;
	SegIndexPoint *points;		/* ascending; TopMemoryContext */
	int64		max_ts;			/* newest timestamp of the batches walked (all
								 * of them once complete); PG_INT64_MIN if
								 * none */
	bool		complete;		/* covers the whole sealed segment */
	bool		damaged;		/* a sealed segment's walk stopped at a
								 * batch that does not check: the points
								 * end before it (walked again per call) */
	int64		damaged_offset; /* where, when damaged */
	uint64		damaged_pos;
} SegIndex;

static HTAB *range_segments = NULL;
static HTAB *seg_indexes = NULL;
static uint64 seg_indexes_resets = 0;	/* MetaCacheResets() they are of */

/*
 * Buffers read_segment reuses from batch to batch (TopMemoryContext): the
 * batch as read, its decoded records, its decompressed payload.  A read
 * allocates them once instead of once per batch.
 */
static char *read_buf = NULL;
static Size read_buf_cap = 0;
static char *read_records = NULL;
static Size read_records_cap = 0;
static char *read_raw = NULL;
static Size read_raw_cap = 0;

/* Where ReadPutRecord builds a row's values; emptied after each row. */
static MemoryContext read_row_cxt = NULL;

/*
 * Scratch buffers larger than this are given back after each range read:
 * one batch of very many records must not hold its size in every backend
 * that once read it.
 */
#define READ_SCRATCH_KEEP	(16 * 1024 * 1024)

/* Free a scratch buffer grown past READ_SCRATCH_KEEP. */
static void
read_trim(char **buf, Size *cap)
{
	if (*buf != NULL && *cap > READ_SCRATCH_KEEP)
	{
		pfree(*buf);
		*buf = NULL;
		*cap = 0;
	}
}

/* A reused buffer of at least len bytes (GrowBuffer). */
static void *
read_scratch(char **buf, Size *cap, Size len)
{
	*buf = GrowBuffer(*buf, cap, Max(len, 1024), TopMemoryContext);
	return *buf;
}

PG_FUNCTION_INFO_V1(malachi_read);
PG_FUNCTION_INFO_V1(malachi_offset_for_time);

/*---- segment lists ----*/

static SPIPlanPtr segments_plan = NULL;

/* Load a range's segments from the control plane; false: no such range. */
static bool
read_load_segments(int64 range_id, RangeSegments *entry)
{
	Datum		args[1] = {Int64GetDatum(range_id)};
	Oid			argtypes[1] = {INT8OID};
	uint64		n;
	uint64		i;
	int			path_level;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* its "=" resolved with malachi's path, not the caller's (SpiPathPin) */
	path_level = SpiPathPin();
	if (segments_plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(
									   "SELECT s.segment_id, s.base_offset, s.end_offset, s.state = 'active', s.byte_size, "
									   "r.end_offset "
									   "FROM malachi.range_meta r LEFT JOIN malachi.segment_meta s USING (range_id) "
									   "WHERE r.range_id = $1 ORDER BY s.seq",
									   1, argtypes);

		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "could not prepare the segment list query");
		segments_plan = plan;
	}
	if (SPI_execute_snapshot(segments_plan, args, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "segment list query failed");
	SpiPathRestore(path_level);
	n = SPI_processed;
	if (n == 0)
	{
		SPI_finish();
		return false;
	}
	entry->segs = MemoryContextAllocZero(CacheMemoryContext,
										 sizeof(SegInfo) * n);
	entry->nsegs = 0;
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		SegInfo    *seg = &entry->segs[entry->nsegs];
		Datum		d;

		d = SPI_getbinval(tup, desc, 6, &isnull);
		entry->final_end = isnull ? -1 : DatumGetInt64(d);
		d = SPI_getbinval(tup, desc, 1, &isnull);
		if (isnull)
			continue;			/* a range without segments */
		seg->segment_id = DatumGetInt64(d);
		seg->base_offset = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		d = SPI_getbinval(tup, desc, 3, &isnull);
		seg->end_offset = isnull ? -1 : DatumGetInt64(d);
		seg->active = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
		d = SPI_getbinval(tup, desc, 5, &isnull);
		seg->byte_size = isnull ? -1 : DatumGetInt64(d);
		entry->nsegs++;
	}
	SPI_finish();
	return true;
}

/*
 * read_segments
 *		A range's segments, from the cache while nothing changed;
 *		no_such_range when the range does not exist.
 */
static RangeSegments *
read_segments(int64 range_id)
{
	RangeSegments *entry;
	bool		found;
	uint64		seg_epoch = WriterSegmentsEpoch();
	uint64		meta_epoch = MetaCacheGeneration();

	if (range_segments == NULL)
		range_segments = Int64HashCreate("malachi range segments", sizeof(RangeSegments),
									CacheMemoryContext);
	entry = hash_search(range_segments, &range_id, HASH_ENTER, &found);
	if (found && entry->segments_epoch == seg_epoch &&
		entry->metadata_epoch == meta_epoch)
		return entry;
	if (found && entry->segs)
		pfree(entry->segs);
	entry->segs = NULL;
	entry->nsegs = 0;
	entry->segments_epoch = 0;
	if (!read_load_segments(range_id, entry))
	{
		hash_search(range_segments, &range_id, HASH_REMOVE, NULL);
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
				 errmsg("range " INT64_FORMAT " does not exist", range_id)));
	}
	entry->segments_epoch = seg_epoch;
	entry->metadata_epoch = meta_epoch;
	return entry;
}

/*---- sparse index ----*/

/* Append a point if it is past the last one by a step (or the first). */
static void
read_index_add(SegIndex *idx, int64 base_offset, uint64 pos, int64 max_ts_before)
{
	if (idx->npoints > 0 &&
		(idx->points[idx->npoints - 1].base_offset >= base_offset ||
		 pos < idx->points[idx->npoints - 1].pos + READ_INDEX_STEP))
		return;
	if (idx->npoints == idx->cap)
		idx->points = GrowArray(idx->points, &idx->cap, sizeof(SegIndexPoint), 16,
								TopMemoryContext);
	idx->points[idx->npoints].base_offset = base_offset;
	idx->points[idx->npoints].pos = pos;
	idx->points[idx->npoints].max_ts_before = max_ts_before;
	idx->npoints++;
}

/*
 * Load a segment's index file over the backend's copy: a sealed segment's
 * complete index, or the settled prefix of its life as a head.  False when
 * there is none.
 */
static bool
read_index_load(SegIndex *idx, int64 segment_id)
{
	SegIndexFile file;

	if (!SegmentIndexLoad(segment_id, TopMemoryContext, &file))
		return false;
	if (idx->points)
		pfree(idx->points);
	idx->points = file.points;
	idx->npoints = idx->cap = file.npoints;
	idx->max_ts = file.max_ts;
	idx->complete = file.complete;
	return true;
}

/* Save the backend's index of a segment, its first npoints points. */
static bool
read_index_save(SegIndex *idx, int64 segment_id, int npoints)
{
	SegIndexFile file;

	file.npoints = npoints;
	file.points = idx->points;
	file.max_ts = idx->max_ts;
	file.complete = idx->complete;
	return SegmentIndexSave(segment_id, &file);
}

/*
 * A header that failed its CRC alone: does the whole batch check?  A void
 * mark rewrites a header in place, so a crash can have torn it, or the
 * header was read while the mark was being written; SegmentReadBatch knows
 * both.  Rare, so the payload is read only then.
 */
static bool
read_index_recheck(File file, int64 segment_id, uint64 pos, CodecHeader *header)
{
	CodecResult result;
	char	   *batch = SegmentReadBatch(file, segment_id, pos, header, &result);

	if (batch == NULL)
		return false;
	pfree(batch);
	return true;
}

/* A segment's batch at pos (offset next) does not check. */
static void
read_corrupt(int64 segment_id, int64 next, uint64 pos)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("segment " INT64_FORMAT " is corrupt at offset " INT64_FORMAT " (position " UINT64_FORMAT ")",
					segment_id, next, pos)));
}

/*
 * read_index_walk
 *		Walk a segment's batch headers from the last known point up to
 *		limit (a position), adding index points and taking the newest
 *		timestamp.  Headers only: each header's CRC is checked (a search by
 *		time trusts their timestamps), the payloads' when batches are read.
 *		A void batch's timestamp counts too: a search by time then starts
 *		earlier than it needs to, never later.  Returns false at a header
 *		that does not check, with *bad_offset and *bad_pos saying where: the
 *		points found before it stay.
 */
static bool
read_index_walk(SegIndex *idx, File file, int64 segment_id, int64 base_offset,
				uint64 limit, int64 *bad_offset, uint64 *bad_pos)
{
	uint64		pos = 0;
	int64		next = base_offset;
	int64		max_ts = PG_INT64_MIN;

	if (idx->npoints > 0)
	{
		pos = idx->points[idx->npoints - 1].pos;
		next = idx->points[idx->npoints - 1].base_offset;
		max_ts = idx->points[idx->npoints - 1].max_ts_before;
	}
	while (pos < limit)
	{
		char		hdr[CODEC_HEADER_SIZE];
		CodecHeader header;

		CHECK_FOR_INTERRUPTS();
		if (SegmentRead(file, segment_id, hdr, sizeof(hdr), pos) < sizeof(hdr) ||
			CodecDecodeHeader(hdr, sizeof(hdr), &header) != CODEC_OK ||
			(CodecCheckHeader(hdr, &header, segment_id) != CODEC_OK &&
			 !read_index_recheck(file, segment_id, pos, &header)) ||
			header.base_offset != next)
		{
			idx->max_ts = Max(idx->max_ts, max_ts);
			*bad_offset = next;
			*bad_pos = pos;
			return false;
		}
		read_index_add(idx, header.base_offset, pos, max_ts);
		if (!(header.flags & CODEC_FLAG_FILLER))
			max_ts = Max(max_ts, header.max_timestamp);
		next += header.record_count;
		pos += CODEC_HEADER_SIZE + header.payload_len;
	}
	idx->max_ts = Max(idx->max_ts, max_ts);
	return true;
}

/* read_index_walk of a head: data_corrupted at a header that does not check. */
static void
read_index_build(SegIndex *idx, File file, int64 segment_id, int64 base_offset,
				 uint64 limit)
{
	int64		bad_offset;
	uint64		bad_pos;

	if (!read_index_walk(idx, file, segment_id, base_offset, limit,
						 &bad_offset, &bad_pos))
		read_corrupt(segment_id, bad_offset, bad_pos);
}

/* Forget the backend's copy of a segment's index. */
static void
read_index_forget(int64 segment_id)
{
	SegIndex   *idx;

	if (seg_indexes == NULL)
		return;
	idx = hash_search(seg_indexes, &segment_id, HASH_FIND, NULL);
	if (idx != NULL && idx->points)
		pfree(idx->points);
	(void) hash_search(seg_indexes, &segment_id, HASH_REMOVE, NULL);
}

/*
 * Forget every cached index: the cache is full, or its ids may have been
 * reused (MetaCacheResets).  Only this backend's copies go (indexes reload
 * from their files, or are rebuilt as they are read); segments another
 * process deleted would otherwise stay cached for as long as the backend
 * lives.
 */
static void
read_index_forget_all(void)
{
	HASH_SEQ_STATUS seq;
	SegIndex   *idx;

	hash_seq_init(&seq, seg_indexes);
	while ((idx = hash_seq_search(&seq)) != NULL)
	{
		if (idx->points)
			pfree(idx->points);
		(void) hash_search(seg_indexes, &idx->segment_id, HASH_REMOVE, NULL);
	}
}

/* The backend's index of a segment, loading a sealed one's file. */
static SegIndex *
read_index(int64 segment_id, bool sealed, File file, int64 base_offset,
		   uint64 byte_size)
{
	SegIndex   *idx;
	bool		found;
	bool		file_tried = false;

	if (seg_indexes == NULL)
		seg_indexes = Int64HashCreate("malachi segment indexes", sizeof(SegIndex),
									TopMemoryContext);
	/* segment ids start again when the extension is created again */
	if (seg_indexes_resets != MetaCacheResets() ||
		(hash_get_num_entries(seg_indexes) >= READ_INDEX_CACHE_MAX &&
		 hash_search(seg_indexes, &segment_id, HASH_FIND, NULL) == NULL))
		read_index_forget_all();
	seg_indexes_resets = MetaCacheResets();
	idx = hash_search(seg_indexes, &segment_id, HASH_ENTER, &found);
	if (!found)
	{
		idx->npoints = idx->cap = 0;
		idx->points = NULL;
		idx->max_ts = PG_INT64_MIN;
		idx->complete = false;
		idx->damaged = false;
		/* a sealed segment's whole index, or a head's saved prefix */
		(void) read_index_load(idx, segment_id);
		file_tried = true;
	}
	if (sealed && !idx->complete)
	{
		/* another reader may have completed the file meanwhile */
		if (!file_tried)
			(void) read_index_load(idx, segment_id);
		/*
		 * From the last point known: a head's saved prefix, or none.  A
		 * header that does not check leaves the index short of it, not
		 * saved: reads before it go on, and those that reach it fail
		 * there (read_segment checks every batch it reads).
		 */
		if (!idx->complete)
		{
			idx->damaged = !read_index_walk(idx, file, segment_id,
											base_offset, byte_size,
											&idx->damaged_offset,
											&idx->damaged_pos);
			idx->complete = !idx->damaged;
			if (idx->complete && idx->npoints > 0)
				(void) read_index_save(idx, segment_id, idx->npoints);
		}
	}
	return idx;
}

/* Position of the indexed batch at or before offset (and its base). */
static void
read_index_seek(SegIndex *idx, int64 offset, uint64 *pos, int64 *base)
{
	int			lo = 0;
	int			hi = idx->npoints - 1;

	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (idx->points[mid].base_offset <= offset)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	if (hi < 0)
		return;					/* keep the caller's start */
	*pos = idx->points[hi].pos;
	*base = idx->points[hi].base_offset;
}

/*
 * The first offset of a segment's walked part that can hold a record
 * produced at or after ts, given that the part has one (max_ts >= ts):
 * the base of the last indexed batch before which every batch is older.
 */
static int64
read_index_seek_time(SegIndex *idx, TimestampTz ts, int64 base_offset)
{
	int			lo = 0;
	int			hi = idx->npoints - 1;

	/* max_ts_before never decreases from point to point */
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (idx->points[mid].max_ts_before < ts)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return hi < 0 ? base_offset : idx->points[hi].base_offset;
}

/*
 * ReadSaveHeadIndex
 *		Save a head's index up to settled, a batch boundary before which
 *		every batch is durable and settled (AppendSafePoints): its recovery
 *		after a start then scans from the last point instead of from the
 *		start of the file.  It goes on from the last save (the file, which
 *		read_index loads), and the backend forgets it afterwards, failed or
 *		not: the sweeper would otherwise keep every head's index it ever
 *		saved.  A head dropped meanwhile, or whose file holds a complete
 *		index, is left alone.  Whether it was saved.
 */
bool
ReadSaveHeadIndex(int64 segment_id, int64 base_offset, uint64 settled)
{
	File		file = SegmentOpenMissingOk(segment_id, true);
	SegIndex   *idx;
	int			n = 0;
	bool		saved = false;

	if (file < 0)
		return false;
	PG_TRY();
	{
		idx = read_index(segment_id, false, file, base_offset, settled);
		if (!idx->complete)
		{
			read_index_build(idx, file, segment_id, base_offset, settled);
			/* a read may have taken the backend's copy past settled */
			while (n < idx->npoints && idx->points[n].pos < settled)
				n++;
			saved = n > 0 && read_index_save(idx, segment_id, n);
		}
	}
	PG_FINALLY();
	{
		read_index_forget(segment_id);
	}
	PG_END_TRY();
	return saved;
}

/* Drop a segment's cached index (and file): the segment is gone. */
void
ReadForgetSegment(int64 segment_id)
{
	read_index_forget(segment_id);
	SegmentIndexRemove(segment_id);
}

/*---- reading ----*/

static bool read_segment_deleted(int64 segment_id);

/* A head the reader listed was dropped with its topic. */
static void
read_head_dropped(int64 segment_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
			 errmsg("segment " INT64_FORMAT " was dropped while it was read",
					segment_id),
			 errdetail("Its topic was dropped.")));
}

/*
 * read_head_limit
 *		How far a head can be read: its fence's end once fenced, else its
 *		visible edge.  metadata_unavailable when it cannot be recovered.
 */
static int64
read_head_limit(const SegInfo *seg, uint64 *bytes, AppendView *out)
{
	MemoryContext cxt = CurrentMemoryContext;
	AppendView	view;
	volatile int slotno = -1;

	PG_TRY();
	{
		/*
		 * A segment no slot holds is loaded, unless its topic was dropped
		 * (a slot unloaded under us was sealed meanwhile, and is simply
		 * reloaded).  A drop that commits after that check has removed the
		 * file's name before it freed the slot, so the load fails instead
		 * of taking a slot for the dropped segment that nobody frees.
		 */
		InjectWait(INJECT_HEAD_LISTED);
		for (;;)
		{
			slotno = AppendLookup(seg->segment_id);
			if (slotno < 0)
			{
				if (read_segment_deleted(seg->segment_id))
					read_head_dropped(seg->segment_id);
				slotno = AppendAttach(seg->segment_id, seg->base_offset);
			}
			if (AppendGetView(slotno, seg->segment_id, &view))
				break;
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		/*
		 * Only a file that cannot be recovered makes the end unknown (file
		 * and I/O errors, damage, another format); a cancel, a full slot
		 * table or a transaction still in progress is raised as it is.
		 */
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_SYSTEM_ERROR &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_INTERNAL_ERROR &&
			edata->sqlerrcode != ERRCODE_INSUFFICIENT_PRIVILEGE &&
			edata->sqlerrcode != ERRCODE_FEATURE_NOT_SUPPORTED &&
			edata->sqlerrcode != ERRCODE_DISK_FULL)
			ReThrowError(edata);
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_METADATA_UNAVAILABLE),
				 errmsg("the end of segment " INT64_FORMAT " is unknown", seg->segment_id),
				 errdetail("Recovering its file failed: %s", edata->message),
				 errhint("The range stays unreadable until the file can be recovered.")));
	}
	PG_END_TRY();
	*out = view;
	if (view.fence_durable)
	{
		*bytes = view.fenced_size;
		return view.fenced_end;
	}
	*bytes = view.visible_bytes;
	return view.visible_offset;
}

/*
 * read_segment
 *		Call emit for every record of the segment in [from, limit), batch by
 *		batch, until it returns false.  Returns false when emit stopped.
 */
/* Is an offset in a batch an aborted transaction produced? */
static inline bool
CheckVoid(const AppendView *view, int64 offset)
{
	int			k;

	if (view == NULL)
		return false;
	for (k = 0; k < view->nvoids; k++)
		if (offset >= view->voids[k].start_offset &&
			offset < view->voids[k].end_offset)
			return true;
	return false;
}

static bool
read_segment(const SegInfo *seg, int64 from, int64 limit, uint64 limit_bytes,
			 const AppendView *view, ReadEmit emit, void *arg)
{
	File		file = SegmentOpen(seg->segment_id);
	SegIndex   *idx = read_index(seg->segment_id, !seg->active, file,
								 seg->base_offset, limit_bytes);
	uint64		pos = 0;
	int64		next = seg->base_offset;

	if (seg->active)
		read_index_build(idx, file, seg->segment_id, seg->base_offset,
						 limit_bytes);
	read_index_seek(idx, from, &pos, &next);

	while (next < limit)
	{
		CodecHeader header;
		CodecResult result;
		char	   *batch;
		CodecRecord *records;
		char	   *scratch = NULL;
		uint32		i;

		CHECK_FOR_INTERRUPTS();
		if (read_buf == NULL)
			(void) read_scratch(&read_buf, &read_buf_cap, 64 * 1024);
		batch = SegmentReadBatchInto(file, seg->segment_id, pos, &header, &result,
									 &read_buf, &read_buf_cap);
		if (batch == NULL || header.base_offset != next)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("segment " INT64_FORMAT " is corrupt at offset " INT64_FORMAT " (position " UINT64_FORMAT ")",
							seg->segment_id, next, pos),
					 errdetail("%s.", batch == NULL ? CodecResultString(result) :
							   "the batch does not continue the offsets")));
		if (next + header.record_count > from &&
			!(header.flags & (CODEC_FLAG_VOID | CODEC_FLAG_FILLER)))
		{
			records = read_scratch(&read_records, &read_records_cap,
								   sizeof(CodecRecord) * header.record_count);
			if (header.codec == CODEC_ZSTD)
				scratch = read_scratch(&read_raw, &read_raw_cap, header.raw_len);
			result = CodecDecodeRecords(&header, batch + CODEC_HEADER_SIZE,
										scratch, scratch ? header.raw_len : 0,
										records);
			if (result != CODEC_OK)
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("segment " INT64_FORMAT " is corrupt at offset " INT64_FORMAT " (position " UINT64_FORMAT ")",
								seg->segment_id, next, pos),
						 errdetail("%s.", CodecResultString(result))));
			for (i = 0; i < header.record_count; i++)
			{
				int64		offset = next + i;

				if (offset < from || offset >= limit || CheckVoid(view, offset))
					continue;
				if (!emit(arg, offset, &records[i]))
					return false;
			}
		}
		next += header.record_count;
		pos += CODEC_HEADER_SIZE + header.payload_len;
	}
	return true;
}

static SpiQuery q_segment_exists = {
	"SELECT FROM malachi.segment_meta WHERE segment_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_range_exists = {
	"SELECT FROM malachi.range_meta WHERE range_id = $1",
	1, {INT8OID}, NULL
};

/* Is the row q finds for id gone from the control plane by now? */
static bool
read_row_gone(SpiQuery *q, int64 id)
{
	Datum		args[1] = {Int64GetDatum(id)};
	bool		gone;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	gone = SpiQueryRun(q, args, GetLatestSnapshot()) == 0;
	SPI_finish();
	return gone;
}

/*
 * Is a segment whose file is missing gone from the control plane (deleted
 * after this backend listed it)?  Otherwise its file is lost: the caller's
 * open reports it.
 */
static bool
read_segment_deleted(int64 segment_id)
{
	return read_row_gone(&q_segment_exists, segment_id);
}

static int64 read_range(int64 range_id, int64 offset, ReadEmit emit,
						ReadSkip skip, void *arg);

/*
 * ReadRangeSkipping
 *		Call emit for every record of a range from offset on, in offset
 *		order, until it returns false or the readable end is reached.
 *		Offsets the range no longer stores (segments deleted by retention or
 *		delete_segment) are stepped over, and skip, when given, is told
 *		each stretch [from, to) before the records after it.  Returns the
 *		offset after the last record passed (the next offset to read), or
 *		-1 when emit stopped.  Scratch buffers grown past READ_SCRATCH_KEEP
 *		are given back afterwards.
 */
int64
ReadRangeSkipping(int64 range_id, int64 offset, ReadEmit emit, ReadSkip skip,
				  void *arg)
{
	int64		next = read_range(range_id, offset, emit, skip, arg);

	read_trim(&read_buf, &read_buf_cap);
	read_trim(&read_records, &read_records_cap);
	read_trim(&read_raw, &read_raw_cap);
	return next;
}

/* ReadRangeSkipping's reading. */
static int64
read_range(int64 range_id, int64 offset, ReadEmit emit, ReadSkip skip,
		   void *arg)
{
	RangeSegments *rs = read_segments(range_id);
	int64		next = offset;
	int			i;

	for (i = 0; i < rs->nsegs; i++)
	{
		SegInfo		seg = rs->segs[i];
		int64		limit;
		uint64		bytes = 0;
		AppendView *view = NULL;

		if (seg.active)
		{
			view = palloc(sizeof(AppendView));
			limit = read_head_limit(&seg, &bytes, view);
		}
		else
			limit = seg.end_offset;
		if (limit <= next)
			continue;
		if (seg.base_offset > next)
		{
			if (skip)
				skip(arg, next, seg.base_offset);
			next = seg.base_offset;
		}
		/*
		 * Deleted since the list was loaded: a sealed segment by retention
		 * or delete_segment, or a head sealed since (a roll retires its
		 * slot, which a drop leaves alone), then deleted, or dropped with
		 * its topic.
		 */
		if ((!seg.active || view->fence_durable) &&
			SegmentOpenMissingOk(seg.segment_id, true) < 0 &&
			read_segment_deleted(seg.segment_id))
		{
			if (seg.active && read_row_gone(&q_range_exists, range_id))
				read_head_dropped(seg.segment_id);
			if (skip)
				skip(arg, next, limit);
			next = limit;
			continue;
		}
		if (!read_segment(&seg, next, limit,
						  seg.active ? bytes : (uint64) seg.byte_size,
						  view, emit, arg))
			return -1;
		next = limit;
	}
	if (next < rs->final_end)
	{
		/* the segments up to the sealed range's end were all deleted */
		if (skip)
			skip(arg, next, rs->final_end);
		next = rs->final_end;
	}
	return next;
}

/* ReadRangeSkipping without being told of skips. */
int64
ReadRange(int64 range_id, int64 offset, ReadEmit emit, void *arg)
{
	return ReadRangeSkipping(range_id, offset, emit, NULL, arg);
}

/*
 * ReadRangeEnd
 *		A range's readable end (the offset after its last readable record)
 *		and whether it is final (the range is sealed).  no_such_range when
 *		it does not exist.
 */
int64
ReadRangeEnd(int64 range_id, bool *sealed)
{
	RangeSegments *rs = read_segments(range_id);
	SegInfo		seg;
	uint64		bytes;
	AppendView	view;

	if (sealed)
		*sealed = rs->final_end >= 0;
	if (rs->final_end >= 0)
		return rs->final_end;	/* kept when its segments are deleted */
	if (rs->nsegs == 0)
		return 0;
	seg = rs->segs[rs->nsegs - 1];
	if (!seg.active)
		return seg.end_offset;
	return read_head_limit(&seg, &bytes, &view);
}

/*
 * ReadWaitBeyond
 *		Sleep until the range has a readable record at or past offset, its
 *		head is fenced, or timeout_ms passed (long poll).  A range with no
 *		head yet is looked at again every few milliseconds.  Interruptible.
 */
void
ReadWaitBeyond(int64 range_id, int64 offset, long timeout_ms)
{
	RangeSegments *rs = read_segments(range_id);
	SegInfo    *seg = rs->nsegs > 0 ? &rs->segs[rs->nsegs - 1] : NULL;

	if (timeout_ms <= 0 || rs->final_end >= 0)
		return;
	if (seg != NULL && seg->active)
	{
		int64		segment_id = seg->segment_id;
		int			slotno = AppendAttach(segment_id, seg->base_offset);

		AppendWaitBeyond(slotno, segment_id, offset, timeout_ms);
		return;
	}
	/* no head to sleep on: the first produce opens one */
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Min(timeout_ms, READ_NO_HEAD_POLL_MS), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*---- SQL ----*/

/* State of one read() call. */
typedef struct ReadState
{
	int64		range_id;
	int			remaining;
	ReturnSetInfo *rsinfo;
} ReadState;

/* Turn a record into a malachi.record tuple. */
void
ReadRecordValues(int64 range_id, int64 offset, const CodecRecord *rec,
				 Datum *values, bool *nulls)
{
	memset(nulls, 0, sizeof(bool) * 6);
	values[0] = Int64GetDatum(range_id);
	values[1] = Int64GetDatum(offset);
	if (rec->key)
		values[2] = PointerGetDatum(cstring_to_text_with_len(rec->key, rec->key_len));
	else
		nulls[2] = true;
	if (rec->value)
	{
		bytea	   *v = palloc(VARHDRSZ + rec->value_len);

		SET_VARSIZE(v, VARHDRSZ + rec->value_len);
		memcpy(VARDATA(v), rec->value, rec->value_len);
		values[3] = PointerGetDatum(v);
	}
	else
		nulls[3] = true;
	if (rec->headers)
		values[4] = DirectFunctionCall1(jsonb_in,
										CStringGetDatum(pnstrdup(rec->headers,
																 rec->headers_len)));
	else
		nulls[4] = true;
	values[5] = TimestampTzGetDatum(rec->timestamp);
}

/* Add a record to a set-returning function's result as a malachi.record row. */
void
ReadPutRecord(ReturnSetInfo *rsinfo, int64 range_id, int64 offset,
			  const CodecRecord *rec)
{
	Datum		values[6];
	bool		nulls[6];
	MemoryContext old;

	/*
	 * The row's values are copied into the tuplestore (which spills to
	 * disk past work_mem): build them in a context emptied after each row,
	 * or a read of a whole history holds all of it in memory.
	 */
	if (read_row_cxt == NULL)
		read_row_cxt = AllocSetContextCreate(TopMemoryContext, "malachi read row",
											 ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(read_row_cxt);
	ReadRecordValues(range_id, offset, rec, values, nulls);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	MemoryContextSwitchTo(old);
	MemoryContextReset(read_row_cxt);
}

/* ReadRange callback of read(): one row per record. */
static bool
read_emit_row(void *arg, int64 offset, const CodecRecord *rec)
{
	ReadState  *st = arg;

	if (st->remaining <= 0)
		return false;
	ReadPutRecord(st->rsinfo, st->range_id, offset, rec);
	st->remaining--;
	return st->remaining > 0;
}

/* SQL: read(range_id, offset, max_records) */
Datum
malachi_read(PG_FUNCTION_ARGS)
{
	ReadState	st;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range_id, offset and max_records must not be null")));
	if (PG_GETARG_INT64(1) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("offset must not be negative")));
	if (PG_GETARG_INT32(2) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_records must not be negative")));

	InitMaterializedSRF(fcinfo, 0);
	st.range_id = PG_GETARG_INT64(0);
	st.remaining = PG_GETARG_INT32(2);
	st.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	if (st.remaining > 0)
		(void) ReadRange(st.range_id, PG_GETARG_INT64(1), read_emit_row, &st);
	else
		(void) read_segments(st.range_id);	/* still: no such range */
	return (Datum) 0;
}

/* State of offset_for_time(). */
typedef struct TimeSearch
{
	TimestampTz ts;
	int64		found;
} TimeSearch;

/* ReadRange callback of offset_for_time(): stop at the first late record. */
static bool
read_emit_time(void *arg, int64 offset, const CodecRecord *rec)
{
	TimeSearch *ts = arg;

	if (rec->timestamp >= ts->ts)
	{
		ts->found = offset;
		return false;
	}
	return true;
}

/*
 * read_time_start
 *		Where a search for the first record produced at or after ts starts:
 *		past every segment whose batches are all older (by their indexes'
 *		newest timestamps), at the first one's index point before which
 *		every batch is older.  A segment whose file is gone stops the
 *		stepping: the read that follows steps over it or reports it.
 */
static int64
read_time_start(int64 range_id, TimestampTz ts)
{
	RangeSegments *rs = read_segments(range_id);
	int64		start = 0;
	int			i;

	for (i = 0; i < rs->nsegs; i++)
	{
		SegInfo		seg = rs->segs[i];
		int64		limit = seg.end_offset;
		uint64		bytes = (uint64) seg.byte_size;
		File		file;
		SegIndex   *idx;

		if (seg.active)
		{
			AppendView	view;

			limit = read_head_limit(&seg, &bytes, &view);
		}
		if (limit <= seg.base_offset)
			continue;			/* holds no record */
		file = SegmentOpenMissingOk(seg.segment_id, true);
		if (file < 0)
			break;
		idx = read_index(seg.segment_id, !seg.active, file, seg.base_offset,
						 bytes);
		if (seg.active)
			read_index_build(idx, file, seg.segment_id, seg.base_offset, bytes);
		/*
		 * A head's index may reach past its readable end (it is walked up
		 * to the synced edge, and a batch in doubt holds the end back)
		 */
		if (idx->max_ts >= ts)
			return Min(read_index_seek_time(idx, ts, seg.base_offset), limit);
		/* the answer may lie past the damage */
		if (!seg.active && idx->damaged)
			read_corrupt(seg.segment_id, idx->damaged_offset, idx->damaged_pos);
		start = limit;
	}
	return start;
}

/*
 * ReadOffsetForTime
 *		The first offset of a range whose record was produced at or after
 *		ts; the range's readable end when there is none.
 */
int64
ReadOffsetForTime(int64 range_id, TimestampTz ts)
{
	TimeSearch	search;
	int64		end;

	search.ts = ts;
	search.found = -1;
	end = ReadRange(range_id, read_time_start(range_id, ts), read_emit_time,
					&search);
	return search.found >= 0 ? search.found : end;
}

/* SQL: offset_for_time(range_id, ts) */
Datum
malachi_offset_for_time(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range_id and ts must not be null")));
	PG_RETURN_INT64(ReadOffsetForTime(PG_GETARG_INT64(0),
									  PG_GETARG_TIMESTAMPTZ(1)));
}
