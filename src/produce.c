/*-------------------------------------------------------------------------
 *
 * produce.c
 *	  Routing records to ranges and appending them, one batch per range.
 *
 * produce and produce_batch route each record by its key's hash to the
 * active range that owns it (a NULL key goes to one range per call,
 * rotating), group the records by range, encode each group as one batch
 * (compressed when the topic's settings say so) and append it to the
 * range's head.  This delivers the immediate semantics: when the call
 * returns, the records are durable, whatever the caller's transaction does.
 *
 * Rules:
 * - The hot path runs no SPI query: ranges and storage settings come from
 *   the metadata cache (metacache.c), heads from a backend-local cache of
 *   range -> head segment; the append state in shared memory says when a
 *   head was fenced, and only then does the writer worker get asked.
 * - Every record is checked (size limit, NULLs) before anything is
 *   appended, so bad input appends nothing.
 * - A head found fenced (a roll, or a split in flight) is sealed in the
 *   control plane with the fence's answer and the batch goes to the next
 *   head; a range found sealed (split or merged) sends its records back to
 *   routing, which sees the new ranges once the split committed.  Each
 *   record lands in exactly one active range.
 * - A transaction that changed metadata itself cannot produce: its new
 *   ranges are not visible to the writer worker.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "append.h"
#include "codec.h"
#include "errors.h"
#include "inject.h"
#include "keyspace.h"
#include "metacache.h"
#include "roll.h"
#include "settings.h"
#include "util.h"
#include "writer.h"

/* Largest raw batch: bigger groups are appended as several batches */
#define PRODUCE_MAX_BATCH_RAW	(8 * 1024 * 1024)

/* How often one group may be sent back to routing before we give up */
#define PRODUCE_MAX_ATTEMPTS	100

/* A record to produce, with its routing. */
typedef struct ProduceRecord
{
	CodecRecord rec;
	uint32		hash;			/* key hash; unused for a NULL key */
	int			group;			/* index of its range in this round */
	int64		range_id;		/* the range it landed in, once done */
	bool		done;
} ProduceRecord;

/* This backend's head of a range. */
typedef struct HeadEntry
{
	int64		range_id;		/* hash key */
	int64		segment_id;
	int64		base_offset;
	uint64		generation;		/* metadata generation when cached */
} HeadEntry;

static HTAB *head_cache = NULL;
static uint32 null_key_rotation = 0;

/*
 * The encode buffer, kept across calls: a fresh multi-megabyte allocation per
 * batch would be mapped and page-faulted in anew every time.
 */
static char *encode_buf = NULL;
static size_t encode_cap = 0;

PG_FUNCTION_INFO_V1(malachi_produce_bytea);
PG_FUNCTION_INFO_V1(malachi_produce_text);
PG_FUNCTION_INFO_V1(malachi_produce_jsonb);
PG_FUNCTION_INFO_V1(malachi_produce_batch_bytea);
PG_FUNCTION_INFO_V1(malachi_produce_batch_text);
PG_FUNCTION_INFO_V1(malachi_produce_batch_jsonb);

/*---- heads ----*/

/*
 * produce_head
 *		The range's head as this backend knows it, asking the writer to open
 *		one when it knows none.  Returns false when the range is no longer
 *		active (split or merged).
 */
static bool
produce_head(int64 range_id, HeadEntry *head)
{
	HeadEntry  *entry;
	bool		found;
	WriterCall	call;

	if (head_cache == NULL)
		head_cache = Int64HashCreate("malachi heads", sizeof(HeadEntry),
									TopMemoryContext);
	entry = hash_search(head_cache, &range_id, HASH_FIND, NULL);
	if (entry != NULL && entry->generation == MetaCacheGeneration())
	{
		*head = *entry;
		return true;
	}

	memset(&call, 0, sizeof(call));
	call.kind = WRITER_OPEN_HEAD;
	call.range_id = range_id;
	if (WriterTry(&call, ERRCODE_MALACHI_RANGE_NOT_ACTIVE) != 0)
		return false;

	entry = hash_search(head_cache, &range_id, HASH_ENTER, &found);
	entry->generation = MetaCacheGeneration();
	entry->segment_id = call.segment_id;
	entry->base_offset = call.base_offset;
	*head = *entry;
	return true;
}

/* Forget a head this backend cached (it was sealed). */
static void
produce_forget_head(int64 range_id)
{
	if (head_cache != NULL)
		hash_search(head_cache, &range_id, HASH_REMOVE, NULL);
}

/*---- appending ----*/

/*
 * produce_append_group
 *		Append records [first, last) of one range as batches of at most
 *		PRODUCE_MAX_BATCH_RAW raw bytes.  Returns false, with nothing of this
 *		group appended past the records already marked done, when the range
 *		is no longer active.
 */
static bool
produce_append_group(int64 range_id, ProduceRecord **recs, int nrecs,
					 const StorageSettings *storage)
{
	int			start = 0;

	while (start < nrecs)
	{
		CodecRecord *batch_recs;
		int			n = 0;
		size_t		raw = 0;
		size_t		cap;
		size_t		len;
		char	   *buf;
		int			attempt;
		int			i;
		CodecResult rc;

		/* take records up to the batch size limit (at least one) */
		while (start + n < nrecs)
		{
			size_t		one = CodecRawSize(&recs[start + n]->rec, 1);

			if (n > 0 && raw + one > PRODUCE_MAX_BATCH_RAW)
				break;
			raw += one;
			n++;
		}
		batch_recs = palloc(sizeof(CodecRecord) * n);
		for (i = 0; i < n; i++)
			batch_recs[i] = recs[start + i]->rec;
		cap = CodecBatchBound(batch_recs, n, storage->compression);
		if (cap > encode_cap)
		{
			if (encode_buf)
				pfree(encode_buf);
			encode_buf = MemoryContextAllocHuge(TopMemoryContext, cap);
			encode_cap = cap;
		}
		buf = encode_buf;
		rc = CodecEncodeBatch(batch_recs, n, 0, 0,
							  storage->compression, storage->zstd_level,
							  buf, encode_cap, &len);
		if (rc != CODEC_OK)
			elog(ERROR, "could not encode a batch: %s", CodecResultString(rc));

		for (attempt = 0;; attempt++)
		{
			HeadEntry	head;
			int			slotno;
			int64		base;
			AppendView	view;

			if (attempt >= PRODUCE_MAX_ATTEMPTS)
				ereport(ERROR,
						(errcode(ERRCODE_MALACHI_SEALED),
						 errmsg("could not append to range " INT64_FORMAT ": its head kept being sealed",
								range_id)));
			InjectWait(INJECT_PRODUCE_ROUTED);
			if (!produce_head(range_id, &head))
			{
				pfree(batch_recs);
				return false;
			}
			slotno = AppendAttach(head.segment_id, head.base_offset);
			if (!AppendBatch(slotno, head.segment_id, buf, len, n, &base))
			{
				/* fenced: record the seal, then move to the next head */
				(void) HeadSeal(head.segment_id, head.base_offset, NULL);
				produce_forget_head(range_id);
				continue;
			}

			/* roll by size once the head is full */
			if (AppendGetView(slotno, head.segment_id, &view) &&
				(int64) view.visible_bytes >= storage->segment_max_bytes)
			{
				(void) HeadSeal(head.segment_id, head.base_offset, NULL);
				produce_forget_head(range_id);
			}
			break;
		}
		for (i = 0; i < n; i++)
		{
			recs[start + i]->done = true;
			recs[start + i]->range_id = range_id;
		}
		start += n;
		pfree(batch_recs);
	}
	return true;
}

/*
 * Produce
 *		Route and append records to a topic; returns the range the first
 *		record landed in (the only one, for produce).
 */
static int64
Produce(const char *topic, ProduceRecord *recs, int nrecs)
{
	uint32		rotation = null_key_rotation++;
	int			round;

	if (MetaCacheXactChangedMetadata())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot produce in a transaction that changed malachi metadata"),
				 errhint("Commit the change (create_topic, split_range, ...) first, then produce.")));

	for (round = 0; round < PRODUCE_MAX_ATTEMPTS; round++)
	{
		const RangeRow *ranges;
		RangeRow   *snapshot;
		StorageSettings overrides;
		StorageSettings storage;
		ProduceRecord **group;
		int			nranges;
		int			null_group;
		int			pending = 0;
		int			g;
		int			i;

		CHECK_FOR_INTERRUPTS();
		nranges = MetaCacheTopic(topic, &ranges, &overrides);
		if (nranges == 0)
			ereport(ERROR,
					(errcode(ERRCODE_MALACHI_METADATA_UNAVAILABLE),
					 errmsg("topic \"%s\" has no active range", topic)));
		snapshot = palloc(sizeof(RangeRow) * nranges);
		memcpy(snapshot, ranges, sizeof(RangeRow) * nranges);
		SettingsStorageEffective(&overrides, &storage);
		null_group = (int) (rotation % (uint32) nranges);

		/* route every pending record */
		for (i = 0; i < nrecs; i++)
		{
			int			lo = 0;
			int			hi = nranges - 1;

			if (recs[i].done)
				continue;
			pending++;
			if (recs[i].rec.key == NULL)
			{
				recs[i].group = null_group;
				continue;
			}
			while (lo <= hi)
			{
				int			mid = lo + (hi - lo) / 2;

				if (snapshot[mid].slice.lo <= recs[i].hash)
					lo = mid + 1;
				else
					hi = mid - 1;
			}
			if (hi < 0 || !SliceContains(snapshot[hi].slice, recs[i].hash))
				ereport(ERROR,
						(errcode(ERRCODE_MALACHI_NOT_TILED),
						 errmsg("no active range of topic \"%s\" owns key hash %u",
								topic, recs[i].hash)));
			recs[i].group = hi;
		}
		if (pending == 0)
			break;

		/* append each range's records as one batch, in argument order */
		group = palloc(sizeof(ProduceRecord *) * nrecs);
		for (g = 0; g < nranges; g++)
		{
			int			n = 0;

			for (i = 0; i < nrecs; i++)
				if (!recs[i].done && recs[i].group == g)
					group[n++] = &recs[i];
			if (n > 0)
				(void) produce_append_group(snapshot[g].range_id, group, n,
											&storage);
		}
		pfree(group);
		pfree(snapshot);
	}
	for (int i = 0; i < nrecs; i++)
		if (!recs[i].done)
			ereport(ERROR,
					(errcode(ERRCODE_MALACHI_METADATA_UNAVAILABLE),
					 errmsg("could not route records of topic \"%s\" to an active range", topic),
					 errdetail("The topic's ranges kept changing while producing.")));
	return recs[0].range_id;
}

/*---- unpacking arguments ----*/

/* Refuse a record over malachi.max_record_bytes. */
static inline void
CheckRecordSize(const CodecRecord *rec, int index)
{
	size_t		size = CodecRawSize(rec, 1);

	if (size > (size_t) malachi_max_record_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("record %d is too large: %zu bytes", index + 1, size),
				 errdetail("The limit is %d bytes (malachi.max_record_bytes), counting key, value, headers and 20 bytes of framing.",
						   malachi_max_record_bytes)));
}

/* Bytes of a value of the given type: bytea and text as they are, jsonb as text. */
static void
produce_value_bytes(Datum value, Oid type, const char **data, uint32 *len)
{
	if (type == JSONBOID)
	{
		char	   *s = JsonbToCString(NULL, &DatumGetJsonbP(value)->root, 0);

		*data = s;
		*len = strlen(s);
	}
	else
	{
		struct varlena *v = PG_DETOAST_DATUM_PACKED(value);

		*data = VARDATA_ANY(v);
		*len = VARSIZE_ANY_EXHDR(v);
	}
}

/*
 * produce_fill
 *		Build one record: key (NULL allowed), value (required), headers
 *		(NULL for none) and the call's timestamp.
 */
static void
produce_fill(ProduceRecord *r, Datum key, bool key_null, Datum value,
			 bool value_null, Oid value_type, Datum headers, bool headers_null,
			 TimestampTz now, int index)
{
	memset(r, 0, sizeof(*r));
	if (value_null)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("value of record %d must not be null", index + 1)));
	if (!key_null)
	{
		text	   *k = DatumGetTextPP(key);
		int			len = VARSIZE_ANY_EXHDR(k);
		char	   *utf8 = pg_server_to_any(VARDATA_ANY(k), len, PG_UTF8);

		r->rec.key = VARDATA_ANY(k);
		r->rec.key_len = len;
		r->hash = KeyspaceHash(utf8, utf8 == VARDATA_ANY(k) ? (size_t) len : strlen(utf8));
	}
	produce_value_bytes(value, value_type, &r->rec.value, &r->rec.value_len);
	if (!headers_null)
	{
		char	   *h = JsonbToCString(NULL, &DatumGetJsonbP(headers)->root, 0);

		r->rec.headers = h;
		r->rec.headers_len = strlen(h);
	}
	r->rec.timestamp = now;
	CheckRecordSize(&r->rec, index);
}

/* produce(topic, key, value, headers) for any value type */
static Datum
produce_one(FunctionCallInfo fcinfo, Oid value_type)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	ProduceRecord rec;

	produce_fill(&rec, PG_GETARG_DATUM(1), PG_ARGISNULL(1),
				 PG_GETARG_DATUM(2), PG_ARGISNULL(2), value_type,
				 PG_GETARG_DATUM(3), PG_ARGISNULL(3),
				 GetCurrentTimestamp(), 0);
	PG_RETURN_INT64(Produce(topic, &rec, 1));
}

/* Deconstruct a one-dimensional array argument (NULL: no elements). */
static int
produce_array(FunctionCallInfo fcinfo, int argno, Oid elemtype, Datum **elems,
			  bool **nulls, const char *what)
{
	ArrayType  *arr;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign, elems, nulls, &n);
	return n;
}

/* produce_batch(topic, keys, values, headers) for any value type */
static Datum
produce_batch(FunctionCallInfo fcinfo, Oid value_type)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	Datum	   *keys;
	bool	   *key_nulls;
	Datum	   *values;
	bool	   *value_nulls;
	Datum	   *headers = NULL;
	bool	   *header_nulls = NULL;
	int			nkeys;
	int			nvalues;
	int			nheaders = 0;
	ProduceRecord *recs;
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	nkeys = produce_array(fcinfo, 1, TEXTOID, &keys, &key_nulls, "keys");
	nvalues = produce_array(fcinfo, 2, value_type, &values, &value_nulls, "values");
	if (!PG_ARGISNULL(3))
		nheaders = produce_array(fcinfo, 3, JSONBOID, &headers, &header_nulls,
								 "headers");
	if (nkeys != nvalues || (!PG_ARGISNULL(3) && nheaders != nkeys))
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("keys, values and headers must have the same length"),
				 errdetail("There are %d keys, %d values and %d headers.",
						   nkeys, nvalues, PG_ARGISNULL(3) ? nkeys : nheaders)));
	if (nkeys == 0)
	{
		/* still check the topic exists */
		const RangeRow *ranges;

		(void) MetaCacheActiveRanges(topic, &ranges);
		PG_RETURN_INT64(0);
	}

	recs = palloc(sizeof(ProduceRecord) * nkeys);
	for (i = 0; i < nkeys; i++)
		produce_fill(&recs[i], keys[i], key_nulls[i], values[i], value_nulls[i],
					 value_type,
					 headers ? headers[i] : (Datum) 0,
					 headers ? header_nulls[i] : true, now, i);
	(void) Produce(topic, recs, nkeys);
	PG_RETURN_INT64(nkeys);
}

/* SQL: produce(topic, key, value bytea, headers) */
Datum
malachi_produce_bytea(PG_FUNCTION_ARGS)
{
	return produce_one(fcinfo, BYTEAOID);
}

/* SQL: produce(topic, key, value text, headers) */
Datum
malachi_produce_text(PG_FUNCTION_ARGS)
{
	return produce_one(fcinfo, TEXTOID);
}

/* SQL: produce(topic, key, value jsonb, headers) */
Datum
malachi_produce_jsonb(PG_FUNCTION_ARGS)
{
	return produce_one(fcinfo, JSONBOID);
}

/* SQL: produce_batch(topic, keys, values bytea[], headers) */
Datum
malachi_produce_batch_bytea(PG_FUNCTION_ARGS)
{
	return produce_batch(fcinfo, BYTEAOID);
}

/* SQL: produce_batch(topic, keys, values text[], headers) */
Datum
malachi_produce_batch_text(PG_FUNCTION_ARGS)
{
	return produce_batch(fcinfo, TEXTOID);
}

/* SQL: produce_batch(topic, keys, values jsonb[], headers) */
Datum
malachi_produce_batch_jsonb(PG_FUNCTION_ARGS)
{
	return produce_batch(fcinfo, JSONBOID);
}
