/*-------------------------------------------------------------------------
 *
 * stream.c
 *	  Reading a range's cross-epoch stream: pages, skips, long polls.
 *
 * A page reads the first unfinished source of a position (see cursor.c),
 * keeping only the records whose key hash lies in the slice the stream
 * takes from it, and moves on to the next source when the first is
 * finished: an ancestor (always sealed) once its end is reached, the range
 * itself only once it is sealed and read to its end.  A page stops at
 * max_records, before the record that would take it past max_bytes (never
 * before its first), or where the range's readable records end; its position
 * then stands exactly after the last record it emitted (or after the
 * records it filtered out), so the next page neither repeats nor loses one.
 *
 * A record without a key has no hash: it belongs to the part of a split
 * that holds its source range's lowest hash, so that exactly one child's
 * stream carries it.
 *
 * Skips: stretches of a source that are no longer stored (retention or
 * delete_segment removed their segments) are stepped over and listed in
 * the page that steps over them, whose returned position is past them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/typcache.h"

#include "cursor.h"
#include "errors.h"
#include "keyspace.h"
#include "inject.h"
#include "read.h"
#include "stream.h"

PG_FUNCTION_INFO_V1(malachi_read_history);
PG_FUNCTION_INFO_V1(malachi_stream_history);
PG_FUNCTION_INFO_V1(malachi_read_consume);

/* State of reading one source of a page. */
typedef struct SourceRead
{
	int64		source_id;
	bool		filter;			/* the slice is narrower than the source's */
	uint64		key_lo;
	uint64		key_hi;
	uint32		keyless_hash;	/* where records without a key belong */
	int			remaining;
	int64		max_bytes;		/* the page's byte limit (0: none) */
	int64		next;			/* offset after the last record passed */
	StreamEmit	emit;
	void	   *arg;
	StreamPage *page;
} SourceRead;

/* The hash a stored key was routed by (of its UTF-8 bytes). */
static uint32
stream_key_hash(const CodecRecord *rec)
{
	char	   *utf8 = pg_server_to_any(rec->key, rec->key_len, PG_UTF8);
	uint32		hash;

	if (utf8 == rec->key)
		return KeyspaceHash(rec->key, rec->key_len);
	hash = KeyspaceHash(utf8, strlen(utf8));
	pfree(utf8);
	return hash;
}

/* ReadRange callback: emit the records of the slice, up to the limit. */
static bool
stream_read_record(void *arg, int64 offset, const CodecRecord *rec)
{
	SourceRead *sr = arg;
	int64		size;

	if (sr->filter)
	{
		uint32		hash = rec->key ? stream_key_hash(rec) : sr->keyless_hash;

		if (hash < sr->key_lo || hash >= sr->key_hi)
		{
			sr->next = offset + 1;
			return true;
		}
	}
	size = STREAM_RECORD_OVERHEAD + (int64) rec->key_len + rec->value_len +
		rec->headers_len;
	if (sr->remaining <= 0 ||
		(sr->max_bytes > 0 && sr->page->count > 0 &&
		 sr->page->bytes + size > sr->max_bytes))
		return false;			/* this record is the next page's first */
	sr->emit(sr->arg, sr->source_id, offset, rec);
	sr->page->count++;
	sr->page->bytes += size;
	sr->remaining--;
	sr->next = offset + 1;
	return sr->remaining > 0;
}

/* ReadRange callback: note a stretch no longer stored. */
static void
stream_read_skip(void *arg, int64 from, int64 to)
{
	SourceRead *sr = arg;
	StreamPage *page = sr->page;

	appendStringInfo(&page->skips,
					 "%s{\"range_id\": " INT64_FORMAT ", \"from_offset\": " INT64_FORMAT
					 ", \"to_offset\": " INT64_FORMAT ", \"reason\": \"retention\"}",
					 page->nskips > 0 ? ", " : "", sr->source_id, from, to);
	page->nskips++;
	/* a page that stops at the record after it does not list it again */
	sr->next = to;
}

/*
 * StreamRead
 *		Emit up to max_records records of the stream from pos on, and up to
 *		max_bytes of their keys, values and headers (0: no limit; the first
 *		record always), advancing pos past them (finished sources leave
 *		it).  page is filled in.
 */
void
StreamRead(StreamPos *pos, int max_records, int64 max_bytes, StreamEmit emit,
		   void *arg, StreamPage *page)
{
	int			remaining = max_records;
	int64		reread_from = -1;

	page->count = 0;
	page->bytes = 0;
	page->caught_up = false;
	page->nskips = 0;
	initStringInfo(&page->skips);

	while (pos->n > 0)
	{
		StreamEntry *e = &pos->entries[0];
		const StreamRange *src = StreamRangeGet(e->source_id);
		SourceRead	sr;
		int64		end;
		int64		final;
		bool		sealed;

		if (remaining <= 0)
			return;
		sr.source_id = e->source_id;
		sr.filter = e->key_lo > src->key_lo || e->key_hi < src->key_hi;
		sr.key_lo = (uint64) e->key_lo;
		sr.key_hi = (uint64) e->key_hi;
		sr.keyless_hash = (uint32) src->key_lo;
		sr.remaining = remaining;
		sr.max_bytes = max_bytes;
		sr.next = e->offset;
		sr.emit = emit;
		sr.arg = arg;
		sr.page = page;
		end = ReadRangeSkipping(e->source_id, e->offset, stream_read_record,
								stream_read_skip, &sr);
		remaining = sr.remaining;
		if (end < 0)
		{
			e->offset = sr.next;	/* stopped at a limit */
			if (remaining > 0)
				return;			/* at max_bytes */
			continue;
		}
		e->offset = end;
		InjectWait(INJECT_STREAM_READ);

		/*
		 * Read to the readable end: finished only if that end is final.  A
		 * range sealed while it was being read may have taken records past
		 * the end this read saw: read on to its final end first.
		 */
		final = ReadRangeEnd(e->source_id, &sealed);
		if (e->source_id == pos->range_id && !sealed)
			break;
		if (sealed && end < final && end != reread_from)
		{
			reread_from = end; /* once per stopping point: never a loop */
			continue;
		}
		pos->n--;
		memmove(pos->entries, pos->entries + 1, sizeof(StreamEntry) * pos->n);
	}
	page->caught_up = true;
}

/*
 * StreamWait
 *		Sleep until the stream has records past pos, or timeout_ms passed.
 *		True when records may be there (the caller reads to find out).
 */
bool
StreamWait(const StreamPos *pos, long timeout_ms)
{
	const StreamEntry *e;

	if (pos->n == 0)
		return false;			/* a sealed range read to its end */
	e = &pos->entries[0];
	if (e->source_id != pos->range_id)
		return true;			/* ancestors are sealed: nothing to wait for */
	ReadWaitBeyond(e->source_id, e->offset, timeout_ms);
	return true;
}

/*---- SQL ----*/

/* Collects a page's records into a malachi.record[]. */
typedef struct ArrayCollect
{
	TupleDesc	desc;
	Oid			record_type;
	ArrayBuildState *astate;
	MemoryContext record_cxt;	/* one record's values and tuple, reset */
} ArrayCollect;

static void
stream_collect(void *arg, int64 range_id, int64 offset, const CodecRecord *rec)
{
	ArrayCollect *ac = arg;
	MemoryContext old = MemoryContextSwitchTo(ac->record_cxt);
	Datum		values[6];
	bool		nulls[6];
	HeapTuple	tuple;

	ReadRecordValues(range_id, offset, rec, values, nulls);
	tuple = heap_form_tuple(ac->desc, values, nulls);
	MemoryContextSwitchTo(old);
	/* (the array keeps its own copy, in the caller's context) */
	ac->astate = accumArrayResult(ac->astate, HeapTupleGetDatum(tuple), false,
								  ac->record_type, CurrentMemoryContext);
	MemoryContextReset(ac->record_cxt);
}

/* Common argument checks of the paging functions. */
static StreamPos *
stream_args(FunctionCallInfo fcinfo, int *max_records)
{
	int64		range_id;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range_id and max_records must not be null")));
	range_id = PG_GETARG_INT64(0);
	*max_records = PG_GETARG_INT32(2);
	if (*max_records < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_records must not be negative")));
	(void) ReadRangeEnd(range_id, NULL);	/* no_such_range */
	if (PG_ARGISNULL(1))
		return StreamStart(range_id);
	return CursorDecode(PG_GETARG_TEXT_PP(1), range_id);
}

/* One page as (records, next_cursor, skips); tail: keep the cursor at the end. */
static Datum
stream_page_result(FunctionCallInfo fcinfo, bool tail)
{
	TupleDesc	tupdesc;
	ArrayCollect ac;
	StreamPage	page;
	StreamPos  *pos;
	int			max_records;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	Oid			array_type;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	pos = stream_args(fcinfo, &max_records);
	array_type = TupleDescAttr(tupdesc, 0)->atttypid;
	ac.record_type = get_element_type(array_type);
	ac.desc = lookup_rowtype_tupdesc_copy(ac.record_type, -1);
	ac.astate = NULL;
	ac.record_cxt = AllocSetContextCreate(CurrentMemoryContext, "malachi page record",
										  ALLOCSET_DEFAULT_SIZES);

	StreamRead(pos, max_records, STREAM_PAGE_MAX_BYTES, stream_collect, &ac, &page);
	MemoryContextDelete(ac.record_cxt);

	if (ac.astate != NULL)
		values[0] = makeArrayResult(ac.astate, CurrentMemoryContext);
	else
		values[0] = PointerGetDatum(construct_empty_array(ac.record_type));
	if (!tail && page.caught_up)
		nulls[1] = true;		/* stream_history: done */
	else
		values[1] = PointerGetDatum(CursorEncode(pos));
	values[2] = DirectFunctionCall1(jsonb_in,
									CStringGetDatum(psprintf("[%s]", page.skips.data)));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/* SQL: stream_history(range_id, cursor, max_records): bounded pages of history */
Datum
malachi_stream_history(PG_FUNCTION_ARGS)
{
	return stream_page_result(fcinfo, false);
}

/* SQL: read_consume(range_id, cursor, max_records): tails the range forever */
Datum
malachi_read_consume(PG_FUNCTION_ARGS)
{
	return stream_page_result(fcinfo, true);
}

/* StreamRead callback of read_history(): one row per record. */
static void
stream_row(void *arg, int64 range_id, int64 offset, const CodecRecord *rec)
{
	ReadPutRecord((ReturnSetInfo *) arg, range_id, offset, rec);
}

/* SQL: read_history(range_id): the whole stream as it stands now */
Datum
malachi_read_history(PG_FUNCTION_ARGS)
{
	StreamPage	page;
	StreamPos  *pos;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range_id must not be null")));
	(void) ReadRangeEnd(PG_GETARG_INT64(0), NULL);	/* no_such_range */
	pos = StreamStart(PG_GETARG_INT64(0));
	InitMaterializedSRF(fcinfo, 0);
	do
		StreamRead(pos, PG_INT32_MAX, 0, stream_row, fcinfo->resultinfo, &page);
	while (!page.caught_up);
	return (Datum) 0;
}
