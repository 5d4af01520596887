/*-------------------------------------------------------------------------
 *
 * groups.c
 *	  Consumer groups: committed positions, consume and poll, range claims.
 *
 * A group's position on a range is a row of malachi.group_positions: where
 * the group stands in the range's cross-epoch stream (see cursor.c).  It is
 * read and written in the caller's transaction, so a consumer that commits
 * acknowledges what it consumed, and one that rolls back has it delivered
 * again; work the consumer does in the same transaction commits with it
 * (exactly once inside Postgres).
 *
 * Claims.  consume() claims the topic's active ranges one by one with
 * SELECT ... FOR UPDATE SKIP LOCKED on the group's position rows: a range
 * another consumer of the group holds is skipped, with no rebalance
 * protocol; the claim lasts until the transaction ends.  Rules:
 *
 * - A position row that does not exist yet is created only by a holder of
 *   the range's gate, malachi's own transaction-level lock (util.h, kind
 *   MALACHI_LOCK_GATE: no SQL can take it) on (hash of the group, range
 *   id), exclusive, taken without waiting by consume and with waiting by
 *   commit_offset and reset_group.  So two consumers never
 *   create the same row, and none waits for another's transaction.
 * - Only active ranges are claimed.  The check runs after the row is
 *   locked, against the latest committed state: a consumer that still
 *   holds a parent when a split commits keeps others off the children
 *   (next rule) until it ends, and one that locks a parent after the
 *   split sees it sealed and leaves it.  Either way the call returns (with
 *   what it read) as soon as it has read a claimed range to its final end
 *   or found a locked one sealed, rather than wait on its other ranges
 *   with the parent held.
 * - A range without a row starts where the group stands on its parents:
 *   each parent's position (or, without one, the parent's own derived
 *   start) restricted to the range's slice, then the range's own records.
 *   The parent's row is read FOR SHARE SKIP LOCKED: children of one parent
 *   derive side by side, but a parent another consumer holds (FOR UPDATE),
 *   or whose row another consumer is creating (its gate, which derivers
 *   take shared), makes the child be skipped for now rather than waited
 *   for.  No slice is ever read by two
 *   consumers of a group at once, and each key's records arrive in order.
 * - A group with no position anywhere in a range's history starts at the
 *   earliest record still stored.
 * - Every call that locks or writes position rows first locks the topic's
 *   row FOR KEY SHARE, so that it takes the topic before any group row,
 *   as drop_topic does (topic, ranges, then the position rows its cascade
 *   deletes).  The position rows' foreign-key checks lock the topic and
 *   range rows only after the group rows: without the topic taken first,
 *   a consumer holding a position row and a drop holding the topic would
 *   each wait for the other.  A call meeting an open drop_topic so waits
 *   for it, the one wait a consumer has, and fails with no_such_topic
 *   once the drop commits.
 * - A caught-up long poll ends early (returns no record) once another
 *   transaction waits for its own: drop_topic for the topic row, or
 *   commit_offset or reset_group for a claimed position row, or for a
 *   gate the transaction holds (it created a row, or derived through a
 *   parent, under it).  It looks every GROUP_WAITED_CHECK_MS
 *   (group_waited_for).
 *
 * Parents' rows stay after their children have their own; they are small
 * and read only to derive a child's start.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/hash.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "catalog.h"
#include "cursor.h"
#include "errors.h"
#include "inject.h"
#include "metacache.h"
#include "read.h"
#include "stream.h"
#include "util.h"

/* How often a consumer that could claim no range tries again while it waits */
#define GROUP_RECLAIM_MS	50

/* How long a long poll over several ranges sleeps on one before the next */
#define GROUP_WAIT_SLICE_MS	10

/* How often a long poll looks whether another transaction waits for it */
#define GROUP_WAITED_CHECK_MS	100

/*
 * How long a long poll leaves a range whose start it could not derive in a
 * subtransaction (after a merge: a parent held) before it tries again:
 * each attempt takes transaction ids (group_derive)
 */
#define GROUP_DERIVE_RETRY_MS	1000

/*
 * How many derives a transaction keeps in subtransactions (group_derive):
 * half of a backend's cache of subtransaction ids (64), so that a consume
 * after many merges leaves room for the caller's own savepoints
 */
#define GROUP_DERIVE_SUBXACTS_MAX	32

PG_FUNCTION_INFO_V1(malachi_consume);
PG_FUNCTION_INFO_V1(malachi_poll);
PG_FUNCTION_INFO_V1(malachi_commit_offset);
PG_FUNCTION_INFO_V1(malachi_committed_offsets);
PG_FUNCTION_INFO_V1(malachi_reset_group);

static Datum group_commit_offset(PG_FUNCTION_ARGS);
static Datum group_reset(PG_FUNCTION_ARGS);

static SpiQuery q_claim = {
	"SELECT pending FROM malachi.group_positions "
	"WHERE group_name = $1 AND range_id = $2 FOR UPDATE SKIP LOCKED",
	2, {TEXTOID, INT8OID}, NULL
};
static SpiQuery q_share = {
	"SELECT pending FROM malachi.group_positions "
	"WHERE group_name = $1 AND range_id = $2 FOR SHARE SKIP LOCKED",
	2, {TEXTOID, INT8OID}, NULL
};
static SpiQuery q_row_lock = {
	"SELECT pending FROM malachi.group_positions "
	"WHERE group_name = $1 AND range_id = $2 FOR UPDATE",
	2, {TEXTOID, INT8OID}, NULL
};
static SpiQuery q_exists = {
	"SELECT FROM malachi.group_positions WHERE group_name = $1 AND range_id = $2",
	2, {TEXTOID, INT8OID}, NULL
};
static SpiQuery q_insert = {
	"INSERT INTO malachi.group_positions (group_name, range_id, topic_id, \"offset\", pending) "
	"VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
	5, {TEXTOID, INT8OID, INT8OID, INT8OID, INT8ARRAYOID}, NULL
};
static SpiQuery q_upsert = {
	"INSERT INTO malachi.group_positions (group_name, range_id, topic_id, \"offset\", pending) "
	"VALUES ($1, $2, $3, $4, $5) ON CONFLICT (group_name, range_id) DO UPDATE "
	"SET \"offset\" = EXCLUDED.\"offset\", pending = EXCLUDED.pending, updated_at = now()",
	5, {TEXTOID, INT8OID, INT8OID, INT8OID, INT8ARRAYOID}, NULL
};
static SpiQuery q_update = {
	"UPDATE malachi.group_positions SET \"offset\" = $3, pending = $4, updated_at = now() "
	"WHERE group_name = $1 AND range_id = $2",
	4, {TEXTOID, INT8OID, INT8OID, INT8ARRAYOID}, NULL
};
static SpiQuery q_active = {
	"SELECT FROM malachi.range_meta WHERE range_id = $1 AND state = 'active'",
	1, {INT8OID}, NULL
};

/* A range a consume call claimed, and where the group stands on it. */
typedef struct Claim
{
	int64		range_id;
	StreamPos  *pos;
	bool		stored;			/* a row exists (or this call created it) */
} Claim;

/*
 * The gates one claim attempt took, given back when the attempt fails: a
 * gate kept for nothing would keep other consumers off a range (they
 * create no row under it) and make commit_offset and reset_group wait,
 * until this transaction ends.
 */
typedef struct GateTaken
{
	LOCKTAG		tag;
	LOCKMODE	mode;
} GateTaken;

typedef struct GatesTaken
{
	int			n;
	int			cap;
	GateTaken  *gates;
} GatesTaken;

/* One consume or poll call. */
typedef struct ConsumeCall
{
	const char *group;
	Datum		group_datum;
	int64		topic_id;
	bool		advance;		/* consume (true) or poll */
	int			remaining;		/* records still wanted */
	ReturnSetInfo *rsinfo;
	int			nranges;		/* the topic's active ranges */
	int			nclaims;
	Claim	   *claims;
	bool		held_sealed;	/* locked a range, then found it sealed: end
								 * the call, so that the lock goes soon */
	long		derive_retry_ms;	/* after the last claim's derive: wait this
									 * long before trying its range again (-1:
									 * not in this call; 0: next turn) */
	TimestampTz *retry_at;		/* per range: not tried again before */
} ConsumeCall;

/*
 * What this transaction's calls keep for the next ones, cleared when its
 * TopTransactionContext goes (group_xact).
 */
typedef struct GroupXact
{
	bool		live;			/* belongs to the transaction in progress */
	GatesTaken	gates;			/* every gate it took (some given back since:
								 * a failed claim, a rolled-back
								 * subtransaction), for group_waited_for: a
								 * long poll ends when another transaction
								 * waits for one it still holds, taken by
								 * this call or an earlier one; in
								 * TopTransactionContext */
	int			derives_kept;	/* subtransactions group_derive kept */
} GroupXact;

static GroupXact xact_state;

/* The transaction ends: so does its state. */
static void
group_xact_forget(void *arg)
{
	memset(&xact_state, 0, sizeof(xact_state));
}

/* The state of the transaction in progress. */
static GroupXact *
group_xact(void)
{
	if (!xact_state.live)
	{
		MemoryContextCallback *cb =
			MemoryContextAllocZero(TopTransactionContext,
								   sizeof(MemoryContextCallback));

		cb->func = group_xact_forget;
		MemoryContextRegisterResetCallback(TopTransactionContext, cb);
		xact_state.live = true;
	}
	return &xact_state;
}

/* Note a gate this transaction took (once). */
static void
group_gate_note(const LOCKTAG *tag, LOCKMODE mode)
{
	GatesTaken *xact_gates = &group_xact()->gates;
	int			i;

	for (i = 0; i < xact_gates->n; i++)
		if (memcmp(&xact_gates->gates[i].tag, tag, sizeof(LOCKTAG)) == 0 &&
			xact_gates->gates[i].mode == mode)
			return;
	if (xact_gates->n == xact_gates->cap)
		xact_gates->gates = GrowArray(xact_gates->gates, &xact_gates->cap,
									  sizeof(GateTaken), 8, TopTransactionContext);
	xact_gates->gates[xact_gates->n].tag = *tag;
	xact_gates->gates[xact_gates->n].mode = mode;
	xact_gates->n++;
}

/* The two keys of a (group, range) gate. */
static void
group_gate_keys(const char *group, int64 range_id, int32 *key1, int32 *key2)
{
	*key1 = (int32) hash_bytes((const unsigned char *) group, strlen(group));
	*key2 = (int32) (range_id ^ (range_id >> 32));
}

/*
 * Take a (group, range) gate for the transaction: exclusive to create the
 * range's row (waiting or not), shared (never waiting) to derive a child's
 * start through a range that has no row, so that children of one parent
 * derive side by side but never while someone creates the parent's row.
 */
static bool
group_gate(const char *group, int64 range_id, bool wait, bool shared,
		   GatesTaken *taken)
{
	int32		key1;
	int32		key2;
	LOCKTAG		tag;
	LOCKMODE	mode = shared ? ShareLock : ExclusiveLock;

	Assert(!(wait && shared));
	group_gate_keys(group, range_id, &key1, &key2);
	MalachiLockTag(&tag, (uint32) key1, (uint32) key2, MALACHI_LOCK_GATE);
	if (LockAcquire(&tag, mode, false, !wait) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	group_gate_note(&tag, mode);
	if (taken != NULL)
	{
		if (taken->n == taken->cap)
			taken->gates = GrowArray(taken->gates, &taken->cap,
									 sizeof(GateTaken), 8, CurrentMemoryContext);
		taken->gates[taken->n].tag = tag;
		taken->gates[taken->n].mode = mode;
		taken->n++;
	}
	return true;
}

/*
 * Give back the gates a failed claim attempt took.  Each LockAcquire
 * counted once, so a gate this transaction held before stays held.
 */
static void
group_gates_release(GatesTaken *taken)
{
	while (taken->n > 0)
	{
		taken->n--;
		LockRelease(&taken->gates[taken->n].tag, taken->gates[taken->n].mode,
					false);
	}
}

/* The stored position of the first row of the last query. */
static StreamPos *
group_row_pos(int64 range_id)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  1, &isnull);

	return StreamPosFromArray(DatumGetArrayTypePCopy(d), range_id);
}

/*
 * group_run
 *		Run a query of the claim and read path and free its result table at
 *		once: a long poll repeats claim attempts every few milliseconds, and
 *		SPI would keep every result table until the call's SPI_finish.  With
 *		pos, the first row's position is copied out first (NULL without a
 *		row).  Returns the number of rows.
 */
static uint64
group_run(SpiQuery *q, Datum *args, Snapshot snap, int64 range_id,
		  StreamPos **pos)
{
	uint64		n = SpiQueryRun(q, args, snap);

	if (pos)
		*pos = n > 0 ? group_row_pos(range_id) : NULL;
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return n;
}

/* Does the group have a committed position row for the range? */
static bool
group_row_exists(Datum group, int64 range_id)
{
	Datum		args[2] = {group, Int64GetDatum(range_id)};

	return group_run(&q_exists, args, GetLatestSnapshot(), range_id, NULL) > 0;
}

/* A range group_derive worked out in this claim: where it starts, if it can. */
typedef struct DeriveMemo
{
	int64		range_id;		/* hash key */
	StreamPos  *pos;			/* NULL: a parent is held by another consumer */
} DeriveMemo;

/*
 * group_derive_range
 *		Where a group without a row on range_id starts: each parent's
 *		position restricted to the range's slice, then its own records.
 *		NULL when a parent is held by another consumer of the group.  memo
 *		keeps each range's answer for the claim: after merges, an ancestor
 *		is reached along many paths (2^k after k splits and merges of one
 *		slice), and is worked out once.  The gates it takes go in taken;
 *		the parents' rows it locks are held until the transaction ends,
 *		unless the caller's subtransaction ends first (group_derive).
 */
static StreamPos *
group_derive_range(Datum group, const char *group_name, int64 range_id,
				   HTAB *memo, GatesTaken *taken)
{
	const StreamRange *r;
	StreamPos  *pos;
	StreamEntry own;
	DeriveMemo *m;
	bool		found;
	int			i;

	m = hash_search(memo, &range_id, HASH_FIND, NULL);
	if (m != NULL)
		return m->pos;
	check_stack_depth();
	r = StreamRangeGet(range_id);
	pos = StreamPosNew(range_id);
	own.source_id = range_id;
	own.key_lo = r->key_lo;
	own.key_hi = r->key_hi;
	own.offset = 0;
	for (i = 0; i < r->nparents && pos != NULL; i++)
	{
		Datum		args[2] = {group, Int64GetDatum(r->parents[i])};
		StreamPos  *ppos;

		if (group_run(&q_share, args, NULL, r->parents[i], &ppos) == 0)
		{
			/*
			 * No row, or one another consumer holds or is creating.  The
			 * gate first: once it is held, whoever created the row has
			 * ended, so a row the latest snapshot shows now is held (or
			 * was just committed), and one it does not show cannot appear
			 * before this transaction ends.  The other order let a row
			 * committed between the two checks go unseen, and the child
			 * started from the parent's own start: records delivered again.
			 */
			if (!group_gate(group_name, r->parents[i], false, true, taken) ||
				(InjectWait(INJECT_GROUP_DERIVE),
				 group_row_exists(group, r->parents[i])))
				ppos = NULL;	/* another consumer holds the parent */
			else
				ppos = group_derive_range(group, group_name, r->parents[i],
										  memo, taken);
		}
		if (ppos == NULL)
			pos = NULL;
		else
			StreamPosRestrict(pos, ppos);
	}
	if (pos != NULL)
		StreamPosAppend(pos, &own);
	m = hash_search(memo, &range_id, HASH_ENTER, &found);
	m->pos = pos;
	return pos;
}

/* One claim's group_derive_range, run by group_derive. */
typedef struct DeriveCall
{
	Datum		group;
	const char *group_name;
	int64		range_id;
	GatesTaken *taken;
	StreamPos  *pos;			/* the answer */
} DeriveCall;

static bool
group_derive_call(void *arg)
{
	DeriveCall *d = arg;
	HTAB	   *memo = Int64HashCreate("malachi derive memo", sizeof(DeriveMemo),
									   CurrentMemoryContext);

	d->pos = group_derive_range(d->group, d->group_name, d->range_id, memo,
								d->taken);
	hash_destroy(memo);
	return d->pos != NULL;
}

/*
 * Does a merge lie in a range's ancestry?  Only then can a derive lock a
 * parent's row and still fail, on another parent held: along splits alone
 * each path has one parent, and the first row it locks is the last it
 * needs.
 */
static bool
group_merge_ancestry(int64 range_id)
{
	const StreamRange *r = StreamRangeGet(range_id);

	while (r->nparents == 1)
		r = StreamRangeGet(r->parents[0]);
	return r->nparents > 1;
}

/*
 * group_derive
 *		group_derive_range for one claim; the gates it takes go in taken,
 *		for the caller to give back if the claim fails.  After a merge, in
 *		a subtransaction rolled back when the start cannot be derived: the
 *		parents' rows it locked FOR SHARE before it found one held go with
 *		it (only that gives a row lock back), as do its gates.  Kept, they
 *		would make commit_offset, reset_group and drop_topic wait on those
 *		rows until this transaction ends, for a claim that got nothing (a
 *		long poll repeats it for its whole wait).  Not otherwise: each
 *		subtransaction that locks a row takes a subtransaction id, and a
 *		call that claims many ranges would take more than a backend's
 *		cache of them holds.  Even so a transaction keeps at most
 *		GROUP_DERIVE_SUBXACTS_MAX of them: past 64, every snapshot in the
 *		cluster overflows (and looks subtransaction parents up in
 *		pg_subtrans) until it ends; the merged ranges left are derived by
 *		the next transaction.
 *
 *		*retry_ms, when it gets nothing: how long a long poll should leave
 *		the range alone.  GROUP_DERIVE_RETRY_MS after a subtransaction was
 *		rolled back, which took ids (tried every turn, it took 20 to 100 a
 *		second); -1 past the transaction's derives; else 0.
 */
static StreamPos *
group_derive(Datum group, const char *group_name, int64 range_id,
			 GatesTaken *taken, long *retry_ms)
{
	DeriveCall	d = {group, group_name, range_id, taken, NULL};
	int			before = taken->n;
	int		   *kept;

	*retry_ms = 0;
	if (!group_merge_ancestry(range_id))
		return group_derive_call(&d) ? d.pos : NULL;
	kept = &group_xact()->derives_kept;
	if (*kept >= GROUP_DERIVE_SUBXACTS_MAX)
	{
		*retry_ms = -1;			/* the next transaction derives it */
		return NULL;
	}
	if (SubxactKeepIf(group_derive_call, &d))
	{
		(*kept)++;
		return d.pos;
	}
	taken->n = before;			/* the rollback gave them back */
	*retry_ms = GROUP_DERIVE_RETRY_MS;
	return NULL;
}

/* The offset column of a position row: the range's own next offset. */
static int64
group_own_offset(const StreamPos *pos)
{
	int64		own = StreamPosOwnOffset(pos);

	return own >= 0 ? own : ReadRangeEnd(pos->range_id, NULL);
}

/*
 * group_claim
 *		Claim a range for this call: lock the group's row on it, or create
 *		it under the gate.  NULL when another consumer holds the range, a
 *		parent it derives from, or it is no longer active.
 */
static StreamPos *
group_claim(ConsumeCall *call, int64 range_id, bool *stored)
{
	Datum		args[5];
	StreamPos  *pos;
	GatesTaken	taken = {0, 0, NULL};

	args[0] = call->group_datum;
	args[1] = Int64GetDatum(range_id);
	if (group_run(&q_claim, args, NULL, range_id, &pos) > 0)
		*stored = true;
	else if (!group_gate(call->group, range_id, false, false, &taken) ||
			 group_row_exists(call->group_datum, range_id) ||
			 (pos = group_derive(call->group_datum, call->group, range_id,
								 &taken, &call->derive_retry_ms)) == NULL)
	{
		/* held, being created, or a parent is held (gate first: see above) */
		group_gates_release(&taken);
		return NULL;
	}
	else if (call->advance)
	{
		args[2] = Int64GetDatum(call->topic_id);
		args[3] = Int64GetDatum(group_own_offset(pos));
		args[4] = PointerGetDatum(StreamPosToArray(pos));
		if (group_run(&q_insert, args, NULL, range_id, NULL) == 0)
		{
			/* a row written without the gate (by hand) meanwhile */
			group_gates_release(&taken);
			return NULL;
		}
		*stored = true;
	}
	else
		*stored = false;

	args[0] = Int64GetDatum(range_id);
	if (group_run(&q_active, args, GetLatestSnapshot(), range_id, NULL) == 0)
	{
		/* sealed: its children carry it on, once this lock goes */
		call->held_sealed = true;
		return NULL;
	}
	return pos;
}

/* StreamRead callback of consume and poll: one row per record. */
static void
group_emit(void *arg, int64 range_id, int64 offset, const CodecRecord *rec)
{
	ConsumeCall *call = arg;

	ReadPutRecord(call->rsinfo, range_id, offset, rec);
}

/* Read a claimed range's next records; store the new position (consume). */
static void
group_read(ConsumeCall *call, Claim *claim)
{
	StreamPage	page;
	int			n_before = claim->pos->n;
	int64		first_before = n_before > 0 ? claim->pos->entries[0].offset : -1;
	Datum		args[4];

	if (call->remaining <= 0)
		return;
	StreamRead(claim->pos, call->remaining, 0, group_emit, call, &page);
	call->remaining -= page.count;
	/* a poll reports what it stepped over too, never silent (DESIGN.md) */
	if (page.nskips > 0)
		ereport(NOTICE,
				(errmsg("group \"%s\" stepped over records no longer stored",
						call->group),
				 errdetail("Skips: [%s].", page.skips.data)));
	if (!call->advance)
		return;
	if (claim->pos->n == n_before &&
		(n_before == 0 || claim->pos->entries[0].offset == first_before))
		return;					/* nothing moved */
	args[0] = call->group_datum;
	args[1] = Int64GetDatum(claim->range_id);
	args[2] = Int64GetDatum(group_own_offset(claim->pos));
	args[3] = PointerGetDatum(StreamPosToArray(claim->pos));
	(void) group_run(&q_update, args, NULL, claim->range_id, NULL);
}

/* Claim the ranges this call can get and read from them. */
static void
group_claim_and_read(ConsumeCall *call, const int64 *ranges, int nranges)
{
	static uint32 rotation = 0;
	int			start = nranges > 0 ? (int) (rotation++ % (uint32) nranges) : 0;
	int			k;

	for (k = 0; k < nranges && call->remaining > 0; k++)
	{
		int			at = (start + k) % nranges;
		int64		range_id = ranges[at];
		Claim	   *claim;
		StreamPos  *pos;
		bool		stored = false;
		MemoryContext outer;
		int			i;

		for (i = 0; i < call->nclaims; i++)
			if (call->claims[i].range_id == range_id)
				break;
		if (i < call->nclaims)
			continue;			/* claimed earlier in this call */
		if (call->retry_at[at] > GetCurrentTimestamp())
			continue;			/* its derive failed a moment ago */

		/*
		 * A long poll tries again and again to claim a range that is held:
		 * an attempt runs in an SPI connection of its own (see
		 * group_consume), and a claim's position is copied out.
		 */
		outer = CurrentMemoryContext;
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		call->derive_retry_ms = 0;
		pos = group_claim(call, range_id, &stored);
		if (pos == NULL && call->derive_retry_ms != 0)
			call->retry_at[at] = call->derive_retry_ms < 0 ? DT_NOEND :
				TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											call->derive_retry_ms);
		if (pos != NULL)
		{
			MemoryContextSwitchTo(outer);
			pos = StreamPosCopy(pos);
		}
		SPI_finish();
		if (pos == NULL)
			continue;
		claim = &call->claims[call->nclaims++];
		claim->range_id = range_id;
		claim->pos = pos;
		claim->stored = stored;
		group_read(call, claim);
	}
}

/* A split or merge of the topic committed after this transaction's snapshot. */
static void
group_serialization_failure(const char *topic)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to a concurrent split or merge of topic \"%s\"",
					topic),
			 errhint("Retry the transaction.")));
}

/*
 * A transaction-snapshot list of a topic's active ranges must be the latest
 * one: 40001 otherwise (reset_group and consume under REPEATABLE READ).
 */
static void
group_check_ranges_current(const char *topic, const RangeRow *ranges,
						   int nranges)
{
	RangeRow   *now;
	int64		topic_id;
	int			n = CatalogActiveRanges(topic, true, &topic_id, &now);
	int			i;

	for (i = 0; i < n && n == nranges; i++)
		if (now[i].range_id != ranges[i].range_id)
			break;
	if (n != nranges || i < n)
		group_serialization_failure(topic);
}

/* Argument checks of consume and poll; the topic's active ranges. */
static int
group_call_setup(FunctionCallInfo fcinfo, ConsumeCall *call, int64 **ranges)
{
	const char *topic = CheckNameArg(fcinfo, 0, "topic");
	const RangeRow *rows;
	int			n;
	int			i;

	call->group = CheckNameArg(fcinfo, 1, "group");
	call->group_datum = CStringGetTextDatum(call->group);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_records must not be null")));
	call->remaining = PG_GETARG_INT32(2);
	if (call->remaining < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_records must not be negative")));
	/* the topic before any group row (the rules above) */
	call->topic_id = CatalogTopicId(topic, CATALOG_LOCK_KEY_SHARE);
	if (call->advance && IsolationUsesXactSnapshot())
	{
		/*
		 * Under REPEATABLE READ or SERIALIZABLE, the snapshot's ranges,
		 * which must be the latest ones (40001 otherwise): a position row
		 * on a range the snapshot does not see fails its foreign-key
		 * check, which uses that snapshot (23503).  A split committed
		 * after this look leaves ranges the snapshot sees, which the claim
		 * then finds sealed (consume_rr_listed.spec).
		 */
		RangeRow   *snap;
		int64		topic_id;

		n = CatalogActiveRanges(topic, false, &topic_id, &snap);
		group_check_ranges_current(topic, snap, n);
		InjectWait(INJECT_CONSUME_LISTED);
		rows = snap;
	}
	else
		n = MetaCacheActiveRanges(topic, &rows);
	*ranges = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
		(*ranges)[i] = rows[i].range_id;
	call->claims = palloc(sizeof(Claim) * Max(n, 1));
	call->retry_at = palloc0(sizeof(TimestampTz) * Max(n, 1));
	call->nclaims = 0;
	call->nranges = n;
	return n;
}

/*
 * Does another transaction wait for this one's end: for a row lock it
 * holds, or for a gate it holds (commit_offset and reset_group take the
 * gate of a range whose row this transaction created, or of a parent it
 * derived through, before they look at the row)?  Row locks wait for the
 * locking transaction's id, the top one's or, in a subtransaction, the
 * subtransaction's.
 */
static bool
group_waited_for(void)
{
	TransactionId xids[2] = {GetTopTransactionIdIfAny(),
	GetCurrentTransactionIdIfAny()};
	int			i;

	for (i = 0; i < 2; i++)
	{
		LOCKTAG		tag;

		if (!TransactionIdIsValid(xids[i]) ||
			(i == 1 && TransactionIdEquals(xids[1], xids[0])))
			continue;
		SET_LOCKTAG_TRANSACTION(tag, xids[i]);
		if (LockHasWaiters(&tag, ExclusiveLock, false))
			return true;
	}
	for (i = 0; i < xact_state.gates.n; i++)
		if (LockHeldByMe(&xact_state.gates.gates[i].tag,
						 xact_state.gates.gates[i].mode) &&
			LockHasWaiters(&xact_state.gates.gates[i].tag,
						   xact_state.gates.gates[i].mode, false))
			return true;
	return false;
}

/*
 * group_wait
 *		Sleep until a claimed range may have records, the deadline, or a
 *		slice.  False when the call should end now: a claimed range was
 *		read to its final end (a split or merge sealed it during the call),
 *		or a range locked to claim it was found sealed.  Their successors
 *		are the next call's, and until this transaction ends, no other
 *		consumer of the group can claim them.  Also when another
 *		transaction waits for this one (the rules above).
 */
static bool
group_wait(ConsumeCall *call, TimestampTz deadline, int turn)
{
	long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													   deadline);
	int			nlive = 0;
	int			pick;
	int			i;

	for (i = 0; i < call->nclaims; i++)
		if (call->claims[i].pos->n > 0)
			nlive++;
	if (nlive < call->nclaims || call->held_sealed || group_waited_for())
		return false;
	left = Min(left, GROUP_WAITED_CHECK_MS);
	if (nlive == 0)
	{
		/* nothing claimed that can grow: the holders may let go; look again soon */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(left, GROUP_RECLAIM_MS), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		return true;
	}
	if (nlive > 1)
		left = Min(left, GROUP_WAIT_SLICE_MS);
	else if (call->nclaims < call->nranges)
	{
		/*
		 * Ranges another consumer held may be free again: the caller tries
		 * them between waits, so one claimed range must not keep it
		 * asleep for the whole wait.
		 */
		left = Min(left, GROUP_RECLAIM_MS);
	}
	pick = turn % nlive;		/* the pick-th claim still live */
	for (i = 0; call->claims[i].pos->n == 0 || pick-- > 0; i++)
		;
	(void) StreamWait(call->claims[i].pos, left);
	CHECK_FOR_INTERRUPTS();
	return true;
}

/*---- privileged calls ----*/

/* A call group_privileged makes, and its result. */
typedef struct PrivilegedCall
{
	PGFunction	fn;
	FunctionCallInfo fcinfo;
	Datum		result;
} PrivilegedCall;

static void
group_privileged_run(void *arg)
{
	PrivilegedCall *call = arg;

	call->result = call->fn(call->fcinfo);
}

/*
 * Run a function that writes or locks malachi.group_positions as the
 * bootstrap superuser (RunAsSuperuser): no role but malachi_admin may
 * write that table (a consumer that could would also be able to LOCK it
 * and stall every group's consumers), and the functions are all a
 * consumer needs.
 */
static Datum
group_privileged(PGFunction fn, FunctionCallInfo fcinfo)
{
	PrivilegedCall call = {fn, fcinfo, (Datum) 0};

	RunAsSuperuser(group_privileged_run, &call);
	return call.result;
}

/* consume() and poll() */
static Datum
group_consume(FunctionCallInfo fcinfo, bool advance)
{
	ConsumeCall call;
	int64	   *ranges;
	int			nranges;
	long		wait_ms = 0;
	TimestampTz deadline;
	int			turn;

	memset(&call, 0, sizeof(call));
	call.advance = advance;
	if (advance)
	{
		Interval   *wait;

		if (PG_ARGISNULL(3))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("wait must not be null")));
		wait = PG_GETARG_INTERVAL_P(3);
		if (wait->month != 0 || wait->day != 0 || wait->time < 0 ||
			wait->time > (int64) 3600 * USECS_PER_SEC)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("wait must be between 0 and 1 hour")));
		wait_ms = (long) (wait->time / 1000);
	}
	nranges = group_call_setup(fcinfo, &call, &ranges);
	InitMaterializedSRF(fcinfo, 0);
	call.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms);

	/*
	 * SPI returns to its procedure context after every query, so switching
	 * to a context of our own would not catch what follows one.  A long
	 * poll's turns and claim attempts, repeated every few milliseconds,
	 * each run in an SPI connection of their own instead: what they
	 * allocate goes at its SPI_finish.
	 */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	group_claim_and_read(&call, ranges, nranges);
	for (turn = 0; call.remaining > 0 &&
		 call.rsinfo->setResult != NULL &&
		 tuplestore_tuple_count(call.rsinfo->setResult) == 0 &&
		 GetCurrentTimestamp() < deadline; turn++)
	{
		bool		go_on;
		int			i;

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		go_on = group_wait(&call, deadline, turn);
		for (i = 0; go_on && i < call.nclaims; i++)
			group_read(&call, &call.claims[i]);
		SPI_finish();
		if (!go_on)
			break;
		if (call.nclaims < nranges)
			group_claim_and_read(&call, ranges, nranges);
	}
	SPI_finish();
	return (Datum) 0;
}

static Datum
group_consume_advancing(PG_FUNCTION_ARGS)
{
	return group_consume(fcinfo, true);
}

static Datum
group_consume_reading(PG_FUNCTION_ARGS)
{
	return group_consume(fcinfo, false);
}

/* SQL: consume(topic, group, max_records, wait) */
Datum
malachi_consume(PG_FUNCTION_ARGS)
{
	return group_privileged(group_consume_advancing, fcinfo);
}

/* SQL: poll(topic, group, max_records): consume without advancing */
Datum
malachi_poll(PG_FUNCTION_ARGS)
{
	return group_privileged(group_consume_reading, fcinfo);
}

/* Store a group's position on a range (commit_offset, reset_group). */
static void
group_store(Datum group, const char *group_name, int64 topic_id,
			const StreamPos *pos)
{
	Datum		args[5];

	(void) group_gate(group_name, pos->range_id, true, false, NULL);
	args[0] = group;
	args[1] = Int64GetDatum(pos->range_id);
	args[2] = Int64GetDatum(topic_id);
	args[3] = Int64GetDatum(group_own_offset(pos));
	args[4] = PointerGetDatum(StreamPosToArray(pos));
	(void) SpiQueryRun(&q_upsert, args, NULL);
}

/* Store a group's position on a range, its stream past all ancestors. */
static void
group_store_own(Datum group, const char *group_name, int64 topic_id,
				int64 range_id, int64 offset)
{
	const StreamRange *r = StreamRangeGet(range_id);
	StreamPos  *pos = StreamPosNew(range_id);
	StreamEntry own;

	own.source_id = range_id;
	own.key_lo = r->key_lo;
	own.key_hi = r->key_hi;
	own.offset = offset;
	StreamPosAppend(pos, &own);
	group_store(group, group_name, topic_id, pos);
}

/*
 * group_in_ancestors
 *		Is the group still reading range_id's ancestors: its row on the
 *		range, locked (waiting, as group_store would), still has an
 *		ancestor entry or no own record read (StreamPosOwnOffset 0), or it
 *		has no row (its start derives from the parents' positions)?  For a
 *		range with parents.
 */
static bool
group_in_ancestors(Datum group, const char *group_name, int64 range_id)
{
	Datum		args[2] = {group, Int64GetDatum(range_id)};
	StreamPos  *pos;

	(void) group_gate(group_name, range_id, true, false, NULL);
	if (group_run(&q_row_lock, args, NULL, range_id, &pos) == 0)
		return true;
	return StreamPosOwnOffset(pos) == 0;
}

static SpiQuery q_offsets = {
	"SELECT CASE WHEN key ~ '^[0-9]{1,18}$' THEN key::bigint END, "
	"CASE WHEN jsonb_typeof(value) = 'number' AND value::numeric % 1 = 0 "
	"AND value::numeric BETWEEN 0 AND 9223372036854775807 "
	"THEN value::numeric::bigint END, key, value::text "
	"FROM jsonb_each($1) ORDER BY 1",
	1, {JSONBOID}, NULL
};

static SpiQuery q_range_in_snapshot = {
	"SELECT FROM malachi.range_meta WHERE range_id = $1", 1, {INT8OID}, NULL
};

/* SQL: commit_offset(group, topic, offsets): {"range_id": next_offset, ...} */
Datum
malachi_commit_offset(PG_FUNCTION_ARGS)
{
	return group_privileged(group_commit_offset, fcinfo);
}

/* commit_offset(), as group_privileged runs it */
static Datum
group_commit_offset(PG_FUNCTION_ARGS)
{
	const char *group = CheckNameArg(fcinfo, 0, "group");
	const char *topic = CheckNameArg(fcinfo, 1, "topic");
	Datum		group_datum = CStringGetTextDatum(group);
	Jsonb	   *offsets;
	int64		topic_id;
	uint64		n;
	uint64		i;
	int64	   *range_ids;
	int64	   *values;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("offsets must not be null")));
	offsets = PG_GETARG_JSONB_P(2);
	if (!JB_ROOT_IS_OBJECT(offsets) || JB_ROOT_IS_SCALAR(offsets))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("offsets must be a jsonb object"),
				 errhint("Pass {\"<range_id>\": <next offset>, ...}.")));
	/* the topic before any group row (the rules above) */
	topic_id = CatalogTopicId(topic, CATALOG_LOCK_KEY_SHARE);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	{
		Datum		args[1] = {JsonbPGetDatum(offsets)};

		n = SpiQueryRun(&q_offsets, args, NULL);
	}
	range_ids = palloc(sizeof(int64) * Max(n, 1));
	values = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		null_range;
		bool		null_offset;

		range_ids[i] = SpiInt64(i, 1, &null_range);
		values[i] = SpiInt64(i, 2, &null_offset);
		if (null_range)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid range id \"%s\" in offsets",
							SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3)),
					 errhint("Keys are range ids, as malachi.active_range_ids() lists them.")));
		if (null_offset)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid offset %s for range " INT64_FORMAT,
							SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4),
							range_ids[i]),
					 errhint("An offset is a whole number, 0 or more: the next offset to consume.")));
	}
	for (i = 0; i < n; i++)
	{
		const StreamRange *r = StreamRangeGet(range_ids[i]);
		int64		end;

		if (r->topic_id != topic_id)
			ereport(ERROR,
					(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
					 errmsg("range " INT64_FORMAT " is not a range of topic \"%s\"",
							range_ids[i], topic)));
		/* a range made after the snapshot: its row's foreign key fails */
		if (IsolationUsesXactSnapshot())
		{
			Datum		rarg[1] = {Int64GetDatum(range_ids[i])};

			if (SpiQueryRun(&q_range_in_snapshot, rarg, NULL) == 0)
				group_serialization_failure(topic);
		}
		end = ReadRangeEnd(range_ids[i], NULL);
		if (values[i] > end)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("offset " INT64_FORMAT " is past the end of range " INT64_FORMAT,
							values[i], range_ids[i]),
					 errdetail("The range's readable records end at offset " INT64_FORMAT ".", end)));

		/*
		 * 0 where the group is still reading the range's ancestors is what
		 * committed_offsets reports there: it leaves the position in them
		 * as it is, so that committed_offsets fed back (to restore a
		 * group's offsets, or to copy them to another group) skips none of
		 * the ancestors' records.  A range without a row derives its start
		 * from its parents' rows, which come first here (a parent's id is
		 * lower).
		 */
		if (values[i] == 0 && r->nparents > 0 &&
			group_in_ancestors(group_datum, group, range_ids[i]))
			continue;
		group_store_own(group_datum, group, topic_id, range_ids[i], values[i]);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

static SpiQuery q_committed = {
	"SELECT range_id, \"offset\" FROM malachi.group_positions "
	"WHERE group_name = $1 AND topic_id = $2 ORDER BY range_id",
	2, {TEXTOID, INT8OID}, NULL
};

/* SQL: committed_offsets(group, topic): (range_id, offset) per stored position */
Datum
malachi_committed_offsets(PG_FUNCTION_ARGS)
{
	const char *group = CheckNameArg(fcinfo, 0, "group");
	const char *topic = CheckNameArg(fcinfo, 1, "topic");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		args[2];
	uint64		n;
	uint64		i;

	args[0] = CStringGetTextDatum(group);
	args[1] = Int64GetDatum(CatalogTopicId(topic, CATALOG_LOCK_NONE));
	InitMaterializedSRF(fcinfo, 0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	n = SpiQueryRun(&q_committed, args, NULL);
	for (i = 0; i < n; i++)
	{
		Datum		values[2] = {Int64GetDatum(SpiInt64(i, 1, NULL)),
		Int64GetDatum(SpiInt64(i, 2, NULL))};
		bool		nulls[2] = {false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

static SpiQuery q_forget = {
	"DELETE FROM malachi.group_positions WHERE group_name = $1 AND topic_id = $2",
	2, {TEXTOID, INT8OID}, NULL
};

/*
 * SQL: reset_group(group, topic, to): replace the group's positions on the
 * topic by one per active range: 'earliest' at the start of its stream
 * (the earliest stored record), 'latest' at its end, a timestamp at the
 * first record produced at or after it in its stream.
 */
Datum
malachi_reset_group(PG_FUNCTION_ARGS)
{
	return group_privileged(group_reset, fcinfo);
}

/* qsort: range ids, ascending */
static int
group_cmp_range_id(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * Take the gates of ranges[from .. nranges) in ascending range id order,
 * as commit_offset takes its own: two calls gating several ranges each
 * then never wait on each other in a cycle.
 */
static void
group_gate_ascending(const char *group, const RangeRow *ranges, int from,
					 int nranges)
{
	int64	   *ids = palloc(sizeof(int64) * Max(nranges - from, 1));
	int			i;

	for (i = from; i < nranges; i++)
		ids[i - from] = ranges[i].range_id;
	qsort(ids, nranges - from, sizeof(int64), group_cmp_range_id);
	for (i = 0; i < nranges - from; i++)
		(void) group_gate(group, ids[i], true, false, NULL);
	pfree(ids);
}

/*
 * group_reset_ranges
 *		The active ranges reset_group stores under READ COMMITTED, each
 *		with its gate taken (in ascending id order: a relisting finds only
 *		children of splits since, whose ids are higher).  Listed with the latest snapshot, gated, and
 *		listed again until no range is new: a split that committed after a
 *		listing and before the gates were taken has children that a
 *		consumer may have created rows on meanwhile (deriving through the
 *		parent's gate, free then).  Those rows are overwritten with the
 *		rest.  Once a range's gate is held, no consumer can derive through
 *		it any more, so children of a later split wait for the reset.
 */
static int
group_reset_ranges(const char *group, const char *topic, int64 *topic_id,
				   RangeRow **ranges)
{
	int64	   *gated = NULL;
	int			ngated = 0;
	int			cap = 0;
	int			nranges;

	for (;;)
	{
		bool		added = false;
		int			i;
		int			k;

		RangeRow   *fresh;
		int			nfresh = 0;

		nranges = CatalogActiveRanges(topic, true, topic_id, ranges);
		if (ngated == 0)
			InjectWait(INJECT_RESET_LISTED);
		fresh = palloc(sizeof(RangeRow) * Max(nranges, 1));
		for (i = 0; i < nranges; i++)
		{
			for (k = 0; k < ngated; k++)
				if (gated[k] == (*ranges)[i].range_id)
					break;
			if (k < ngated)
				continue;
			fresh[nfresh++] = (*ranges)[i];
			if (ngated == cap)
				gated = GrowArray(gated, &cap, sizeof(int64), 8,
								  CurrentMemoryContext);
			gated[ngated++] = (*ranges)[i].range_id;
			added = true;
		}
		group_gate_ascending(group, fresh, 0, nfresh);
		pfree(fresh);
		if (!added)
			return nranges;
	}
}

/* reset_group(), as group_privileged runs it */
static Datum
group_reset(PG_FUNCTION_ARGS)
{
	const char *group = CheckNameArg(fcinfo, 0, "group");
	const char *topic = CheckNameArg(fcinfo, 1, "topic");
	Datum		group_datum = CStringGetTextDatum(group);
	char	   *to;
	bool		latest = false;
	TimestampTz ts = 0;
	int64		topic_id;
	RangeRow   *ranges;
	int			nranges;
	int			i;
	Datum		args[2];

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("to must not be null"),
				 errhint("Pass 'earliest', 'latest' or a timestamp.")));
	to = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strcmp(to, "latest") == 0)
		latest = true;
	else if (strcmp(to, "earliest") != 0)
		ts = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
													 CStringGetDatum(to),
													 ObjectIdGetDatum(InvalidOid),
													 Int32GetDatum(-1)));
	/* the topic before any group row (the rules above) */
	(void) CatalogTopicId(topic, CATALOG_LOCK_KEY_SHARE);
	nranges = CatalogActiveRanges(topic, false, &topic_id, &ranges);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/*
	 * The ranges active now, not those of a snapshot taken before: a split
	 * committed since, whose children a consumer may already have rows on,
	 * would otherwise leave those rows as they were.  Under REPEATABLE READ
	 * the transaction cannot write rows for ranges its snapshot does not
	 * see (nor see the rows to replace): a split since is a serialization
	 * failure.
	 */
	if (IsolationUsesXactSnapshot())
	{
		group_check_ranges_current(topic, ranges, nranges);
		group_gate_ascending(group, ranges, 0, nranges);
	}
	else
		nranges = group_reset_ranges(group, topic, &topic_id, &ranges);

	/*
	 * The group's rows go only now, with every gate held: commit_offset
	 * and a consumer creating a row take the gate first, then the row, and
	 * deleting first would wait for them in the opposite order (40P01).
	 */
	args[0] = group_datum;
	args[1] = Int64GetDatum(topic_id);
	(void) SpiQueryRun(&q_forget, args, NULL);
	for (i = 0; i < nranges; i++)
	{
		int64		range_id = ranges[i].range_id;
		StreamPos  *start = StreamStart(range_id);
		StreamPos  *pos;
		int			k;

		if (latest)
		{
			group_store_own(group_datum, group, topic_id, range_id,
							ReadRangeEnd(range_id, NULL));
			continue;
		}
		if (strcmp(to, "earliest") == 0)
		{
			group_store(group_datum, group, topic_id, start);
			continue;
		}
		pos = StreamPosNew(range_id);
		for (k = 0; k < start->n; k++)
		{
			StreamEntry e = start->entries[k];

			e.offset = ReadOffsetForTime(e.source_id, ts);
			if (e.source_id != range_id &&
				e.offset >= ReadRangeEnd(e.source_id, NULL))
				continue;		/* an ancestor with nothing that late */
			StreamPosAppend(pos, &e);
		}
		group_store(group_datum, group, topic_id, pos);
	}
	SPI_finish();
	PG_RETURN_VOID();
}
