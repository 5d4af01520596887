/*-------------------------------------------------------------------------
 *
 * produce.c
 *	  Routing records to ranges and appending them, one batch per range.
 *
 * produce and produce_batch route each record by its key's hash to the
 * active range that owns it (a NULL key goes to one range per call,
 * rotating), group the records by range, encode each group as one batch
 * (compressed when the topic's settings say so) and append it to the
 * range's head.
 *
 * Two modes (malachi.produce_mode):
 * - transactional (the default): the call only buffers the records in this
 *   backend; at pre-commit they are appended, one batch per range, stamped
 *   with the transaction id and durable before the commit record is
 *   written.  They stay in doubt (invisible) until the commit callback
 *   releases them; the abort callback voids them.  So records are readable
 *   if and only if the transaction commits, in commit order.
 * - immediate: appended and durable when the call returns, whatever the
 *   transaction does.
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
 * - Buffered records follow savepoints: a rolled-back subtransaction's
 *   records are dropped.  A transaction holding buffered records cannot be
 *   prepared (no two-phase commit), and its buffer is bounded by
 *   malachi.max_transaction_bytes (refused past it, never spilled).
 * - A transaction's records for one range form one batch, and a producer
 *   never fences a head after appending to it in doubt (the roll-by-size
 *   check comes first): a fence waits for the batches in doubt in its
 *   segment, so sealing one's own would wait forever.
 * - Once the pre-commit callback has run, a transactional produce is an
 *   error: it can only come from another library's pre-commit callback
 *   called after malachi's (one loaded before malachi), and its records
 *   would never be appended.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <malloc.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "replication/message.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "append.h"
#include "catalog.h"
#include "codec.h"
#include "errors.h"
#include "inject.h"
#include "keyspace.h"
#include "metacache.h"
#include "produce.h"
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
	uint32		null_turn;		/* a NULL key: its call's rotation turn */
	int			group;			/* index of its range in this round */
	int64		range_id;		/* the range it landed in, once done */
	bool		done;
} ProduceRecord;

/* A batch written and not yet acknowledged, with the records it holds. */
typedef struct PendingAck
{
	AppendTicket ticket;
	int64		range_id;
	ProduceRecord **recs;
	int			nrecs;
} PendingAck;

/* The batches a call has written, to acknowledge together. */
typedef struct AckList
{
	PendingAck *acks;
	int			n;
	int			cap;
} AckList;

/* This backend's head of a range. */
typedef struct HeadEntry
{
	int64		range_id;		/* hash key */
	int64		segment_id;
	int64		base_offset;
	uint64		generation;		/* metadata generation when cached */
	uint64		segments_epoch; /* segments epoch when last known active */
} HeadEntry;

static HTAB *head_cache = NULL;

static void produce_forget_head(int64 range_id);

/* Where a topic's next NULL-key records go, per topic, in this session. */
typedef struct NullKeyTurn
{
	int64		topic_id;		/* hash key */
	uint32		next;			/* rotation: the next call's turn */
} NullKeyTurn;

static HTAB *null_key_turns = NULL;

/*
 * The encode buffer, kept across calls: a fresh multi-megabyte allocation per
 * batch would be mapped and page-faulted in anew every time.  encode_buf is
 * encode_mem aligned for direct I/O; encode_cap bytes from there on, the last
 * APPEND_DIRECT_SLACK of them left for a filler after the batch.
 */
static char *encode_mem = NULL;
static char *encode_buf = NULL;
static size_t encode_cap = 0;

/* A record buffered by a transactional produce, until pre-commit. */
typedef struct PendingRecord
{
	int			topic;			/* index into pending_topics */
	SubTransactionId subid;		/* the subtransaction that produced it (its
								 * parent's once it committed) */
	ProduceRecord rec;			/* its bytes live in pending_cxt */
} PendingRecord;

/*
 * A topic this transaction buffered records for: by name, and by the id the
 * name had then, so that records never go to another topic of that name
 * (the topic dropped and created again before the commit).
 */
typedef struct PendingTopic
{
	char	   *name;
	int64		topic_id;
} PendingTopic;

/* A batch appended at pre-commit, to settle at commit or abort. */
typedef struct InDoubtBatch
{
	int64		segment_id;
	int64		end_offset;
} InDoubtBatch;

/*
 * This transaction's buffered records (pending_cxt is reset when it ends)
 * and its batches in doubt (kept in TopMemoryContext, so that the callbacks
 * can settle them whatever the memory state).
 */
static MemoryContext pending_cxt = NULL;
static PendingRecord *pending = NULL;
static int	npending = 0;
static int	pending_cap = 0;
static PendingTopic *pending_topics = NULL;
static int	ntopics = 0;
static int	topics_cap = 0;
static size_t pending_bytes = 0;
static uint64 pending_xid = 0;
static bool precommitted = false;	/* the pre-commit callback has run */
static InDoubtBatch *in_doubt = NULL;
static int	nin_doubt = 0;
static int	in_doubt_cap = 0;

/* How long a producer holding batches in doubt waits for a fence */
#define PRODUCE_FENCE_TIMEOUT_MS	10000

static long produce_fence_timeout(void);

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
	uint64		generation;
	uint64		epoch;

	if (head_cache == NULL)
		head_cache = Int64HashCreate("malachi heads", sizeof(HeadEntry),
									TopMemoryContext);
	entry = hash_search(head_cache, &range_id, HASH_FIND, NULL);
	if (entry != NULL)
	{
		generation = MetaCacheGeneration();
		epoch = WriterSegmentsEpoch();

		/*
		 * Segments were opened, sealed or deleted since this head was last
		 * known active (another session may have sealed it, and retention
		 * deleted it, which no metadata generation tells), or metadata
		 * changed, of any topic.  Ask the catalog, not the writer: one
		 * create_topic would otherwise send every backend's every cached
		 * head through the writer's queue, a synchronous commit each.  The
		 * generation and the epoch are read first, so that a change after
		 * the answer shows.
		 */
		if ((entry->generation == generation &&
			 entry->segments_epoch == epoch) ||
			CatalogHeadActive(entry->segment_id, range_id, entry->base_offset))
		{
			entry->generation = generation;
			entry->segments_epoch = epoch;
			*head = *entry;
			return true;
		}
		produce_forget_head(range_id);
	}

	memset(&call, 0, sizeof(call));
	call.kind = WRITER_OPEN_HEAD;
	call.range_id = range_id;
	/* before the answer, see above */
	generation = MetaCacheGeneration();
	epoch = WriterSegmentsEpoch();
	if (WriterTry(&call, ERRCODE_MALACHI_RANGE_NOT_ACTIVE,
				  produce_fence_timeout()) != 0)
		return false;

	entry = hash_search(head_cache, &range_id, HASH_ENTER, &found);
	entry->generation = generation;
	entry->segments_epoch = epoch;
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

/*---- batches in doubt ----*/

/* Room for one more batch in doubt, made before the append (no OOM after). */
static void
produce_reserve_in_doubt(void)
{
	if (nin_doubt == in_doubt_cap)
		in_doubt = GrowArray(in_doubt, &in_doubt_cap, sizeof(InDoubtBatch), 16,
							 TopMemoryContext);
}

/* Remember a batch this transaction appended in doubt. */
static void
produce_note_in_doubt(int64 segment_id, int64 end_offset)
{
	Assert(nin_doubt < in_doubt_cap);
	in_doubt[nin_doubt].segment_id = segment_id;
	in_doubt[nin_doubt].end_offset = end_offset;
	nin_doubt++;
}

/* Forget a batch noted in doubt that its append voided (behind a failure). */
static void
produce_forget_in_doubt(int64 segment_id, int64 end_offset)
{
	int			i;

	for (i = 0; i < nin_doubt; i++)
		if (in_doubt[i].segment_id == segment_id &&
			in_doubt[i].end_offset == end_offset)
		{
			in_doubt[i] = in_doubt[--nin_doubt];
			return;
		}
}

/* Does this transaction hold a batch in doubt in the segment? */
static bool
produce_holds_in_doubt(int64 segment_id)
{
	int			i;

	for (i = 0; i < nin_doubt; i++)
		if (in_doubt[i].segment_id == segment_id)
			return true;
	return false;
}

/*
 * Fence and busy timeout of this backend's seals: bounded while it holds
 * batches in doubt, which hold back the readers of their heads (and a
 * transaction it waits for may be waiting for those batches, unseen).
 * Otherwise unbounded, and a lock wait where the writer is busy
 * (WriterTry), at commit too.
 */
static long
produce_fence_timeout(void)
{
	return nin_doubt > 0 ? PRODUCE_FENCE_TIMEOUT_MS : 0;
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
					 const StorageSettings *storage, uint64 xid,
					 AckList *acks)
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

			/* a transaction's records for a range form one batch */
			if (n > 0 && xid == 0 && raw + one > PRODUCE_MAX_BATCH_RAW)
				break;
			raw += one;
			n++;
		}
		batch_recs = MemoryContextAllocHuge(CurrentMemoryContext,
											sizeof(CodecRecord) * n);
		for (i = 0; i < n; i++)
			batch_recs[i] = recs[start + i]->rec;
		cap = CodecBatchBound(batch_recs, n, storage->compression);
		if (cap + APPEND_DIRECT_SLACK > encode_cap)
		{
			/*
			 * Aligned, with room for a filler: see AppendBatchWrite.  The
			 * new buffer comes first, so that a failed allocation leaves
			 * the old one and its capacity as they were.
			 */
			size_t		newcap = cap + APPEND_DIRECT_SLACK;
			char	   *fresh = MemoryContextAllocHuge(TopMemoryContext,
													  newcap + APPEND_DIRECT_ALIGN);

			if (encode_mem)
				pfree(encode_mem);
			encode_mem = fresh;
			encode_cap = newcap;
			encode_buf = (char *) TYPEALIGN(APPEND_DIRECT_ALIGN, encode_mem);
		}
		buf = encode_buf;
		rc = CodecEncodeBatch(batch_recs, n, 0, xid,
							  storage->compression, storage->zstd_level,
							  buf, encode_cap - APPEND_DIRECT_SLACK, &len);
		if (rc != CODEC_OK)
			elog(ERROR, "could not encode a batch: %s", CodecResultString(rc));

		for (attempt = 0;; attempt++)
		{
			HeadEntry	head;
			int			slotno;
			AppendView	view;
			PendingAck *ack;

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

			/*
			 * Roll by size before appending, but never a head this
			 * transaction holds a batch in doubt in (a commit re-routing
			 * records after a split can come back to one): its fence would
			 * wait for this very commit.  Nor, below twice the size, a head
			 * in which another transaction's batch is in doubt: the fence
			 * would wait for that commit (a slow disk, or a synchronous
			 * standby), and every producer of the range behind it.  The
			 * batch goes past the size instead, and a later append rolls
			 * the head.
			 */
			if (AppendGetView(slotno, head.segment_id, &view) &&
				(int64) view.visible_bytes >= storage->segment_max_bytes &&
				!view.fenced && !produce_holds_in_doubt(head.segment_id) &&
				!(view.in_doubt &&
				  (int64) view.visible_bytes < 2 * (int64) storage->segment_max_bytes))
			{
				(void) HeadSeal(head.segment_id, head.base_offset, NULL,
								produce_fence_timeout(), produce_fence_timeout());
				produce_forget_head(range_id);
				continue;
			}
			if (xid != 0)
				produce_reserve_in_doubt();
			if (acks->n == acks->cap)
				acks->acks = GrowArray(acks->acks, &acks->cap,
									   sizeof(PendingAck), 8,
									   CurrentMemoryContext);
			ack = &acks->acks[acks->n];
			if (!AppendBatchWrite(slotno, head.segment_id, buf, len,
								  encode_cap, n, xid != 0,
								  produce_fence_timeout(), &ack->ticket))
			{
				/*
				 * Fenced under a batch of this commit still in doubt: the
				 * seal waits for this very commit, and whoever fenced it
				 * may wait too.  Fail now (the rollback voids the batch and
				 * lets the seal through); a retry appends to the next head.
				 */
				if (xid != 0 && produce_holds_in_doubt(head.segment_id))
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not append to range " INT64_FORMAT ": its head was sealed under a batch of this transaction",
									range_id),
							 errdetail("Records re-routed by a split came back to a range where this commit had already written."),
							 errhint("Retry the transaction.")));
				/* fenced: record the seal, then move to the next head */
				(void) HeadSeal(head.segment_id, head.base_offset, NULL,
								produce_fence_timeout(), produce_fence_timeout());
				produce_forget_head(range_id);
				continue;
			}
			acks->n++;
			ack->range_id = range_id;
			ack->recs = recs + start;
			ack->nrecs = n;
			if (xid != 0)
				produce_note_in_doubt(head.segment_id,
									  ack->ticket.base_offset + n);
			break;
		}
		start += n;
		pfree(batch_recs);
	}
	return true;
}

/*
 * produce_acknowledge
 *		Wait for every batch a round wrote (their syncs overlap: one wait
 *		often finds the others' data already durable), and mark their
 *		records done.  A batch behind a failed write is never part of the
 *		log: the head was fenced before the failed region (and recovery
 *		cuts a file past an unwritten one), and a transactional batch was
 *		voided with it.  Its records stay pending, for the next round to
 *		append to the range's next head, as records that found a head
 *		fenced.
 */
static void
produce_acknowledge(AckList *acks, uint64 xid)
{
	int			k;
	int			i;

	for (k = 0; k < acks->n; k++)
	{
		PendingAck *ack = &acks->acks[k];

		if (!AppendBatchWait(&ack->ticket))
		{
			if (xid != 0)
				produce_forget_in_doubt(ack->ticket.segment_id,
										ack->ticket.base_offset + ack->nrecs);
			produce_forget_head(ack->range_id);
			continue;
		}
		for (i = 0; i < ack->nrecs; i++)
		{
			ack->recs[i]->done = true;
			ack->recs[i]->range_id = ack->range_id;
		}
	}
	acks->n = 0;
}

/* Release the pins of batches written but not acknowledged (on error). */
static void
produce_abandon(AckList *acks)
{
	int			k;

	for (k = 0; k < acks->n; k++)
		if (acks->acks[k].ticket.slotno >= 0)
			AppendBatchAbandon(&acks->acks[k].ticket);
	acks->n = 0;
}

/*
 * Stamp a call's NULL-key records with the call's turn: each call with
 * such records takes the next range of that topic (as the topic's active
 * ranges stand when its records are appended: at commit, in transactional
 * mode); calls without one, and other topics, do not move it.
 */
static void
produce_null_key_turn(const char *topic, ProduceRecord *recs, int nrecs)
{
	const RangeRow *ranges;
	StorageSettings overrides;
	NullKeyTurn *turn;
	bool		found;
	int64		topic_id;
	int			i;

	for (i = 0; i < nrecs && recs[i].rec.key != NULL; i++)
		;
	if (i == nrecs || MetaCacheTopic(topic, &ranges, &overrides) == 0)
		return;
	topic_id = ranges[0].topic_id;
	if (null_key_turns == NULL)
		null_key_turns = Int64HashCreate("malachi null-key turns",
										 sizeof(NullKeyTurn), TopMemoryContext);
	turn = hash_search(null_key_turns, &topic_id, HASH_ENTER, &found);
	if (!found)
		turn->next = 0;
	for (; i < nrecs; i++)
		recs[i].null_turn = turn->next;
	turn->next++;
}

/*
 * Produce
 *		Route and append records to a topic; returns the range the first
 *		record landed in (the only one, for produce).  A topic_id other
 *		than 0 is the id the records were buffered for: no_such_topic if
 *		the name now has another.
 */
static int64
Produce(const char *topic, int64 topic_id, ProduceRecord *recs, int nrecs,
		uint64 xid)
{
	AckList		acks = {NULL, 0, 0};
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
		int			unrouted = 0;
		int			g;
		int			i;

		CHECK_FOR_INTERRUPTS();
		nranges = MetaCacheTopic(topic, &ranges, &overrides);
		if (nranges == 0)
			ereport(ERROR,
					(errcode(ERRCODE_MALACHI_METADATA_UNAVAILABLE),
					 errmsg("topic \"%s\" has no active range", topic)));
		if (topic_id != 0 && ranges[0].topic_id != topic_id)
			ereport(ERROR,
					(errcode(ERRCODE_MALACHI_NO_SUCH_TOPIC),
					 errmsg("topic \"%s\" was dropped after this transaction produced to it", topic),
					 errdetail("A topic of that name was created again; the transaction's records were for the one dropped.")));
		snapshot = palloc(sizeof(RangeRow) * nranges);
		memcpy(snapshot, ranges, sizeof(RangeRow) * nranges);
		SettingsStorageEffective(&overrides, &storage);

		/* route every pending record */
		for (i = 0; i < nrecs; i++)
		{
			int			lo = 0;
			int			hi = nranges - 1;

			if (recs[i].done)
				continue;
			unrouted++;
			if (recs[i].rec.key == NULL)
			{
				recs[i].group = (int) (recs[i].null_turn % (uint32) nranges);
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
		if (unrouted == 0)
			break;

		/*
		 * Write each range's records as one batch, in argument order, then
		 * acknowledge them all: the syncs of different segments overlap.
		 * Records are grouped in range order in one array, so that each
		 * batch's records stay addressable until acknowledged.
		 */
		group = MemoryContextAllocHuge(CurrentMemoryContext,
									   sizeof(ProduceRecord *) * nrecs);
		PG_TRY();
		{
			int			used = 0;

			for (g = 0; g < nranges; g++)
			{
				int			n = 0;

				for (i = 0; i < nrecs; i++)
					if (!recs[i].done && recs[i].group == g)
						group[used + n++] = &recs[i];
				/*
				 * A range the writer found no longer active was split or
				 * merged by a commit whose epoch bump this backend may not
				 * see yet: reload the topic as of now next round, rather
				 * than route by the stale cache until the rounds run out.
				 */
				if (n > 0 &&
					!produce_append_group(snapshot[g].range_id, group + used,
										  n, &storage, xid, &acks))
					MetaCacheForget();
				used += n;
			}
			produce_acknowledge(&acks, xid);
		}
		PG_CATCH();
		{
			produce_abandon(&acks);
			PG_RE_THROW();
		}
		PG_END_TRY();
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

/*---- transactional produce ----*/

/* Index of a topic among this transaction's, adding it. */
static int
produce_topic_index(const char *topic, int64 topic_id)
{
	int			i;

	for (i = 0; i < ntopics; i++)
		if (pending_topics[i].topic_id == topic_id &&
			strcmp(pending_topics[i].name, topic) == 0)
			return i;
	if (ntopics == topics_cap)
		pending_topics = GrowArray(pending_topics, &topics_cap,
								   sizeof(PendingTopic), 4, pending_cxt);
	pending_topics[ntopics].name = MemoryContextStrdup(pending_cxt, topic);
	pending_topics[ntopics].topic_id = topic_id;
	return ntopics++;
}

/* A copy of n bytes in pending_cxt (NULL stays NULL). */
static const char *
produce_copy(const char *data, uint32 len)
{
	char	   *copy;

	if (data == NULL)
		return NULL;
	copy = MemoryContextAlloc(pending_cxt, Max(len, 1));
	memcpy(copy, data, len);
	return copy;
}

/*
 * ProduceBuffer
 *		Keep records for this transaction's pre-commit.  The topic must
 *		exist now; the bytes are bounded by malachi.max_transaction_bytes.
 */
static void
ProduceBuffer(const char *topic, ProduceRecord *recs, int nrecs)
{
	const RangeRow *ranges;
	size_t		bytes = 0;
	int64		topic_id;
	int			t;
	int			i;

	if (precommitted)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot produce transactional records once the transaction's records were appended at commit"),
				 errdetail("The call came from a pre-commit callback that runs after malachi's; its records would never be appended."),
				 errhint("Load that library after malachi (shared_preload_libraries), or produce with malachi.produce_mode = 'immediate'.")));
	if (MetaCacheXactChangedMetadata())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot produce in a transaction that changed malachi metadata"),
				 errhint("Commit the change (create_topic, split_range, ...) first, then produce.")));
	/* no such topic: error now */
	topic_id = MetaCacheActiveRanges(topic, &ranges) > 0 ? ranges[0].topic_id :
		CatalogTopicId(topic, CATALOG_LOCK_NONE);

	for (i = 0; i < nrecs; i++)
		bytes += CodecRawSize(&recs[i].rec, 1);
	if (pending_bytes + bytes > (size_t) malachi_max_transaction_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("this transaction would produce more than %d bytes of records",
						malachi_max_transaction_bytes),
				 errdetail("Transactional records are kept in memory until commit; the limit is malachi.max_transaction_bytes."),
				 errhint("Produce in smaller transactions, raise malachi.max_transaction_bytes, or use malachi.produce_mode = 'immediate'.")));

	if (pending_cxt == NULL)
		pending_cxt = AllocSetContextCreate(TopMemoryContext,
											"malachi pending records",
											ALLOCSET_DEFAULT_SIZES);
	/* the records are stamped with the transaction id (see produce_flush) */
	if (pending_xid == 0)
		pending_xid = U64FromFullTransactionId(GetTopFullTransactionId());

	t = produce_topic_index(topic, topic_id);
	if (npending + nrecs > pending_cap)
	{
		int			cap = Max(64, Max(pending_cap * 2, npending + nrecs));

		pending = pending ?
			repalloc_huge(pending, sizeof(PendingRecord) * cap) :
			MemoryContextAllocHuge(pending_cxt, sizeof(PendingRecord) * cap);
		pending_cap = cap;
	}
	/*
	 * A record counts (npending, and its bytes) once its copies are made:
	 * a copy that fails leaves nothing for a rollback to a savepoint to
	 * subtract.
	 */
	for (i = 0; i < nrecs; i++)
	{
		PendingRecord *p = &pending[npending];

		p->topic = t;
		p->subid = GetCurrentSubTransactionId();
		p->rec = recs[i];
		p->rec.rec.key = produce_copy(recs[i].rec.key, recs[i].rec.key_len);
		p->rec.rec.value = produce_copy(recs[i].rec.value, recs[i].rec.value_len);
		p->rec.rec.headers = produce_copy(recs[i].rec.headers, recs[i].rec.headers_len);
		npending++;
		pending_bytes += CodecRawSize(&recs[i].rec, 1);
	}
}

/*
 * produce_flush
 *		At pre-commit: append every buffered record, topic by topic, one
 *		batch per range, stamped with the transaction id and in doubt.  An
 *		error here aborts the transaction (and voids what was appended).
 */
static void
produce_flush(void)
{
	ProduceRecord *recs = MemoryContextAllocHuge(CurrentMemoryContext,
												 sizeof(ProduceRecord) * npending);
	int		   *start = palloc0(sizeof(int) * (ntopics + 1));
	int		   *next = palloc(sizeof(int) * Max(ntopics, 1));
	int			t;
	int			i;

	/*
	 * Before any batch stamped with this transaction id is durable, a WAL
	 * record carrying the id must be: otherwise a crash could end recovery
	 * with the id unassigned, hand it to a new transaction, and let that
	 * one's commit decide the fate of these batches.  The record also means
	 * the transaction has written WAL, so its commit is flushed as
	 * synchronous_commit says (a transaction that wrote none would commit
	 * asynchronously, and be acknowledged before its commit is durable).
	 */
	XLogFlush(LogLogicalMessage("malachi", "", 0, true));

	/*
	 * Each topic's records together, in the order they were produced: a
	 * counting sort, one pass over the records whatever the number of
	 * topics (a scan of them all per topic made a commit to many topics
	 * quadratic).
	 */
	for (i = 0; i < npending; i++)
		start[pending[i].topic + 1]++;
	for (t = 0; t < ntopics; t++)
	{
		start[t + 1] += start[t];
		next[t] = start[t];
	}
	for (i = 0; i < npending; i++)
	{
		ProduceRecord *rec = &recs[next[pending[i].topic]++];

		*rec = pending[i].rec;
		rec->done = false;
	}
	for (t = 0; t < ntopics; t++)
		if (start[t + 1] > start[t])
			(void) Produce(pending_topics[t].name, pending_topics[t].topic_id,
						   recs + start[t], start[t + 1] - start[t],
						   pending_xid);
	pfree(next);
	pfree(start);
	pfree(recs);
}

/* Forget this transaction's buffer and batches in doubt. */
static void
produce_reset(void)
{
	if (pending_cxt != NULL)
		MemoryContextReset(pending_cxt);
	pending = NULL;
	npending = pending_cap = 0;
	pending_topics = NULL;
	ntopics = topics_cap = 0;
	pending_bytes = 0;
	pending_xid = 0;
	precommitted = false;
	nin_doubt = 0;
}

/* Settle this transaction's batches in doubt (shared memory only). */
static void
produce_settle(bool committed)
{
	int			i;

	for (i = 0; i < nin_doubt; i++)
		AppendResolve(in_doubt[i].segment_id, in_doubt[i].end_offset, committed);
	nin_doubt = 0;
}

/*
 * produce_xact_callback
 *		Append at pre-commit; release at commit, void at abort.  Nothing
 *		after the commit record can fail: settling only changes shared
 *		memory.
 */
static void
produce_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			precommitted = true;
			if (npending > 0)
			{
				produce_flush();
				InjectWait(INJECT_AFTER_FLUSH);
				InjectFail(INJECT_FAIL_AFTER_FLUSH);
			}
			break;
		case XACT_EVENT_PRE_PREPARE:
			precommitted = true;
			if (npending > 0)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("cannot prepare a transaction that produced records"),
						 errhint("Commit it directly, or produce with malachi.produce_mode = 'immediate'.")));
			break;
		case XACT_EVENT_COMMIT:
			produce_settle(true);
			produce_reset();
			break;
		case XACT_EVENT_ABORT:
			produce_settle(false);
			produce_reset();
			break;
		case XACT_EVENT_PREPARE:
			produce_reset();
			break;
		default:
			break;
	}
}

/*
 * Drop the records of a rolled-back subtransaction; hand up a committed
 * one's.  Its records are the last ones buffered: those produced since it
 * began, by it or by its children (whose ids are larger, and whose records
 * carry its id once they committed).  Records from before it carry smaller
 * ids.  So only that tail is looked at: a transaction that wraps each of
 * many produce calls in a savepoint (an EXCEPTION block in a loop, psql's
 * ON_ERROR_ROLLBACK, a driver's autosave) pays for its own records, not for
 * every record buffered so far (it did: quadratic in the records).
 */
static void
produce_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						 SubTransactionId parentSubid, void *arg)
{
	int			first = npending;
	int			i;

	if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	while (first > 0 && pending[first - 1].subid >= mySubid)
		first--;
	for (i = first; i < npending; i++)
	{
		const CodecRecord *r = &pending[i].rec.rec;

		if (event == SUBXACT_EVENT_COMMIT_SUB)
		{
			pending[i].subid = parentSubid;
			continue;
		}

		/*
		 * Give the copies back now, not at the transaction's end: a loop
		 * that produces and rolls back to a savepoint would otherwise grow
		 * without bound under the byte limit.
		 */
		pending_bytes -= CodecRawSize(r, 1);
		if (r->key)
			pfree(unconstify(char *, r->key));
		if (r->value)
			pfree(unconstify(char *, r->value));
		if (r->headers)
			pfree(unconstify(char *, r->headers));
	}
	if (event == SUBXACT_EVENT_ABORT_SUB)
		npending = first;
}

/*
 * A stand-in, for tests, for another library's pre-commit callback called
 * after malachi's: with failure point produce-late listed, it produces a
 * record to topic "late" at pre-commit.  Registered before
 * produce_xact_callback, so called after it (the newest is called first).
 */
static void
produce_late_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_COMMIT || !InjectFailing(INJECT_PRODUCE_LATE))
		return;
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT malachi.produce('late', 'k', 'late'::text)", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "produce-late: the produce failed");
	SPI_finish();
	PopActiveSnapshot();
}

/*
 * ProduceInit
 *		Watch transaction ends.  Called from _PG_init.
 */
void
ProduceInit(void)
{
#ifdef M_MMAP_THRESHOLD
	/*
	 * Produce handles arrays of megabytes per call.  With glibc's defaults
	 * each such allocation is mapped and unmapped (or the heap trimmed) every
	 * call, and every page is faulted in anew: measured, that made immediate
	 * produce_batch of 1,000 x 1 KiB 40% slower.  Keep blocks up to 16 MB in
	 * the heap and trim only past 32 MB free.  Process-wide: every backend
	 * of a node with malachi preloaded may keep up to 32 MB of freed memory.
	 */
	mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
#endif
	RegisterXactCallback(produce_late_callback, NULL);
	RegisterXactCallback(produce_xact_callback, NULL);
	RegisterSubXactCallback(produce_subxact_callback, NULL);
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

/* Producing writes: refused in a read-only transaction and on a standby. */
static inline void
CheckWritable(void)
{
	PreventCommandIfReadOnly("malachi.produce");
	PreventCommandDuringRecovery("malachi.produce");
}

/* produce(topic, key, value, headers) for any value type */
static Datum
produce_one(FunctionCallInfo fcinfo, Oid value_type)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	ProduceRecord rec;

	CheckWritable();
	produce_fill(&rec, PG_GETARG_DATUM(1), PG_ARGISNULL(1),
				 PG_GETARG_DATUM(2), PG_ARGISNULL(2), value_type,
				 PG_GETARG_DATUM(3), PG_ARGISNULL(3),
				 GetCurrentTimestamp(), 0);
	produce_null_key_turn(topic, &rec, 1);
	if (malachi_produce_mode == PRODUCE_IMMEDIATE)
		PG_RETURN_INT64(Produce(topic, 0, &rec, 1, 0));

	/* transactional: the range owning the key now; a NULL key's is chosen at commit */
	ProduceBuffer(topic, &rec, 1);
	if (rec.rec.key == NULL)
		PG_RETURN_NULL();
	PG_RETURN_INT64(MetaCacheRoute(topic, rec.hash));
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

	CheckWritable();
	nkeys = produce_array(fcinfo, 1, TEXTOID, &keys, &key_nulls, "keys");
	nvalues = produce_array(fcinfo, 2, value_type, &values, &value_nulls, "values");
	if (!PG_ARGISNULL(3))
		nheaders = produce_array(fcinfo, 3, JSONBOID, &headers, &header_nulls,
								 "headers");
	if (PG_ARGISNULL(3) && nkeys != nvalues)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("keys and values must have the same length"),
				 errdetail("There are %d keys and %d values.", nkeys, nvalues)));
	if (!PG_ARGISNULL(3) && (nkeys != nvalues || nheaders != nkeys))
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("keys, values and headers must have the same length"),
				 errdetail("There are %d keys, %d values and %d headers.",
						   nkeys, nvalues, nheaders)));
	if (nkeys == 0)
	{
		/* still check the topic exists */
		const RangeRow *ranges;

		(void) MetaCacheActiveRanges(topic, &ranges);
		PG_RETURN_INT64(0);
	}

	/* over 1 GB for more than about 12 million records */
	recs = MemoryContextAllocHuge(CurrentMemoryContext,
								  sizeof(ProduceRecord) * nkeys);
	for (i = 0; i < nkeys; i++)
		produce_fill(&recs[i], keys[i], key_nulls[i], values[i], value_nulls[i],
					 value_type,
					 headers ? headers[i] : (Datum) 0,
					 headers ? header_nulls[i] : true, now, i);
	produce_null_key_turn(topic, recs, nkeys);
	if (malachi_produce_mode == PRODUCE_IMMEDIATE)
		(void) Produce(topic, 0, recs, nkeys, 0);
	else
		ProduceBuffer(topic, recs, nkeys);
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
