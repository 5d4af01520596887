/*-------------------------------------------------------------------------
 *
 * writer.c
 *	  The writer worker: control-plane changes in transactions of their own.
 *
 * Opening a range's head segment and recording a fenced segment's seal must
 * outlive the transaction that needed them: a produce that rolls back must
 * not roll back the existence of the segment it appended to, nor a fence
 * (DESIGN.md section 3, rule 8).  PostgreSQL has no autonomous
 * transactions, so a background worker runs them.  A worker rather than a
 * loopback libpq connection: it needs no password or pg_hba entry, costs no
 * connection slot per backend, and is started and restarted by the
 * postmaster.
 *
 * Protocol: every backend owns one slot, indexed by its PGPROC number.  To
 * ask, it stores the call, bumps request_id and sets the worker's latch; it
 * then sleeps on the slot's condition variable until done_id equals its
 * request_id.  A backend interrupted while it waits simply leaves; the
 * answer to a stale request_id is ignored.  Both calls are idempotent
 * (open returns an existing head; a second seal converges on the first), so
 * a retry after an interruption is always safe.
 *
 * Rules:
 * - WriterShared.mutex (a spinlock) protects worker_latch and every field of
 *   every slot except the condition variable; it is held only to copy a
 *   few fields (and, for a failed call, its error's text: a few kB), never
 *   across I/O or a transaction.
 * - segments_epoch is an atomic: bumped by the worker after each commit that
 *   changed segment_meta (and by a backend whose commit deleted
 *   segments); read without a lock by backends that cache segment lists.
 * - creating is an atomic: the segment whose file the worker created and
 *   whose row it has not committed yet (0: none), set before the file is
 *   created and cleared once the transaction has ended, or the worker
 *   exits with it open (writer_detach).  The sweeper's
 *   orphan step reads it (WriterCreatingSegment) before it checks a file's
 *   row again, so that it never takes a head's new file for an orphan.
 * - The worker never waits for a row lock: it takes the range's row lock
 *   (FOR SHARE, which conflicts with a split's FOR NO KEY UPDATE) NOWAIT,
 *   so a split held open in a long transaction cannot stall opens of other
 *   ranges (rule 7), and a backend that itself holds that lock cannot
 *   deadlock with the worker (rule 8).  A seal takes the segment's row
 *   NOWAIT the same way (an open drop_topic holds it).  A busy answer
 *   makes the asking backend wait for that row itself, as a lock wait the
 *   deadlock detector sees (or back off, when its wait is bounded), and ask
 *   again.
 * - The worker waits for no table lock either: it takes its tables' locks
 *   first, without waiting, and gives up after WRITER_TABLE_LOCK_MS with
 *   object_in_use.  A backend that holds LOCK TABLE on one of them and
 *   then asks the worker would otherwise deadlock with it unseen.
 * - The worker runs one short transaction per call and never holds a lock
 *   between calls.  Each commits synchronously (ForceSyncCommit), since
 *   files and acknowledged records depend on the rows it writes.
 *
 * Between calls the worker also keeps the spare files (segfile.c): it makes
 * spares of deleted segments' files once no process can hold them open, or
 * removes them, for a few milliseconds per turn of its loop, and zero-fills
 * new ones while fewer than malachi.spare_segments are ready, one chunk per
 * turn, while the file system has room to spare (SegmentSpareRoom, looked
 * at before each chunk).  A request waits for the turn in progress.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/table.h"
#include "access/twophase.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/condition_variable.h"
#include "storage/bufmgr.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "append.h"
#include "errors.h"
#include "inject.h"
#include "segfile.h"
#include "util.h"
#include "writer.h"
#include "settings.h"

#define WRITER_MESSAGE_MAX	1024

/* How long a backend waits for the writer to appear before giving up */
#define WRITER_STARTUP_WAIT_MS	30000

/* How long a deleted segment's file waits to become a spare before it is removed */
#define RECYCLE_GIVE_UP_MS	60000

/* How long a call tries for its tables' locks, another holds them */
#define WRITER_TABLE_LOCK_MS	5000
/*
 * How often, at most, it looks for deleted segments' files to recycle
 * (segfile.c lists the directory only when a shared count of renames moved,
 * at the worker's start, and once a minute; nothing wakes the worker for a
 * rename: idle, it looks once a second)
 */
#define RECYCLE_SCAN_MS		100

/* The text of an error the worker answers, which the backend raises again. */
typedef struct WriterText
{
	char		message[WRITER_MESSAGE_MAX];
	char		detail[WRITER_MESSAGE_MAX];
	char		hint[WRITER_MESSAGE_MAX];
} WriterText;

/* One backend's request and answer; see the rules above. */
typedef struct WriterSlot
{
	uint64		request_id;		/* bumped by the backend per request */
	uint64		done_id;		/* last request_id the worker answered */
	bool		pending;		/* request_id waits for the worker: set
								 * with it by the backend, cleared when the
								 * worker publishes its answer */
	WriterCall	call;			/* the request, then the answer */
	int			sqlerrcode;		/* 0 when the call succeeded */
	WriterText	text;			/* its error's text, when it failed */
	ConditionVariable cv;		/* broadcast when done_id changes */
} WriterSlot;

typedef struct WriterShared
{
	slock_t		mutex;			/* protects worker_latch and the slots */
	Latch	   *worker_latch;	/* the running writer's, or NULL */
	pg_atomic_uint64 segments_epoch;	/* see the rules above */
	pg_atomic_uint64 creating;	/* see the rules above */
	int			nslots;
	WriterSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WriterShared;

static WriterShared *writer_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void writer_shmem_request(void);
static void writer_shmem_startup(void);

/*---- setup ----*/

/* Number of slots: one per PGPROC. */
static int
writer_nslots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/* Shared memory needed. */
static Size
writer_shmem_size(void)
{
	return add_size(offsetof(WriterShared, slots),
					mul_size(writer_nslots(), sizeof(WriterSlot)));
}

/*
 * WriterInit
 *		Ask for shared memory and register the writer worker.  Called from
 *		_PG_init while shared_preload_libraries are loaded.
 */
void
WriterInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = writer_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = writer_shmem_startup;
	WorkerRegister("malachi writer", "malachi_writer_main", 1);
}

/* Reserve the slots. */
static void
writer_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(writer_shmem_size());
}

/* Find or create the slots. */
static void
writer_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	writer_shared = ShmemInitStruct("malachi writer", writer_shmem_size(),
								  &found);
	if (!found)
	{
		SpinLockInit(&writer_shared->mutex);
		writer_shared->worker_latch = NULL;
		pg_atomic_init_u64(&writer_shared->segments_epoch, 1);
		pg_atomic_init_u64(&writer_shared->creating, 0);
		writer_shared->nslots = writer_nslots();
		for (i = 0; i < writer_shared->nslots; i++)
		{
			WriterSlot   *slot = &writer_shared->slots[i];

			slot->request_id = 0;
			slot->done_id = 0;
			slot->pending = false;
			slot->sqlerrcode = 0;
			ConditionVariableInit(&slot->cv);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The segments epoch: changes whenever segment_meta did. */
uint64
WriterSegmentsEpoch(void)
{
	return pg_atomic_read_u64(&writer_shared->segments_epoch);
}

/* Tell the caches of segment lists that segment_meta changed (committed). */
void
WriterSegmentsChanged(void)
{
	pg_atomic_fetch_add_u64(&writer_shared->segments_epoch, 1);
}

/*
 * WriterCreatingSegment
 *		The segment whose file the worker created and whose row is not
 *		committed yet, or 0 (see the rules above).
 */
int64
WriterCreatingSegment(void)
{
	pg_memory_barrier();
	return (int64) pg_atomic_read_u64(&writer_shared->creating);
}

/*---- the asking side (any backend) ----*/

/*
 * writer_ask_once
 *		Post one request and wait for its answer.  Returns the answer's
 *		SQLSTATE (0 on success); the answer is copied to *call, an error's
 *		text to *text.
 */
static int
writer_ask_once(WriterCall *call, WriterText *text)
{
	WriterSlot   *slot = &writer_shared->slots[MyProc->pgprocno];
	uint64		id;
	Latch	   *latch;
	bool		done = false;
	int			sqlerrcode = 0;
	TimestampTz start = GetCurrentTimestamp();

	SpinLockAcquire(&writer_shared->mutex);
	id = ++slot->request_id;
	slot->call = *call;
	slot->pending = true;
	latch = writer_shared->worker_latch;
	SpinLockRelease(&writer_shared->mutex);
	if (latch)
		SetLatch(latch);

	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		SpinLockAcquire(&writer_shared->mutex);
		if (slot->done_id == id)
		{
			done = true;
			*call = slot->call;
			sqlerrcode = slot->sqlerrcode;
			if (sqlerrcode != 0)
				*text = slot->text;
		}
		latch = writer_shared->worker_latch;
		SpinLockRelease(&writer_shared->mutex);
		if (done)
			break;

		if (latch == NULL &&
			TimestampDifferenceExceeds(start, GetCurrentTimestamp(),
									   WRITER_STARTUP_WAIT_MS))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the malachi writer worker is not running"),
					 errhint("Check the server log; the worker connects to database \"%s\" (malachi.database).",
							 malachi_database)));
		/* a restarted worker may have missed the latch: poke it again */
		if (latch)
			SetLatch(latch);
		(void) ConditionVariableTimedSleep(&slot->cv, 1000, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	return sqlerrcode;
}

/*
 * WriterRun
 *		Run a call in the writer's own transaction and wait for it.  A
 *		range locked by a split or merge in flight is asked again with
 *		backoff until that transaction ends; any other failure is raised
 *		here with the worker's SQLSTATE and message.
 */
void
WriterRun(WriterCall *call)
{
	(void) WriterTry(call, 0, 0);
}

/*
 * The row a backend the worker turned away waits for (writer_wait_busy),
 * found as of now.  It runs as a superuser: every name is qualified, so
 * that the caller's search_path cannot put its own operator in it.
 */
static SpiQuery q_busy_range = {
	"SELECT ctid FROM malachi.range_meta "
	"WHERE range_id OPERATOR(pg_catalog.=) $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_busy_segment = {
	"SELECT ctid FROM malachi.segment_meta "
	"WHERE segment_id OPERATOR(pg_catalog.=) $1",
	1, {INT8OID}, NULL
};

/* The OID of one of malachi's tables (or its sequence). */
static Oid
writer_table(const char *name)
{
	Oid			rel = get_relname_relid(name, get_namespace_oid("malachi", false));

	if (!OidIsValid(rel))
		elog(ERROR, "table malachi.%s does not exist", name);
	return rel;
}

/* A row writer_busy_row looks for, and what it found. */
typedef struct BusyRow
{
	WriterCall *call;
	ItemPointerData tid;
	bool		found;
} BusyRow;

/*
 * The current version of the row a call was turned away by, as of the
 * latest snapshot; for RunAsSuperuser (the caller may not be allowed to
 * read the table).
 */
static void
writer_busy_row(void *arg)
{
	BusyRow    *b = arg;
	bool		seal = b->call->kind == WRITER_RECORD_SEAL;
	Datum		key = Int64GetDatum(seal ? b->call->segment_id : b->call->range_id);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SpiQueryRun(seal ? &q_busy_segment : &q_busy_range, &key,
					GetLatestSnapshot()) > 0)
	{
		bool		isnull;

		b->tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1,
													&isnull));
		b->found = true;
	}
	SPI_finish();
}

/*
 * writer_busy_conflicts
 *		Does a lock (or an update) of status on the row conflict with the
 *		lock the worker takes on it: FOR SHARE of a range's row, FOR NO KEY
 *		UPDATE of a segment's?  FOR KEY SHARE conflicts with neither, and
 *		consumers hold it on their ranges' rows for as long as their
 *		transactions last (the group_positions foreign key): waiting for
 *		them would make a producer wait for a consumer, not for the split.
 */
static bool
writer_busy_conflicts(MultiXactStatus status, bool seal)
{
	if (status == MultiXactStatusForKeyShare)
		return false;
	if (status == MultiXactStatusForShare)
		return seal;
	return true;
}

/* The status of a row's single xmax, from its infomask (see htup_details.h). */
static MultiXactStatus
writer_xmax_status(uint16 infomask, uint16 infomask2)
{
	if (!HEAP_XMAX_IS_LOCKED_ONLY(infomask))
		return (infomask2 & HEAP_KEYS_UPDATED) ?
			MultiXactStatusUpdate : MultiXactStatusNoKeyUpdate;
	if (HEAP_XMAX_IS_KEYSHR_LOCKED(infomask))
		return MultiXactStatusForKeyShare;
	if (HEAP_XMAX_IS_SHR_LOCKED(infomask))
		return MultiXactStatusForShare;
	return (infomask2 & HEAP_KEYS_UPDATED) ?
		MultiXactStatusForUpdate : MultiXactStatusForNoKeyUpdate;
}

/*
 * writer_wait_busy
 *		Wait until the transactions that lock the row the worker was turned
 *		away by (a split_range, merge_ranges or drop_topic still open) end,
 *		as lock waits on their transaction ids: the deadlock detector sees
 *		them (a producer polling instead could wait forever for a split that
 *		waits for a lock the producer holds), lock_timeout applies, and
 *		they need neither a row lock (a serialization failure under
 *		REPEATABLE READ, a read-only transaction) nor a subtransaction, so
 *		a producer waits the same way at its commit.  Only lockers whose
 *		lock conflicts with the worker's count (writer_busy_conflicts).
 *		The waits' own errors (a deadlock, a timeout, a cancel) are raised.
 *		Returns true when the only such locker in progress is this very
 *		transaction (it locked the row itself, by hand): nobody to wait for.
 */
static bool
writer_wait_busy(WriterCall *call)
{
	BusyRow		row = {call, {{0, 0}, 0}, false};
	ItemPointerData tid;
	HeapTupleData tuple;
	Buffer		buffer;
	Relation	rel;
	TransactionId xmax = InvalidTransactionId;
	uint16		infomask = HEAP_XMAX_INVALID;
	uint16		infomask2 = 0;
	bool		seal = call->kind == WRITER_RECORD_SEAL;
	bool		self = false;
	bool		other = false;

	RunAsSuperuser(writer_busy_row, &row);
	if (!row.found)
		return false;			/* gone meanwhile: ask again */
	tid = row.tid;
	rel = table_open(writer_table(seal ? "segment_meta" : "range_meta"),
					 AccessShareLock);
	tuple.t_self = tid;
	if (heap_fetch(rel, SnapshotAny, &tuple, &buffer, true))
	{
		LockBuffer(buffer, BUFFER_LOCK_SHARE);
		infomask = tuple.t_data->t_infomask;
		infomask2 = tuple.t_data->t_infomask2;
		xmax = HeapTupleHeaderGetRawXmax(tuple.t_data);
		LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	}
	if (BufferIsValid(buffer))
		ReleaseBuffer(buffer);

	if (!(infomask & HEAP_XMAX_INVALID) && (infomask & HEAP_XMAX_IS_MULTI))
	{
		MultiXactMember *members;
		int			n = GetMultiXactIdMembers(xmax, &members, false,
											  HEAP_XMAX_IS_LOCKED_ONLY(infomask));
		int			i;

		for (i = 0; i < n; i++)
		{
			if (!writer_busy_conflicts(members[i].status, seal))
				continue;
			if (TransactionIdIsCurrentTransactionId(members[i].xid))
				self = true;
			else if (TransactionIdIsInProgress(members[i].xid))
			{
				other = true;
				XactLockTableWait(members[i].xid, rel, &tid, XLTW_Lock);
			}
		}
	}
	else if (!(infomask & HEAP_XMAX_INVALID) && TransactionIdIsValid(xmax) &&
			 writer_busy_conflicts(writer_xmax_status(infomask, infomask2),
								   seal))
	{
		if (TransactionIdIsCurrentTransactionId(xmax))
			self = true;
		else if (TransactionIdIsInProgress(xmax))
		{
			other = true;
			XactLockTableWait(xmax, rel, &tid, XLTW_Lock);
		}
	}
	table_close(rel, AccessShareLock);
	return self && !other;
}

/*
 * WriterTry
 *		WriterRun, except that a failure with SQLSTATE tolerated is
 *		returned instead of raised (0 on success), and that with
 *		busy_timeout_ms > 0 it stops backing off a range locked by a split
 *		or merge after that long (an error): a caller that holds batches in
 *		doubt must not hold readers back for as long as a split stays open.
 *		With 0, it waits for the row's lockers as lock waits
 *		(writer_wait_busy) before asking again.
 */
int
WriterTry(WriterCall *call, int tolerated, long busy_timeout_ms)
{
	WriterText	text;
	long		backoff_ms = 1;
	int			self_locked = 0;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   busy_timeout_ms);

	for (;;)
	{
		WriterCall	attempt = *call;
		int			sqlerrcode = writer_ask_once(&attempt, &text);

		if (sqlerrcode == 0)
		{
			*call = attempt;
			return 0;
		}
		if (tolerated != 0 && sqlerrcode == tolerated)
			return sqlerrcode;
		if (sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ereport(ERROR,
					(errcode(sqlerrcode),
					 errmsg("%s", text.message),
					 text.detail[0] ? errdetail("%s", text.detail) : 0,
					 text.hint[0] ? errhint("%s", text.hint) : 0));

		/* the range is being split or merged: wait for that to end */
		if (busy_timeout_ms > 0 && GetCurrentTimestamp() >= deadline &&
			call->kind == WRITER_RECORD_SEAL)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("timed out waiting for the row of segment " INT64_FORMAT, call->segment_id),
					 errdetail("A transaction that drops the segment's topic or deletes the segment is still open.")));
		if (busy_timeout_ms > 0 && GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("timed out waiting for range " INT64_FORMAT ", locked by a split, merge or drop_topic", call->range_id),
					 errdetail("A transaction that splits or merges the range, or drops its topic, is still open, while this transaction holds records in doubt in other ranges."),
					 errhint("Retry the transaction.")));
		InjectWait(INJECT_OPEN_BUSY);

		/*
		 * Twice in a row only this transaction locked the row (once may be
		 * a locker that ended just before the look): asking again would
		 * never succeed.
		 */
		if (busy_timeout_ms == 0)
			self_locked = writer_wait_busy(call) ? self_locked + 1 : 0;
		if (self_locked >= 2)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 call->kind == WRITER_RECORD_SEAL ?
					 errmsg("this transaction locks the row of segment " INT64_FORMAT ", which recording its seal needs",
							call->segment_id) :
					 errmsg("this transaction locks the row of range " INT64_FORMAT ", which opening a head needs",
							call->range_id),
					 errhint("End this transaction first, or produce and roll in another.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 backoff_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		backoff_ms = Min(backoff_ms * 2, 100);
	}
}

/*---- the worker ----*/

static SpiQuery q_lock_range = {
	"SELECT state = 'active' FROM malachi.range_meta "
	"WHERE range_id = $1 FOR SHARE NOWAIT",
	1, {INT8OID}, NULL
};
static SpiQuery q_head = {
	"SELECT segment_id, seq, base_offset FROM malachi.segment_meta "
	"WHERE range_id = $1 AND state = 'active'",
	1, {INT8OID}, NULL
};
static SpiQuery q_last = {
	"SELECT seq, end_offset FROM malachi.segment_meta "
	"WHERE range_id = $1 ORDER BY seq DESC LIMIT 1",
	1, {INT8OID}, NULL
};
static SpiQuery q_next_segment_id = {
	"SELECT nextval('malachi.segment_id_seq')",
	0, {InvalidOid}, NULL
};
static SpiQuery q_insert_head = {
	"INSERT INTO malachi.segment_meta (segment_id, range_id, seq, base_offset, replicas) "
	"VALUES ($5, $1, $2, $3, ARRAY[$4]) RETURNING segment_id",
	5, {INT8OID, INT4OID, INT8OID, TEXTOID, INT8OID}, NULL
};
static SpiQuery q_seal = {
	"UPDATE malachi.segment_meta SET state = 'sealed', end_offset = $2, "
	"byte_size = $3, sealed_at = now() "
	"WHERE segment_id = $1 AND state = 'active' RETURNING range_id",
	3, {INT8OID, INT8OID, INT8OID}, NULL
};
static SpiQuery q_segment = {
	"SELECT range_id, state = 'sealed', end_offset, byte_size "
	"FROM malachi.segment_meta WHERE segment_id = $1 "
	"FOR NO KEY UPDATE NOWAIT",
	1, {INT8OID}, NULL
};

/* Column col of row 0 of the last result as int64. */
static int64
writer_int64(int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  col, &isnull);

	return isnull ? -1 : DatumGetInt64(d);
}

/*
 * writer_fresh_segment_id
 *		The next segment id that no file of this node carries under any
 *		name.  Ids come from a sequence, but a dump restored after DROP
 *		EXTENSION sets it back, and a crash can take back a nextval whose
 *		file was already made: such an id's old file is an orphan, which a
 *		sweeper pass may be renaming away at this very moment.  Skipping
 *		the id leaves that file to the sweeper and keeps the new head's
 *		file out of its way (the sweeper only renames names it listed).
 */
static int64
writer_fresh_segment_id(void)
{
	for (;;)
	{
		int64		segment_id;

		SpiQueryRun(&q_next_segment_id, NULL, NULL);
		segment_id = writer_int64(1);
		if (!SegmentIdTaken(segment_id))
			return segment_id;
		ereport(LOG,
				(errmsg("malachi: skipping segment id " INT64_FORMAT ": a file of that id exists already",
						segment_id)));
	}
}

/*
 * writer_open_head
 *		The range's active segment, opening one if it has none: its base is
 *		the end of the range's last segment (0 for the first).  A range
 *		that is gone (its topic dropped since the producer routed) is "not
 *		active" too: the producer then routes again, and learns the topic
 *		is gone as any producer would.  Returns true when it opened one
 *		(segment_meta changed).
 */
static bool
writer_open_head(WriterCall *call)
{
	Datum		args[5];
	bool		isnull;
	int32		seq = 0;
	int64		base = 0;

	args[0] = Int64GetDatum(call->range_id);
	if (SpiQueryRun(&q_lock_range, args, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_RANGE_NOT_ACTIVE),
				 errmsg("range " INT64_FORMAT " is not active", call->range_id),
				 errdetail("It does not exist.")));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
									SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_RANGE_NOT_ACTIVE),
				 errmsg("range " INT64_FORMAT " is not active", call->range_id)));

	if (SpiQueryRun(&q_head, args, NULL) > 0)
	{
		call->segment_id = writer_int64(1);
		call->seq = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 2,
												&isnull));
		call->base_offset = writer_int64(3);
		return false;
	}

	if (SpiQueryRun(&q_last, args, NULL) > 0)
	{
		seq = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1,
										  &isnull)) + 1;
		base = writer_int64(2);
	}
	args[1] = Int32GetDatum(seq);
	args[2] = Int64GetDatum(base);
	args[3] = CStringGetTextDatum(malachi_node_name);
	args[4] = Int64GetDatum(writer_fresh_segment_id());
	SpiQueryRun(&q_insert_head, args, NULL);
	call->segment_id = SpiInt64(0, 1, NULL);
	/* the file exists before the head is recorded (see SegmentCreate) */
	pg_atomic_write_u64(&writer_shared->creating, (uint64) call->segment_id);
	pg_memory_barrier();
	SegmentCreate(call->segment_id);
	AppendNoteFresh(call->segment_id);
	InjectWait(INJECT_HEAD_CREATED);
	call->seq = seq;
	call->base_offset = base;
	return true;
}

/*
 * writer_record_seal
 *		Record a fenced segment's end and size, exactly as the fence
 *		answered.  A segment already sealed keeps what was recorded first,
 *		and the caller converges on that.
 */
static void
writer_record_seal(WriterCall *call)
{
	Datum		args[3];
	bool		isnull;

	args[0] = Int64GetDatum(call->segment_id);
	args[1] = Int64GetDatum(call->end_offset);
	args[2] = Int64GetDatum(call->byte_size);
	call->already_sealed = false;

	/*
	 * Take the segment's row NOWAIT: a transaction that drops its topic (or
	 * deletes it) and stays open would otherwise stall every call behind
	 * this one (rule 7), and one that then asks the worker for anything
	 * would deadlock with it unseen (rule 8).  Busy: the caller backs off.
	 */
	if (SpiQueryRun(&q_segment, args, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_SEGMENT),
				 errmsg("segment " INT64_FORMAT " does not exist", call->segment_id)));
	call->range_id = writer_int64(1);
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
									SPI_tuptable->tupdesc, 2, &isnull)))
	{
		if (SpiQueryRun(&q_seal, args, NULL) == 0)
			elog(ERROR, "segment " INT64_FORMAT " is neither active nor sealed",
				 call->segment_id);
		return;
	}
	call->already_sealed = true;
	call->end_offset = writer_int64(3);
	call->byte_size = writer_int64(4);
}

/*
 * writer_lock_tables
 *		Lock the tables a call uses, in the modes its statements take, trying
 *		without waiting (a lock wait of the worker is one no deadlock
 *		detector connects to the backend that asked): object_in_use after
 *		WRITER_TABLE_LOCK_MS.  Later statements find the locks held.  An
 *		open takes the range's row FOR SHARE, draws a segment id (nextval)
 *		and inserts a segment; a seal updates a segment.
 */
static void
writer_lock_tables(const WriterCall *call)
{
	struct
	{
		const char *kind;
		const char *name;
		LOCKMODE	mode;
	}			locks[3] = {{"table", "segment_meta", RowExclusiveLock},
	{"table", "range_meta", RowShareLock},
	{"sequence", "segment_id_seq", RowExclusiveLock}};	/* nextval's */
	int			nlocks = call->kind == WRITER_OPEN_HEAD ? 3 : 1;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   WRITER_TABLE_LOCK_MS);
	int			i;

	for (i = 0; i < nlocks; i++)
	{
		Oid			rel = writer_table(locks[i].name);

		while (!ConditionalLockRelationOid(rel, locks[i].mode))
		{
			if (GetCurrentTimestamp() >= deadline)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_IN_USE),
						 errmsg("%s malachi.%s is locked by another transaction",
								locks[i].kind, locks[i].name),
						 errdetail("Opening or sealing a segment waited %d ms for its lock (LOCK TABLE, ALTER SEQUENCE, or maintenance such as VACUUM FULL).",
								   WRITER_TABLE_LOCK_MS),
						 errhint("Retry once that transaction has ended.")));
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 10, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

/* Copy an error's text into a slot's buffer, cut at a character's edge. */
static void
writer_copy_text(char *dst, const char *src)
{
	int			n = src ? strlen(src) : 0;
	/* (a text that ends in a cut character clips past its end) */
	int			len = n > 0 ? Min(n, pg_mbcliplen(src, n, WRITER_MESSAGE_MAX - 1)) : 0;

	if (len > 0)
		memcpy(dst, src, len);
	dst[len] = '\0';
}

/*
 * writer_serve
 *		Run one call in a transaction of its own.  Returns 0, or the
 *		SQLSTATE of the error, whose text goes to *text.
 */
static int
writer_serve(WriterCall *call, WriterText *text, MemoryContext errcxt)
{
	volatile int sqlerrcode = 0;
	volatile bool changed = true;	/* did segment_meta change? */

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		writer_lock_tables(call);
		if (call->kind == WRITER_OPEN_HEAD)
		{
			pgstat_report_activity(STATE_RUNNING, "open head segment");
			changed = writer_open_head(call);
		}
		else
		{
			pgstat_report_activity(STATE_RUNNING, "record segment seal");
			writer_record_seal(call);
		}
		SPI_finish();
		PopActiveSnapshot();

		/*
		 * Durable before the answer, whatever synchronous_commit says:
		 * records are acknowledged in a head once they are durable in its
		 * file (immediate produce flushes no WAL), and a head whose row a
		 * crash took back would be opened again at the same offsets.
		 */
		ForceSyncCommit();
		CommitTransactionCommand();
		pg_atomic_write_u64(&writer_shared->creating, 0);
		if (changed)
			pg_atomic_fetch_add_u64(&writer_shared->segments_epoch, 1);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(errcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		pg_atomic_write_u64(&writer_shared->creating, 0);
		sqlerrcode = edata->sqlerrcode;
		writer_copy_text(text->message, edata->message ? edata->message : "unknown error");
		writer_copy_text(text->detail, edata->detail);
		writer_copy_text(text->hint, edata->hint);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	pgstat_report_activity(STATE_IDLE, NULL);
	return sqlerrcode;
}

/*
 * Serve every pending slot once.  Returns whether it served any: then the
 * caller looks again before it sleeps, since a request posted meanwhile in
 * a slot already passed may have lost its wake-up (waits inside a call,
 * for a table lock or a row lock, reset the worker's latch).
 */
static bool
writer_serve_pending(MemoryContext errcxt)
{
	int			i;
	bool		served = false;

	for (i = 0; i < writer_shared->nslots; i++)
	{
		WriterSlot   *slot = &writer_shared->slots[i];
		WriterCall	call;
		uint64		id;
		bool		pending;
		WriterText	text;
		int			sqlerrcode;

		/*
		 * pending stays set until the answer is published: a worker that
		 * dies while serving leaves the request to its successor, instead
		 * of a backend waiting for an answer nobody will give.
		 */
		SpinLockAcquire(&writer_shared->mutex);
		pending = slot->pending;
		id = slot->request_id;
		call = slot->call;
		SpinLockRelease(&writer_shared->mutex);
		if (!pending)
			continue;

		sqlerrcode = writer_serve(&call, &text, errcxt);
		served = true;

		SpinLockAcquire(&writer_shared->mutex);
		if (slot->request_id == id)
		{
			slot->call = call;
			slot->sqlerrcode = sqlerrcode;
			if (sqlerrcode != 0)
				slot->text = text;
			slot->done_id = id;
			slot->pending = false;
		}
		SpinLockRelease(&writer_shared->mutex);
		ConditionVariableBroadcast(&slot->cv);
		CHECK_FOR_INTERRUPTS();
	}
	return served;
}

/*
 * Is there room to fill a spare on (SegmentSpareRoom)?  Logged when there
 * stops being room, and when there is again.  Looked at before each chunk.
 */
static bool
writer_spare_room(uint64 size, uint64 done)
{
	static bool short_of_room = false;
	uint64		free_bytes;
	uint64		needed;
	bool		room = SegmentSpareRoom(size, done, &free_bytes, &needed);

	if (room != short_of_room)
		return room;			/* as at the last look */
	short_of_room = !room;
	if (room)
		ereport(LOG,
				(errmsg("malachi writer: preparing spare segment files again")));
	else
		ereport(LOG,
				(errmsg("malachi writer: not preparing spare segment files: " UINT64_FORMAT " bytes free, " UINT64_FORMAT " needed",
						free_bytes, needed),
				 errdetail("A spare is filled only while the file system keeps its size again and 1%% of its space free once it is complete."),
				 errhint("New segments grow their files meanwhile. Free space where malachi.data_directory lives.")));
	return room;
}

/*
 * writer_keep_spares
 *		Advance the spare file being filled by one chunk, or start one when
 *		fewer than malachi.spare_segments are ready (counted at most once a
 *		second).  Returns true when there is more to do right away.  A
 *		failure (a full disk, say) is logged and retried a minute later.
 */
static bool
writer_keep_spares(SpareFill *fill, TimestampTz *next_count)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool more = false;

	PG_TRY();
	{
		if (fill->fd >= 0)
		{
			if (fill->done >= fill->size ||
				writer_spare_room(fill->size, fill->done))
				(void) SegmentSpareStep(fill);
			else
				SegmentSpareDiscard(fill);
			more = fill->fd >= 0;
		}
		else if (malachi_spare_segments > 0 &&
				 GetCurrentTimestamp() >= *next_count)
		{
			*next_count = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
			if (SegmentSpareCount() < malachi_spare_segments &&
				writer_spare_room((uint64) malachi_segment_max_bytes, 0))
			{
				SegmentSpareBegin(fill, (uint64) malachi_segment_max_bytes);
				more = true;
			}
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		/* a spare begun goes (the steps that fail remove it themselves) */
		if (fill->fd >= 0)
			SegmentSpareDiscard(fill);
		*next_count = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60000);
		more = false;
	}
	PG_END_TRY();
	return more;
}

/*
 * writer_recycle
 *		Make spares of deleted segments' files (segfile.c): start waiting
 *		for the recycle- files there are (looking at most every
 *		RECYCLE_SCAN_MS: the loop turns once per chunk while it fills a
 *		spare), and once no process can hold them open, or after
 *		RECYCLE_GIVE_UP_MS, handle them a few at a time.  Returns how soon
 *		the caller should call again: 0 while files are being handled (it
 *		serves requests in between), and on the turn the last is handled
 *		(a request posted while a pause point held the worker lost its
 *		wake-up); RECYCLE_SCAN_MS while a wait is on, or after an error;
 *		-1 when there is nothing to do.
 */
static long
writer_recycle(RecycleWait *wait)
{
	static TimestampTz next_scan = 0;
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool handled = false;

	PG_TRY();
	{
		TimestampTz now = GetCurrentTimestamp();
		bool		give_up = false;
		bool		go;

		if (wait->names == NIL && now >= next_scan)
		{
			next_scan = TimestampTzPlusMilliseconds(now, RECYCLE_SCAN_MS);
			(void) SegmentRecycleTake(wait);
		}
		go = wait->finishing;
		if (!go && wait->names != NIL)
		{
			give_up = TimestampDifferenceExceeds(wait->since, now,
												 RECYCLE_GIVE_UP_MS);
			if (give_up)
				ereport(LOG,
						(errmsg("malachi: removing %d deleted segment file(s) instead of keeping them as spares",
								list_length(wait->names)),
						 errdetail("A process kept segment files open for more than %d seconds after they were deleted.",
								   RECYCLE_GIVE_UP_MS / 1000)));
			go = give_up || SegmentRecycleReady(wait);
		}
		if (go)
		{
			/* give_up counts at the first call only */
			(void) SegmentRecycleFinish(wait, give_up);
			handled = true;
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
	}
	PG_END_TRY();
	if (handled)
		return 0;
	return wait->names == NIL ? -1 : RECYCLE_SCAN_MS;
}

/*
 * Unpublish the worker's latch when it exits.  A head it was creating is
 * given up too: its transaction, still open, is aborted after this (in
 * ShutdownPostgres, registered before), so its file is an orphan now.
 * Left set by a FATAL exit (which skips the error handling that clears
 * it), the orphan step would spare that file until the next head open.
 */
static void
writer_detach(int code, Datum arg)
{
	SpinLockAcquire(&writer_shared->mutex);
	writer_shared->worker_latch = NULL;
	SpinLockRelease(&writer_shared->mutex);
	pg_atomic_write_u64(&writer_shared->creating, 0);
}

/*
 * malachi_writer_main
 *		Entry point of the writer worker: serve requests until SIGTERM.
 */
void
malachi_writer_main(Datum main_arg)
{
	MemoryContext errcxt;
	SpareFill	fill;
	RecycleWait recycle;
	TimestampTz next_count = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	WorkerConnect();

	errcxt = AllocSetContextCreate(TopMemoryContext, "malachi writer errors",
								   ALLOCSET_SMALL_SIZES);

	memset(&fill, 0, sizeof(fill));
	memset(&recycle, 0, sizeof(recycle));
	fill.fd = -1;
	SegmentSpareCleanup();
	before_shmem_exit(writer_detach, (Datum) 0);
	SpinLockAcquire(&writer_shared->mutex);
	writer_shared->worker_latch = MyLatch;
	SpinLockRelease(&writer_shared->mutex);
	pgstat_report_activity(STATE_IDLE, NULL);

	for (;;)
	{
		long		timeout;
		bool		served;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		served = writer_serve_pending(errcxt);
		MemoryContextReset(errcxt);
		timeout = writer_recycle(&recycle);
		if (timeout < 0)
			timeout = 1000;
		if (writer_keep_spares(&fill, &next_count) || served)
			timeout = 0;
		if (timeout > 0)
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 timeout, PG_WAIT_EXTENSION);
	}
}
