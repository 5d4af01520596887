/*-------------------------------------------------------------------------
 *
 * sweep.c
 *	  The sweeper: age rolls, retention, fence completion, orphans, scrub.
 *
 * One pass, run every malachi.sweep_interval by the sweeper background
 * worker or on demand by malachi.run_maintenance():
 *
 * - fence completion: a head found fenced in its file (seal trailer) but
 *   still active in the control plane gets its seal recorded with the
 *   file's answer (DESIGN.md rule 4).  Only heads loaded in an append slot
 *   are looked at, and those old enough to roll: a pass never takes a slot
 *   for every head, except the first passes after a start, which load the
 *   heads nobody has loaded while half the slots stay free (so that a
 *   crash's batches in doubt are decided early: sweep_heads);
 * - age roll: a non-empty head older than its topic's segment_max_age is
 *   fenced and sealed, quiet ranges included;
 * - retention: sealed segments sealed longer ago than the topic's retention,
 *   or beyond its retention_bytes per range (oldest first), are deleted:
 *   the control-plane row in the pass's transaction, the file after it
 *   commits; a head is never deleted, nor an active range's newest
 *   segment (its end is where the range's next head starts; a sealed
 *   range's end is kept in range_meta.end_offset);
 * - orphans: segment files that no segment row names, older than
 *   malachi.orphan_grace, are removed (and logged);
 * - head indexes: every loaded head whose settled prefix grew by
 *   SWEEP_INDEX_ADVANCE since its index was last saved gets its index
 *   saved up to there (AppendSafePoints, ReadSaveHeadIndex), so that its
 *   recovery after a start scans only the batches after the last point;
 * - scrub: sealed segments are re-read and every batch's CRC checked, the
 *   least recently scrubbed first, up to malachi.scrub_rate bytes per
 *   second of sweep interval; a damaged one is logged and marked in
 *   segment_meta.corrupt (the segments view shows it), and reads of it
 *   keep failing with data_corrupted.
 *
 * Rules:
 * - Every step is idempotent and safe to kill at any point: a row deleted
 *   whose file survives is an orphan, removed by a later pass; a fence
 *   recorded twice converges (already sealed).
 * - One pass at a time per node: a pass holds malachi's own session lock
 *   MALACHI_LOCK_SWEEP (util.h), which no SQL can take; run_maintenance()
 *   waits for the worker's.
 * - SweepShared.mutex (spinlock) protects the status of the last pass, and
 *   whether the first passes' loads of every head are done.
 * - Settings follow topic > policy > server defaults (SettingsRetention).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "append.h"
#include "errors.h"
#include "inject.h"
#include "metacache.h"
#include "read.h"
#include "roll.h"
#include "segfile.h"
#include "segindex.h"
#include "settings.h"
#include "sweep.h"
#include "util.h"
#include "writer.h"

/* Status of the last pass; see the rules above. */
typedef struct SweepShared
{
	slock_t		mutex;			/* protects every field below */
	int64		passes;			/* passes finished since the start */
	TimestampTz last_start;		/* when the last finished pass started */
	TimestampTz last_end;		/* and when it ended */
	SweepCounts last;			/* what it did */
	char		last_error[256];	/* its last failed step, or "" */
	bool		heads_loaded;	/* the first passes' loads are done
								 * (sweep_heads) */
} SweepShared;

static SweepShared *sweep_shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * Segments whose files go when the current transaction commits: their
 * rows were deleted by it, in the subtransaction noted (a delete rolled
 * back to a savepoint takes its entry with it).  Backend-local.
 */
typedef struct DropEntry
{
	int64		segment_id;
	SubTransactionId subid;
} DropEntry;

static List *drop_at_commit = NIL;
static bool drop_callback_registered = false;

PG_FUNCTION_INFO_V1(malachi_run_maintenance);
PG_FUNCTION_INFO_V1(malachi_sweeper_state);
PG_FUNCTION_INFO_V1(malachi_delete_segment);

/*---- setup ----*/

/* Reserve the status block. */
static void
sweep_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(SweepShared)));
}

/* Find or create the status block. */
static void
sweep_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sweep_shared = ShmemInitStruct("malachi sweeper", sizeof(SweepShared), &found);
	if (!found)
	{
		memset(sweep_shared, 0, sizeof(SweepShared));
		SpinLockInit(&sweep_shared->mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * SweepInit
 *		Ask for the status block and register the sweeper worker.  Called
 *		from _PG_init while shared_preload_libraries are loaded.
 */
void
SweepInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sweep_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sweep_shmem_startup;
	WorkerRegister("malachi sweeper", "malachi_sweeper_main", 5);
}

/*---- files after commit ----*/

/* Remove the dropped segments' files once their rows are gone for good. */
static void
sweep_drop_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT && drop_at_commit != NIL)
	{
		foreach(lc, drop_at_commit)
		{
			int64		segment_id = ((DropEntry *) lfirst(lc))->segment_id;

			/* the name first: a slot is never loaded again once released */
			SegmentUnlink(segment_id);
			AppendRelease(segment_id);
			ReadForgetSegment(segment_id);
		}
		WriterSegmentsChanged();
	}
	/* segment lists read meanwhile may lack the segments that stay */
	if (event == XACT_EVENT_ABORT && drop_at_commit != NIL)
		MetaCacheForget();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		drop_at_commit = NIL;
}

/*
 * A subtransaction's deletes belong to its parent once it commits, and are
 * undone (their files stay) when it rolls back.
 */
static void
sweep_drop_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;
	bool		undone = false;

	foreach(lc, drop_at_commit)
	{
		DropEntry  *e = lfirst(lc);

		if (e->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			e->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
		{
			drop_at_commit = foreach_delete_current(drop_at_commit, lc);
			undone = true;
		}
	}
	if (undone)
		MetaCacheForget();		/* as at an abort: see sweep_drop_callback */
}

/*
 * SweepDropAtCommit
 *		Remove a segment's file (and index) when the current transaction,
 *		which deletes its row, commits; nothing if it aborts, or if the
 *		subtransaction that deleted the row rolls back.  The commit is
 *		made synchronous, as PostgreSQL does for a transaction that drops
 *		relation files: an asynchronous one that a crash took back would
 *		bring the row back without its file.
 */
void
SweepDropAtCommit(int64 segment_id)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	DropEntry  *e = palloc(sizeof(DropEntry));

	ForceSyncCommit();

	if (!drop_callback_registered)
	{
		RegisterXactCallback(sweep_drop_callback, NULL);
		RegisterSubXactCallback(sweep_drop_subxact_callback, NULL);
		drop_callback_registered = true;
	}
	e->segment_id = segment_id;
	e->subid = GetCurrentSubTransactionId();
	drop_at_commit = lappend(drop_at_commit, e);
	MemoryContextSwitchTo(old);
	/* this backend's segment lists read the deletion from now on */
	MetaCacheForget();
}

/* Will the current transaction remove this segment's file at commit? */
static bool
sweep_dropping(int64 segment_id)
{
	ListCell   *lc;

	foreach(lc, drop_at_commit)
		if (((DropEntry *) lfirst(lc))->segment_id == segment_id)
			return true;
	return false;
}

/*---- steps ----*/

/* Record a failure of a step that carries on with its other items. */
static void
sweep_note_error(SweepCounts *counts, int failed, const char *what,
				 const char *msg)
{
	counts->errors += failed;
	SpinLockAcquire(&sweep_shared->mutex);
	snprintf(sweep_shared->last_error, sizeof(sweep_shared->last_error),
			 "%s: %s", what, msg);
	SpinLockRelease(&sweep_shared->mutex);
}

/*
 * The roll and retention settings of a result row's topic, from its
 * settings (column col) and its policy's definition (col + 1).
 */
static void
sweep_retention(uint64 row, int col, RetentionSettings *out)
{
	HeapTuple	tuple = SPI_tuptable->vals[row];
	bool		isnull;
	Datum		t = SPI_getbinval(tuple, SPI_tuptable->tupdesc, col, &isnull);
	Jsonb	   *topic = isnull ? NULL : DatumGetJsonbP(t);
	Datum		p = SPI_getbinval(tuple, SPI_tuptable->tupdesc, col + 1, &isnull);
	Jsonb	   *policy = isnull ? NULL : DatumGetJsonbP(p);

	SettingsRetention(topic, policy, out);
}

/* How long a seal backs off a segment row another transaction holds */
#define SWEEP_BUSY_TIMEOUT_MS	1000

/* How far a head's settled prefix grows before its index is saved again */
#define SWEEP_INDEX_ADVANCE		(64 * 1024)

/* One head the age-roll step looks at. */
typedef struct SweepHead
{
	int64		segment_id;
	int64		base_offset;
	int64		age_us;
	int64		max_age_us;
	bool		loaded;			/* in an append slot already */
} SweepHead;

static SpiQuery q_heads = {
	"SELECT s.segment_id, s.base_offset, "
	"(extract(epoch FROM now() - s.created_at) * 1000000)::bigint, "
	"t.settings, p.definition, h.segment_id IS NOT NULL "
	"FROM malachi.segment_meta s JOIN malachi.range_meta r USING (range_id) "
	"JOIN malachi.topic_meta t USING (topic_id) "
	"LEFT JOIN malachi.topic_policy b USING (topic_id) "
	"LEFT JOIN malachi.policy_meta p USING (policy) "
	"LEFT JOIN malachi.head_state() h USING (segment_id) "
	"WHERE s.state = 'active' ORDER BY s.segment_id",
	0, {0}, NULL
};

static SpiQuery q_segment_in_state = {
	"SELECT FROM malachi.segment_meta WHERE segment_id = $1 AND state = $2",
	2, {INT8OID, TEXTOID}, NULL
};

/*
 * Is the segment's row still there, in that state, as a fresh snapshot
 * sees it?  For a step that listed it earlier and then failed on it: a
 * segment dropped, deleted or sealed since is no failure.
 */
static bool
sweep_segment_in_state(int64 segment_id, const char *state)
{
	Datum		args[2] = {Int64GetDatum(segment_id), CStringGetTextDatum(state)};

	return SpiQueryRun(&q_segment_in_state, args, NULL) > 0;
}

/* A head sweep_head_one looks at, and what became of it. */
typedef struct SweepHeadOne
{
	SweepHead  *head;
	bool		load;			/* load it, however young (the first passes) */
	bool		loaded;			/* it is loaded now */
	bool		no_slot;		/* not loaded: too few free slots */
	bool		fence_completed;
	bool		rolled;
} SweepHeadOne;

/*
 * Load a head (when it is loaded already, or old enough to roll), record
 * the fence its file holds or seal it when it is old enough; for
 * SubxactTry.
 */
static void
sweep_head_one(void *arg)
{
	SweepHeadOne *one = arg;
	SweepHead  *h = one->head;
	AppendView	view;
	int			slotno;
	bool		only_to_decide = !h->loaded && h->age_us < h->max_age_us;

	/*
	 * A head not loaded since the start has its fence completed when it is
	 * loaded; load it here only when it is old enough to roll, so that a
	 * pass does not take an append slot for every head.  Except in the
	 * first passes after a start (sweep_heads), while half the slots are
	 * left free.
	 */
	if (only_to_decide && !one->load)
		return;
	if (only_to_decide && AppendFreeSlots() <= malachi_max_active_segments / 2)
	{
		one->no_slot = true;
		return;
	}
	do
		slotno = AppendAttach(h->segment_id, h->base_offset);
	while (!AppendGetView(slotno, h->segment_id, &view));
	one->loaded = true;

	if (view.fence_durable)
		one->fence_completed = true;
	else if (h->age_us >= h->max_age_us && view.visible_offset > h->base_offset)
		one->rolled = true;
	else
		return;
	/* a head whose topic was dropped meanwhile was neither */
	if (HeadSeal(h->segment_id, h->base_offset, NULL,
				 SWEEP_BUSY_TIMEOUT_MS, SWEEP_BUSY_TIMEOUT_MS) < 0)
		one->fence_completed = one->rolled = false;
}

/*
 * sweep_heads
 *		Record fences found in heads' files; seal non-empty heads older than
 *		their topic's segment_max_age.  Each head in a subtransaction of its
 *		own: one that cannot be loaded or sealed is a WARNING, and the
 *		others are still swept.  A head whose row another transaction holds
 *		(a drop_topic still open), or whose batches in doubt do not settle,
 *		for SWEEP_BUSY_TIMEOUT_MS is left to a later pass (fenced, if the
 *		fence came first: the fence completion records it): waiting on would
 *		hold up every later step, and deadlock unseen with that transaction
 *		if it then waited for this pass (run_maintenance() waits for it).
 *
 *		Until a pass has tried every head since the start, passes load
 *		the heads not loaded yet, however young.  Loading decides the
 *		batches a crash left in doubt in the file, by the commit log; a
 *		head nobody used would otherwise wait for that until it is
 *		segment_max_age old, and by then vacuum may have truncated the
 *		commit log past their transactions, whose batches are then taken
 *		for committed (append_xid_committed).  The heads stay loaded, as
 *		they would for their next user (a loaded head is given back only
 *		once fenced: freeing a slot whose head goes on would let a holder
 *		of the slot's number act on it while it loads again).  So they are
 *		loaded only while half the slots stay free, for the heads
 *		producers and readers load; the others are left to their next use
 *		or their age, as before, and the log says how many (once per
 *		process).  A head that fails to load is warned of in every pass
 *		until one loads it (an old head that fails is anyway); one dropped
 *		or sealed meanwhile is no failure.
 */
static void
sweep_heads(SweepCounts *counts)
{
	uint64		n = SpiQueryRun(&q_heads, NULL, NULL);
	SweepHead  *heads = palloc(sizeof(SweepHead) * Max(n, 1));
	uint64		i;
	bool		load_all;
	bool		all_loaded = true;
	int			no_slot = 0;
	static bool said_no_slot = false;

	SpinLockAcquire(&sweep_shared->mutex);
	load_all = !sweep_shared->heads_loaded;
	SpinLockRelease(&sweep_shared->mutex);

	for (i = 0; i < n; i++)
	{
		RetentionSettings rs;
		bool		isnull;

		heads[i].segment_id = SpiInt64(i, 1, NULL);
		heads[i].base_offset = SpiInt64(i, 2, NULL);
		heads[i].age_us = SpiInt64(i, 3, NULL);
		sweep_retention(i, 4, &rs);
		heads[i].max_age_us = rs.segment_max_age_us;
		heads[i].loaded = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
													 SPI_tuptable->tupdesc, 6,
													 &isnull));
	}

	for (i = 0; i < n; i++)
	{
		SweepHeadOne one = {&heads[i], load_all, false, false, false, false};
		ErrorData  *edata;

		CHECK_FOR_INTERRUPTS();
		edata = SubxactTry(sweep_head_one, &one);
		if (edata == NULL)
		{
			counts->fences_completed += one.fence_completed ? 1 : 0;
			counts->rolled += one.rolled ? 1 : 0;
			no_slot += one.no_slot ? 1 : 0;
			continue;
		}
		/* a young head loaded only to decide it, gone since the list */
		if (!one.loaded && !heads[i].loaded &&
			heads[i].age_us < heads[i].max_age_us &&
			!sweep_segment_in_state(heads[i].segment_id, "active"))
		{
			FreeErrorData(edata);
			continue;
		}
		/* a head loaded, whose seal failed, is no load left to do */
		if (!one.loaded)
			all_loaded = false;
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			ereport(LOG,
					(errmsg("malachi sweeper: left segment " INT64_FORMAT " to a later pass: %s",
							heads[i].segment_id, edata->message)));
		else
		{
			ereport(WARNING,
					(errcode(edata->sqlerrcode),
					 errmsg("malachi sweeper: could not sweep head segment " INT64_FORMAT,
							heads[i].segment_id),
					 errdetail("%s", edata->message)));
			sweep_note_error(counts, 1, "fence completion and age rolls", edata->message);
		}
		FreeErrorData(edata);
	}
	if (no_slot > 0 && !said_no_slot)
	{
		ereport(LOG,
				(errmsg("malachi sweeper: %d head(s) not loaded since the start: no more than half of the %d append slots are free",
						no_slot, malachi_max_active_segments),
				 errdetail("Batches a crash left in doubt in them are decided when they are next used, or once they are segment_max_age old."),
				 errhint("Raise malachi.max_active_segments.")));
		said_no_slot = true;
	}
	if (load_all && all_loaded)
	{
		SpinLockAcquire(&sweep_shared->mutex);
		sweep_shared->heads_loaded = true;
		SpinLockRelease(&sweep_shared->mutex);
	}
}

static SpiQuery q_retention = {
	"SELECT s.segment_id, s.range_id, s.state = 'sealed', "
	"coalesce(s.byte_size, h.visible_bytes, 0), "
	"coalesce((extract(epoch FROM now() - s.sealed_at) * 1000000)::bigint, 0), "
	"t.settings, p.definition, r.state = 'sealed' "
	"FROM malachi.segment_meta s JOIN malachi.range_meta r USING (range_id) "
	"JOIN malachi.topic_meta t USING (topic_id) "
	"LEFT JOIN malachi.topic_policy b USING (topic_id) "
	"LEFT JOIN malachi.policy_meta p USING (policy) "
	"LEFT JOIN malachi.head_state() h USING (segment_id) "
	"ORDER BY s.range_id, s.seq DESC",
	0, {0}, NULL
};
/*
 * Rows another transaction holds (a drop_topic or delete_segment still
 * open) are skipped, never waited for: a pass must not stall for every
 * topic on one open transaction.  A later pass deletes them.
 */
static SpiQuery q_delete = {
	"DELETE FROM malachi.segment_meta WHERE segment_id = "
	"(SELECT segment_id FROM malachi.segment_meta "
	"WHERE segment_id = $1 AND state = 'sealed' FOR UPDATE SKIP LOCKED)",
	1, {INT8OID}, NULL
};

/*
 * sweep_retention_step
 *		Delete sealed segments past their topic's retention: sealed longer
 *		ago than retention, or beyond retention_bytes counting a range's
 *		newest segments first.
 */
static void
sweep_retention_step(SweepCounts *counts)
{
	uint64		n = SpiQueryRun(&q_retention, NULL, NULL);
	int64	   *doomed = palloc(sizeof(int64) * Max(n, 1));
	int			ndoomed = 0;
	int64		range = -1;
	int64		bytes = 0;
	uint64		i;

	for (i = 0; i < n; i++)
	{
		RetentionSettings rs;
		bool		isnull;
		int64		segment_id = SpiInt64(i, 1, NULL);
		int64		range_id = SpiInt64(i, 2, NULL);
		bool		sealed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
														SPI_tuptable->tupdesc, 3, &isnull));
		int64		size = SpiInt64(i, 4, NULL);
		int64		sealed_age = SpiInt64(i, 5, NULL);

		bool		range_sealed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
															  SPI_tuptable->tupdesc, 8, &isnull));

		sweep_retention(i, 6, &rs);
		if (range_id != range)
		{
			range = range_id;
			bytes = size;
			/*
			 * An active range's newest segment stays: its end is where the
			 * next head starts.  A sealed range's end is kept in its row.
			 */
			if (!range_sealed)
				continue;
		}
		else
			bytes += size;
		if (!sealed)
			continue;
		if ((rs.retention_us >= 0 && sealed_age > rs.retention_us) ||
			(rs.retention_bytes >= 0 && bytes > rs.retention_bytes))
			doomed[ndoomed++] = segment_id;
	}
	for (i = 0; i < (uint64) ndoomed; i++)
	{
		Datum		args[1] = {Int64GetDatum(doomed[i])};

		if (SpiQueryRun(&q_delete, args, NULL) > 0)
		{
			SweepDropAtCommit(doomed[i]);
			counts->deleted++;
			InjectWait(INJECT_RETENTION_DELETED);
		}
	}
}

static SpiQuery q_all_segments = {
	"SELECT segment_id FROM malachi.segment_meta", 0, {0}, NULL
};
static SpiQuery q_one_segment = {
	"SELECT FROM malachi.segment_meta WHERE segment_id = $1", 1, {INT8OID}, NULL
};

/*
 * sweep_orphans
 *		Remove segment files (and indexes) that no segment row names and
 *		that are older than malachi.orphan_grace.  A head's file is created
 *		just before its row commits: a file the writer is creating, or
 *		whose row committed since the rows were read, stays.  The rows are
 *		read as of now (a REPEATABLE READ snapshot may predate a segment
 *		by more than the grace), and the files of rows this transaction
 *		deleted are left to its commit (it may still roll back).
 */
static void
sweep_orphans(SweepCounts *counts)
{
	const char *dirpath = SegmentDirectory();
	uint64		n = SpiQueryRun(&q_all_segments, NULL, GetLatestSnapshot());
	HTAB	   *known = Int64HashCreate("malachi known segments", sizeof(int64),
										CurrentMemoryContext);
	DIR		   *dir;
	struct dirent *de;
	time_t		now = time(NULL);
	List	   *orphans = NIL;
	ListCell   *lc;
	uint64		i;

	for (i = 0; i < n; i++)
	{
		int64		id = SpiInt64(i, 1, NULL);

		(void) hash_search(known, &id, HASH_ENTER, NULL);
	}

	SegmentEnsureDirectory();
	dir = AllocateDir(dirpath);
	while ((de = ReadDir(dir, dirpath)) != NULL)
	{
		char		path[MAXPGPATH];
		struct stat st;
		int64		sid;
		bool		is_index;
		bool		is_tmp = SegmentIndexTmpName(de->d_name);

		/* an index being written is old only when its writer died */
		if (!is_tmp)
		{
			if (!SegmentFileName(de->d_name, &sid, &is_index))
				continue;
			if (hash_search(known, &sid, HASH_FIND, NULL) != NULL ||
				sweep_dropping(sid))
				continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dirpath, de->d_name);
		/*
		 * The inode's change time counts too: a head claiming a spare
		 * links it under its new name without writing it, and the spare's
		 * modification time may be long past.
		 */
		if (stat(path, &st) != 0 ||
			now - Max(st.st_mtime, st.st_ctime) < (time_t) malachi_orphan_grace)
			continue;
		if (is_tmp || is_index)
		{
			if (unlink(path) == 0)
				ereport(LOG,
						(errmsg("malachi: removed orphan index file \"%s\"", path)));
		}
		else
		{
			int64	   *p = palloc(sizeof(int64));

			*p = sid;
			orphans = lappend(orphans, p);
		}
	}
	FreeDir(dir);

	foreach(lc, orphans)
	{
		int64		sid = *(int64 *) lfirst(lc);
		Datum		args[1] = {Int64GetDatum(sid)};

		/*
		 * A head the writer created after the rows were read: its file
		 * came before its row.  The writer says which file it is creating
		 * until its transaction has ended, so a file it no longer names
		 * has its row committed by now, or is an orphan indeed.
		 */
		if (WriterCreatingSegment() == sid ||
			SpiQueryRun(&q_one_segment, args, GetLatestSnapshot()) > 0)
			continue;
		InjectWait(INJECT_ORPHAN_CHECKED);
		/* the name first, as a drop does: a released slot is never reloaded */
		SegmentUnlink(sid);
		AppendRelease(sid);
		ReadForgetSegment(sid);
		ereport(LOG,
				(errmsg("malachi: removed orphan segment file of segment " INT64_FORMAT,
						sid),
				 errdetail("No segment row names it, and it is older than malachi.orphan_grace.")));
		counts->orphans_removed++;
	}
}

static SpiQuery q_scrub = {
	"SELECT segment_id, base_offset, end_offset, byte_size "
	"FROM malachi.segment_meta WHERE state = 'sealed' "
	"ORDER BY scrubbed_at NULLS FIRST, segment_id LIMIT 1000",
	0, {0}, NULL
};
/* (a row another transaction holds is skipped, as in q_delete) */
static SpiQuery q_scrubbed = {
	"UPDATE malachi.segment_meta SET scrubbed_at = now(), corrupt = nullif($2, '') "
	"WHERE segment_id = "
	"(SELECT segment_id FROM malachi.segment_meta WHERE segment_id = $1 "
	"FOR UPDATE SKIP LOCKED)",
	2, {INT8OID, TEXTOID}, NULL
};

/* A segment sweep_verify checks, and what it found (for SubxactTry). */
typedef struct VerifyOne
{
	int64		segment_id;
	int64		base_offset;
	int64		end_offset;
	int64		byte_size;
	char	   *problem;
} VerifyOne;

static void
sweep_verify_one(void *arg)
{
	VerifyOne  *v = arg;
	File		file = SegmentOpen(v->segment_id);
	SegScan		scan;

	SegmentScan(file, v->segment_id, 0, v->base_offset, &scan);
	if (scan.torn)
		v->problem = psprintf("the batch at position " UINT64_FORMAT " (offset " INT64_FORMAT ") does not check: %s",
							  scan.data_end, scan.end_offset,
							  CodecResultString(scan.tail_error));
	else if (!scan.sealed)
		v->problem = psprintf("no seal trailer after position " UINT64_FORMAT,
							  scan.data_end);
	else if (scan.end_offset != v->end_offset ||
			 (int64) scan.data_end != v->byte_size)
		v->problem = psprintf("the file ends at offset " INT64_FORMAT " and position " UINT64_FORMAT ", the control plane says " INT64_FORMAT " and " INT64_FORMAT,
							  scan.end_offset, scan.data_end, v->end_offset,
							  v->byte_size);
}

/*
 * sweep_verify
 *		Re-read a sealed segment and check every batch and the trailer
 *		against what the control plane recorded.  NULL when sound, else
 *		what is wrong.  The read runs in a subtransaction, so that an error
 *		of it cleans up after itself and becomes the answer.
 */
static char *
sweep_verify(int64 segment_id, int64 base_offset, int64 end_offset,
			 int64 byte_size)
{
	VerifyOne	v = {segment_id, base_offset, end_offset, byte_size, NULL};
	ErrorData  *edata = SubxactTry(sweep_verify_one, &v);

	if (edata == NULL)
		return v.problem;
	v.problem = pstrdup(edata->message);
	FreeErrorData(edata);
	return v.problem;
}

/*
 * sweep_scrub
 *		Verify the least recently scrubbed sealed segments, up to the
 *		budget of malachi.scrub_rate times the sweep interval.
 */
static void
sweep_scrub(SweepCounts *counts)
{
	int64		budget = (int64) malachi_scrub_rate * 1024 * malachi_sweep_interval;
	uint64		n;
	int64	   *ids;
	int64	   *meta;
	uint64		i;

	if (budget <= 0)
		return;
	n = SpiQueryRun(&q_scrub, NULL, NULL);
	InjectWait(INJECT_SCRUB_LISTED);
	ids = palloc(sizeof(int64) * Max(n, 1));
	meta = palloc(sizeof(int64) * 3 * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		ids[i] = SpiInt64(i, 1, NULL);
		meta[3 * i] = SpiInt64(i, 2, NULL);
		meta[3 * i + 1] = SpiInt64(i, 3, NULL);
		meta[3 * i + 2] = SpiInt64(i, 4, NULL);
	}
	for (i = 0; i < n && counts->scrubbed_bytes < budget; i++)
	{
		char	   *problem;
		Datum		args[2];

		CHECK_FOR_INTERRUPTS();
		problem = sweep_verify(ids[i], meta[3 * i], meta[3 * i + 1], meta[3 * i + 2]);
		counts->scrubbed_bytes += meta[3 * i + 2];
		args[0] = Int64GetDatum(ids[i]);

		/*
		 * Deleted since it was listed (drop_topic, retention,
		 * delete_segment): its file goes once the deletion has committed,
		 * so a fresh snapshot no longer sees the row.  A missing file is no
		 * corruption then.
		 */
		if (problem && !sweep_segment_in_state(ids[i], "sealed"))
			continue;
		if (problem)
		{
			args[1] = CStringGetTextDatum(problem);
			counts->corrupt++;
			ereport(WARNING,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("malachi: segment " INT64_FORMAT " is corrupt", ids[i]),
					 errdetail("%s.", problem),
					 errhint("Reads of the damaged part fail with data_corrupted; restore the file from a copy, or delete the segment with malachi.delete_segment().")));
		}
		else
			args[1] = CStringGetTextDatum("");
		(void) SpiQueryRun(&q_scrubbed, args, NULL);
	}
}

/*---- a pass ----*/

typedef void (*SweepStep) (SweepCounts *counts);

/*
 * sweep_voids
 *		Flag in their files the void batches that loaded heads hold in
 *		memory only (AppendPersistVoids says why).
 */
static void
sweep_voids(SweepCounts *counts)
{
	char		msg[200];
	int			failed = AppendPersistVoids(msg, sizeof(msg));

	if (failed > 0)
		sweep_note_error(counts, failed, "void flags", msg);
}

/* A head's index to save, and whether it was, for SubxactTry. */
typedef struct HeadIndexOne
{
	AppendSafePoint *point;
	bool		saved;
} HeadIndexOne;

static void
sweep_head_index_one(void *arg)
{
	HeadIndexOne *one = arg;
	AppendSafePoint *p = one->point;

	one->saved = ReadSaveHeadIndex(p->segment_id, p->base_offset, p->settled);
}

/*
 * sweep_head_indexes
 *		Save the indexes of loaded heads up to their settled prefixes.  Each
 *		head in a subtransaction of its own: one whose file cannot be read
 *		is reported as a WARNING, and the others are still saved; it is
 *		tried again once its settled prefix grew by another step.
 */
static void
sweep_head_indexes(SweepCounts *counts)
{
	AppendSafePoint *points;
	int			n = AppendSafePoints(&points, SWEEP_INDEX_ADVANCE);
	int			i;

	for (i = 0; i < n; i++)
	{
		HeadIndexOne one = {&points[i], false};
		ErrorData  *edata = SubxactTry(sweep_head_index_one, &one);

		/*
		 * Saved or not, the head is tried again only once it grew by
		 * another step: one that keeps failing must not make every pass
		 * write and flush WAL.
		 */
		AppendSafePointSaved(points[i].segment_id, points[i].settled);
		if (edata == NULL)
		{
			counts->heads_indexed += one.saved ? 1 : 0;
			continue;
		}
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("malachi: could not save the index of segment " INT64_FORMAT,
						points[i].segment_id),
				 errdetail("%s", edata->message),
				 errhint("Its recovery after a restart scans from the last point saved before.")));
		sweep_note_error(counts, 1, "head indexes", edata->message);
		FreeErrorData(edata);
	}
}

/*
 * sweep_step
 *		Run one step, in a transaction of its own (the worker) or in the
 *		caller's.  A worker step that fails is logged and counted; the
 *		others still run.
 */
static void
sweep_step(SweepStep step, const char *name, bool own_transaction,
		   SweepCounts *counts)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (!own_transaction)
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		step(counts);
		SPI_finish();
		return;
	}

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, name);
		step(counts);
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		counts->errors++;
		SpinLockAcquire(&sweep_shared->mutex);
		snprintf(sweep_shared->last_error, sizeof(sweep_shared->last_error),
				 "%s: %s", name, edata->message);
		SpinLockRelease(&sweep_shared->mutex);
		ereport(LOG,
				(errmsg("malachi sweeper: %s failed: %s", name, edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * SweepPass
 *		One pass of every step.  own_transactions: the worker, between
 *		transactions; else run_maintenance(), inside the caller's.
 */
void
SweepPass(bool own_transactions, SweepCounts *counts)
{
	TimestampTz start = GetCurrentTimestamp();
	LOCKTAG		pass_lock;

	memset(counts, 0, sizeof(*counts));
	MalachiLockTag(&pass_lock, 0, 0, MALACHI_LOCK_SWEEP);
	if (own_transactions)
	{
		StartTransactionCommand();
		(void) LockAcquire(&pass_lock, ExclusiveLock, true, false);
		CommitTransactionCommand();
	}
	else
		(void) LockAcquire(&pass_lock, ExclusiveLock, true, false);

	SpinLockAcquire(&sweep_shared->mutex);
	sweep_shared->last_error[0] = '\0';
	SpinLockRelease(&sweep_shared->mutex);

	PG_TRY();
	{
		sweep_step(sweep_voids, "void flags", own_transactions, counts);
		sweep_step(sweep_heads, "fence completion and age rolls", own_transactions, counts);
		sweep_step(sweep_retention_step, "retention", own_transactions, counts);
		sweep_step(sweep_orphans, "orphans", own_transactions, counts);
		sweep_step(sweep_head_indexes, "head indexes", own_transactions, counts);
		sweep_step(sweep_scrub, "scrub", own_transactions, counts);
	}
	PG_FINALLY();
	{
		if (own_transactions)
		{
			StartTransactionCommand();
			(void) LockRelease(&pass_lock, ExclusiveLock, true);
			CommitTransactionCommand();
		}
		else
			(void) LockRelease(&pass_lock, ExclusiveLock, true);
	}
	PG_END_TRY();

	SpinLockAcquire(&sweep_shared->mutex);
	sweep_shared->passes++;
	sweep_shared->last_start = start;
	sweep_shared->last_end = GetCurrentTimestamp();
	sweep_shared->last = *counts;
	SpinLockRelease(&sweep_shared->mutex);
}

/*---- the worker ----*/

/* Is the extension installed in this database (so that there is work)? */
static bool
sweep_extension_exists(void)
{
	bool		exists;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	exists = OidIsValid(get_extension_oid("malachi", true));
	CommitTransactionCommand();
	return exists;
}

/*
 * malachi_sweeper_main
 *		Entry point of the sweeper worker: a pass every
 *		malachi.sweep_interval (the first one interval after it starts)
 *		until SIGTERM.
 */
void
malachi_sweeper_main(Datum main_arg)
{
	MemoryContext pass_cxt;
	TimestampTz last_pass;
	TimestampTz next_pass;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	WorkerConnect();
	pass_cxt = AllocSetContextCreate(TopMemoryContext, "malachi sweeper pass",
									 ALLOCSET_DEFAULT_SIZES);
	pgstat_report_activity(STATE_IDLE, NULL);

	last_pass = GetCurrentTimestamp();
	next_pass = TimestampTzPlusMilliseconds(last_pass,
											(int64) malachi_sweep_interval * 1000);
	for (;;)
	{
		TimestampTz now;

		/*
		 * A reload rereads the interval; checked before every pass too, so
		 * that passes back to back (each as long as the interval) still see
		 * it.
		 */
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			next_pass = TimestampTzPlusMilliseconds(last_pass,
													(int64) malachi_sweep_interval * 1000);
		}
		now = GetCurrentTimestamp();
		/* a pass when the interval is up */
		if (now < next_pass)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Max(1, (next_pass - now) / 1000), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		last_pass = now;
		next_pass = TimestampTzPlusMilliseconds(now, (int64) malachi_sweep_interval * 1000);
		if (!sweep_extension_exists())
			continue;
		MemoryContextSwitchTo(pass_cxt);
		{
			SweepCounts counts;

			SweepPass(true, &counts);
		}
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(pass_cxt);
	}
}

/*---- SQL ----*/

/* A jsonb object of a pass's counts. */
static Jsonb *
sweep_counts_jsonb(const SweepCounts *c)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "{\"rolled\": %d, \"fences_completed\": %d, \"deleted\": %d, "
					 "\"orphans_removed\": %d, \"heads_indexed\": %d, "
					 "\"scrubbed_bytes\": " INT64_FORMAT ", "
					 "\"corrupt\": %d, \"errors\": %d}",
					 c->rolled, c->fences_completed, c->deleted,
					 c->orphans_removed, c->heads_indexed, c->scrubbed_bytes,
					 c->corrupt, c->errors);
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/*
 * A pass of run_maintenance(), in its caller's transaction; for
 * RunAsSuperuser: segment_meta, which the pass writes, is written by no
 * role (its rows must agree with the files), and only malachi_admin may
 * call run_maintenance().
 */
static void
sweep_pass_in_caller(void *arg)
{
	SweepPass(false, (SweepCounts *) arg);
}

/* SQL: run_maintenance(): one pass now, in this transaction; what it did */
Datum
malachi_run_maintenance(PG_FUNCTION_ARGS)
{
	SweepCounts counts;

	/* a pass writes segment_meta and may fence a head's file */
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("maintenance can only run on the control-plane primary"),
				 errdetail("This server is a standby."),
				 errhint("Run malachi.run_maintenance() on the primary.")));
	PreventCommandIfReadOnly("malachi.run_maintenance()");
	RunAsSuperuser(sweep_pass_in_caller, &counts);
	PG_RETURN_JSONB_P(sweep_counts_jsonb(&counts));
}

/* SQL: sweeper_state(): the last pass, for the sweeper_status view */
Datum
malachi_sweeper_state(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	SweepShared copy;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "sweeper_state must return a composite type");
	SpinLockAcquire(&sweep_shared->mutex);
	copy = *sweep_shared;
	SpinLockRelease(&sweep_shared->mutex);

	values[0] = Int64GetDatum(copy.passes);
	values[1] = TimestampTzGetDatum(copy.last_start);
	nulls[1] = copy.passes == 0;
	values[2] = Float8GetDatum(copy.passes == 0 ? 0 :
							   (copy.last_end - copy.last_start) / 1000.0);
	nulls[2] = copy.passes == 0;
	values[3] = JsonbPGetDatum(sweep_counts_jsonb(&copy.last));
	nulls[3] = copy.passes == 0;
	values[4] = CStringGetTextDatum(copy.last_error);
	nulls[4] = copy.last_error[0] == '\0';
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

static SpiQuery q_lock_segment = {
	"SELECT s.state = 'sealed', EXISTS (SELECT FROM malachi.segment_meta n "
	"WHERE n.range_id = s.range_id AND n.seq > s.seq) OR EXISTS (SELECT "
	"FROM malachi.range_meta r WHERE r.range_id = s.range_id AND r.state = 'sealed') "
	"FROM malachi.segment_meta s WHERE s.segment_id = $1 FOR UPDATE",
	1, {INT8OID}, NULL
};

/*
 * Delete a sealed segment's row (its file goes at commit); for
 * RunAsSuperuser, as sweep_pass_in_caller.
 */
static void
sweep_delete_segment(void *arg)
{
	int64		segment_id = *(int64 *) arg;
	Datum		args[1] = {Int64GetDatum(segment_id)};
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SpiQueryRun(&q_lock_segment, args, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_SEGMENT),
				 errmsg("segment " INT64_FORMAT " does not exist", segment_id)));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("segment " INT64_FORMAT " is a range's head", segment_id),
				 errhint("Seal it first with malachi.roll(range_id).")));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									2, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("segment " INT64_FORMAT " is its active range's newest segment", segment_id),
				 errdetail("Its end is where the range's next records go."),
				 errhint("Roll the range with malachi.roll(range_id) and produce to it first, or drop the topic.")));
	(void) SpiQueryRun(&q_delete, args, NULL);
	SPI_finish();
}

/*
 * SQL: delete_segment(segment_id): a sealed segment, its file after commit.
 * An active range's newest segment stays (as with retention): its end is
 * where the range's next segment starts.  A sealed range's end is kept in
 * its row, so all its segments can go.
 */
Datum
malachi_delete_segment(PG_FUNCTION_ARGS)
{
	int64		segment_id;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("segment_id must not be null")));
	segment_id = PG_GETARG_INT64(0);
	RunAsSuperuser(sweep_delete_segment, &segment_id);
	SweepDropAtCommit(segment_id);
	PG_RETURN_VOID();
}
