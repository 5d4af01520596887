/*-------------------------------------------------------------------------
 *
 * append.c
 *	  Shared-memory append state of active segments: offsets, edges, fence.
 *
 * Each segment this node appends to has a slot in a fixed table sized by
 * malachi.max_active_segments.  An append reserves its offsets and its file
 * region under the slot's spinlock, writes outside it, and is acknowledged
 * only when every earlier region is written and fdatasync'd.  One
 * fdatasync acknowledges every batch written before it (group commit
 * across backends): whoever finds no sync running becomes the syncer for
 * everything written so far, the others sleep on the slot's condition
 * variable.
 *
 * The fence latch: once set, no reservation succeeds.  Fencing waits for
 * the regions in flight, writes the seal trailer at the written edge and
 * syncs it, and answers that end offset and byte size; the trailer makes
 * the fence survive restarts, and a fence is answered the same way however
 * often it is asked.
 *
 * A slot is loaded once per server start, by whoever first needs the
 * segment: the loader scans the file from the last point of the head's
 * index file (segindex.c; else from the start), truncates a torn tail
 * (and anything else past the data, unless the writer created the head in
 * this server's life), and seeds the next offset from what the file holds
 * (recovery, DESIGN.md section 4).  The sweeper saves that index whenever it grew by a step
 * (SWEEP_INDEX_ADVANCE), up to the head's settled prefix: every batch before it durable, and immediate, committed
 * (its commit record flushed) or void with its flag on disk, so that
 * recovery has nothing to decide before the point.
 *
 * Rules (locks):
 * - AppendShared.lock (LWLock) protects the assignment of slots: the
 *   segment_id and state of every slot.  Held exclusively to take or free a
 *   slot, shared to look one up; never held across I/O.  segment_id is
 *   also changed only under the slot's spinlock, so that code holding only
 *   the spinlock can check that a slot still holds its segment.
 * - A slot number is only a hint: slots are reused once their segment is
 *   sealed (released, or when no other slot is left, durably fenced and
 *   idle: append_reclaimable).  Every user re-checks segment_id under the
 *   spinlock, and an appender pins the slot from its reservation to its
 *   acknowledgement, a fence from its latch to its answer, so a slot is
 *   never reused under an append or a trailer in flight (AppendRelease of
 *   a pinned slot only marks it; the last unpin frees it).  A backend that
 *   exits through FATAL mid-append (terminated while it waits) skips its
 *   PG_CATCH blocks: append_exit fails the region it was writing or the
 *   fence it was writing and drops its pins.
 * - AppendSlot.mutex (spinlock) protects every other field of its slot.
 *   Held for a few instructions at a time, never across I/O or a sleep.
 * - AppendSlot.cv is broadcast whenever written, synced, visible, the
 *   in-flight list, the fence or the state change; waiters re-check under
 *   the mutex.
 * - Edges only grow: reserved >= written >= synced, and
 *   visible_offset <= written_offset.  A reader never sees past
 *   visible_offset, so it never sees what a crash could take away.
 * - Transactional batches (appended at pre-commit, stamped with the
 *   transaction id) are in doubt until the commit callback marks them
 *   committed or the abort callback marks them void; visible_offset never
 *   passes the first batch in doubt, so readers see nothing before its
 *   transaction committed.  Readers skip void batches (their offsets are
 *   burned).  A void mark is made durable (the batch's VOID flag written
 *   and synced) by the next appender that finds the list half full, by
 *   the fence, or by recovery, which resolves batches left in doubt by a
 *   crash from the transaction status.  Callbacks only change shared
 *   memory: nothing that can fail runs after the commit record.
 * - A fence waits until no batch of the segment is in doubt, so a sealed
 *   segment never needs the commit log again.
 * - A write that fails fences the segment at the written edge before it:
 *   regions reserved after it are never acknowledged (their appenders get
 *   "sealed" and retry on the next head), so the file never has a gap.
 * - Direct I/O (malachi.direct_io, off by default): copying a large batch
 *   into the page cache costs CPU (on this project's machines up to 47 %
 *   of the server's with 4 producers of 1 MiB batches), but what it leaves
 *   in the cache is what tailing consumers read: with direct I/O they read
 *   from disk (4 consumers of fresh data: 290,000-306,000 records/s
 *   instead of 444,000-495,000), while produce gained about 12 % with 1
 *   producer and nothing measurable with 4.  With the setting on, a batch
 *   of APPEND_DIRECT_MIN bytes or more gets a region of whole APPEND_DIRECT_ALIGN blocks: a filler from the reserved
 *   edge up to the next block boundary (written through the page cache,
 *   like every small write), the batch, and a filler after it up to the
 *   next boundary, both written at once with O_DIRECT from the caller's
 *   aligned buffer.  The region is decided at reservation, the write
 *   method is not: a backend that cannot write directly writes the same
 *   bytes through the page cache.  Buffered writes never touch a block of
 *   an aligned region while it is being written (regions are disjoint and
 *   a filler is never shorter than a batch header), so the page cache and
 *   direct writes cannot undo each other; the kernel drops cached pages of
 *   a range it writes directly.  That holds where a page of the page cache
 *   is no larger than a block: with larger pages (64 kB on some arm64
 *   kernels) a buffered write next to an aligned region would share a page
 *   with it, so there a backend gives every batch an unaligned region and
 *   writes it through the page cache (append_direct_allowed).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/message.h"
#include "storage/condition_variable.h"
#include "storage/procarray.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "append.h"
#include "codec.h"
#include "errors.h"
#include "inject.h"
#include "segfile.h"
#include "segindex.h"
#include "settings.h"
#include "util.h"

/* Regions a slot can have in flight at once */
#define APPEND_MAX_INFLIGHT		64

/* New heads remembered as never loaded (AppendShared.fresh) */
#define APPEND_FRESH_HEADS		256

/*
 * How long a reader at the end of a fenced head waits before it looks
 * again: the range goes on in a next head once the seal is recorded.
 */
#define APPEND_FENCED_POLL_MS	10


typedef enum AppendSlotState
{
	SLOT_FREE,
	SLOT_LOADING,				/* a backend is recovering the segment */
	SLOT_READY,
	SLOT_RETIRED				/* sealed and released: free for reuse */
} AppendSlotState;

/* One reserved file region, in reservation order. */
typedef struct AppendRegion
{
	uint64		end;			/* file position after the region */
	int64		end_offset;		/* offset after its records */
	bool		done;			/* written */
	bool		failed;			/* the write failed */
} AppendRegion;

/*
 * A batch of a producing transaction, from its reservation until its fate
 * is durable: in doubt (appended at pre-commit, not yet committed), then
 * committed, or void (aborted) until its VOID flag is on disk.
 */
typedef enum AppendTxnState
{
	TXN_IN_DOUBT,
	TXN_COMMITTED,
	TXN_VOID
} AppendTxnState;

typedef struct AppendTxn
{
	int64		start_offset;	/* its first offset */
	int64		end_offset;		/* one past its last offset (its identity) */
	uint64		pos;			/* its file position */
	AppendTxnState state;
	bool		persisted;		/* VOID: the flag is written and synced */
} AppendTxn;

typedef struct AppendSlot
{
	/* protected by AppendShared.lock */
	int64		segment_id;		/* 0 when free */
	AppendSlotState state;

	/* protected by mutex */
	slock_t		mutex;
	int64		base_offset;	/* the segment's first offset (set at load) */
	int64		next_offset;	/* next offset to reserve */
	uint64		reserved;		/* position after the last reserved region */
	uint64		written;		/* every byte below is written */
	int64		written_offset; /* offsets below are written */
	uint64		synced;			/* every byte below is durable */
	int64		durable_offset; /* offsets below are written and durable */
	int64		visible_offset; /* readable: durable and before any batch in
								 * doubt */
	bool		syncing;		/* a backend is in fdatasync */
	bool		fenced;			/* the fence latch: no more reservations */
	bool		fencing;		/* a backend is writing the trailer */
	bool		fence_durable;	/* the trailer is on disk */
	int64		fenced_end;		/* the fence's answer */
	uint64		fenced_size;
	TimestampTz last_append;	/* when the last append was acknowledged */
	uint64		index_saved;	/* the sweeper saved (or tried to save) the
								 * head's index up to here (AppendSafePoints) */
	int			pins;			/* appenders between reservation and ack,
								 * and a fence writing its trailer */
	bool		release_pending;	/* free the slot when pins drops to 0, or
									 * (released while LOADING) once loaded */
	int			first;			/* index of the oldest region in flight */
	int			ninflight;		/* regions in flight */
	AppendRegion inflight[APPEND_MAX_INFLIGHT];
	bool		voiding;		/* a backend is writing VOID flags */
	int			txn_first;		/* index of the oldest transactional batch */
	int			ntxn;			/* transactional batches not yet settled */
	AppendTxn	txn[APPEND_MAX_TXN];

	ConditionVariable cv;		/* see the rules above */
} AppendSlot;

typedef struct AppendShared
{
	LWLock	   *lock;			/* protects slot assignment, and fresh */

	/*
	 * Heads the writer created since the server started and no slot has
	 * loaded yet (AppendNoteFresh), in a ring; 0 is an empty entry.  The
	 * first load of one of them cuts nothing, and syncs nothing when it
	 * finds the head empty (append_recover).  An entry the ring overwrote
	 * only costs that head its preallocated space and a sync.
	 */
	int64		fresh[APPEND_FRESH_HEADS];
	int			fresh_next;		/* the entry to write next */
	int			nslots;
	AppendSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} AppendShared;

static AppendShared *append_shared = NULL;

/*
 * What this backend holds in the slots, for an exit that skips PG_CATCH (a
 * FATAL: pg_terminate_backend, the postmaster's shutdown) to give back in
 * append_exit.  Backend-local.
 */
static int *held_pins = NULL;	/* a slot number per pin held */
static int	nheld_pins = 0;
static int	held_pins_cap = 0;
static int	writing_slotno = -1;	/* the region being written: its slot, */
static int	writing_region = -1;	/* its entry in the in-flight list, */
static int64 writing_end_offset = 0;	/* and, if transactional, its end */
static bool writing_transactional = false;
static int	fencing_slotno = -1;	/* the slot whose trailer this backend
									 * is writing */
static AppendSlot *loading_slot = NULL;	/* the slot this backend is loading */
static bool append_exit_registered = false;

PG_FUNCTION_INFO_V1(malachi_head_state);
PG_FUNCTION_INFO_V1(malachi_init_storage);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void append_shmem_request(void);
static void append_shmem_startup(void);
static AppendSlot *append_slot(int slotno);
static void append_complete(AppendSlot *slot, int i, bool failed);
static void append_void_failed(AppendSlot *slot, int64 end_offset);
static void append_unpin(int slotno);
static void append_load_failed(AppendSlot *slot);
static void append_fence_failed(AppendSlot *slot);
static void append_persist_voids(AppendSlot *slot, File file, int64 segment_id);

/*---- setup ----*/

/* Shared memory needed. */
static Size
append_shmem_size(void)
{
	return add_size(offsetof(AppendShared, slots),
					mul_size(malachi_max_active_segments, sizeof(AppendSlot)));
}

/*
 * AppendInit
 *		Ask for the slot table.  Called from _PG_init while
 *		shared_preload_libraries are loaded (after SettingsInit).
 */
void
AppendInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = append_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = append_shmem_startup;
}

/* Reserve the slot table and its lock. */
static void
append_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(append_shmem_size());
	RequestNamedLWLockTranche("malachi append", 1);
}

/* Find or create the slot table. */
static void
append_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	append_shared = ShmemInitStruct("malachi append", append_shmem_size(),
									&found);
	if (!found)
	{
		append_shared->lock = &(GetNamedLWLockTranche("malachi append"))->lock;
		memset(append_shared->fresh, 0, sizeof(append_shared->fresh));
		append_shared->fresh_next = 0;
		append_shared->nslots = malachi_max_active_segments;
		for (i = 0; i < append_shared->nslots; i++)
		{
			AppendSlot *slot = &append_shared->slots[i];

			memset(slot, 0, sizeof(*slot));
			slot->state = SLOT_FREE;
			SpinLockInit(&slot->mutex);
			ConditionVariableInit(&slot->cv);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*---- slots ----*/

/* The slot of a segment, or -1; the caller holds the lock. */
static int
append_find(int64 segment_id)
{
	int			i;

	for (i = 0; i < append_shared->nslots; i++)
		if (append_shared->slots[i].segment_id == segment_id)
			return i;
	return -1;
}

/*
 * append_set_segment
 *		Give a slot a segment (0: none).  Caller holds the lock exclusively;
 *		the spinlock makes the change visible to spinlock-only checks.
 */
static void
append_set_segment(AppendSlot *slot, int64 segment_id)
{
	SpinLockAcquire(&slot->mutex);
	slot->segment_id = segment_id;
	slot->pins = 0;
	slot->release_pending = false;
	SpinLockRelease(&slot->mutex);
}

/*
 * Free a slot whose segment is sealed and recorded, or dropped; caller holds
 * the lock.  A slot with a durable fence is retired rather than emptied: it
 * keeps its segment and fence until a new segment needs the slot, so that
 * a backend whose cached head is that segment learns of the seal from the
 * slot instead of reloading the whole file to find its trailer.
 */
static void
append_free_locked(AppendSlot *slot)
{
	bool		pinned;
	bool		retire;

	SpinLockAcquire(&slot->mutex);
	pinned = slot->pins > 0;
	retire = slot->fenced && slot->fence_durable;
	if (pinned)
		slot->release_pending = true;
	else
	{
		if (!retire)
			slot->segment_id = 0;
		slot->release_pending = false;
	}
	SpinLockRelease(&slot->mutex);
	if (!pinned)
		slot->state = retire ? SLOT_RETIRED : SLOT_FREE;
}

/*
 * append_exit
 *		At exit, give back what a FATAL error left held: a slot being
 *		loaded, a fence being written, the region being written (failed:
 *		the segment is fenced before it, as after any failed write; a
 *		transactional batch there is void at once) and every pin.  A transactional batch that was
 *		written is voided by the transaction's abort, which runs after
 *		this.
 */
static void
append_exit(int code, Datum arg)
{
	ConditionVariableCancelSleep();
	if (loading_slot != NULL)
		append_load_failed(loading_slot);
	if (writing_slotno >= 0)
	{
		AppendSlot *slot = append_slot(writing_slotno);

		SpinLockAcquire(&slot->mutex);
		append_complete(slot, writing_region, true);
		SpinLockRelease(&slot->mutex);
		ConditionVariableBroadcast(&slot->cv);
		if (writing_transactional)
			append_void_failed(slot, writing_end_offset);
		writing_slotno = -1;
	}
	if (fencing_slotno >= 0)
		append_fence_failed(append_slot(fencing_slotno));
	while (nheld_pins > 0)
		append_unpin(held_pins[nheld_pins - 1]);
}

/* Have append_exit run when this backend exits. */
static void
append_register_exit(void)
{
	if (!append_exit_registered)
	{
		before_shmem_exit(append_exit, (Datum) 0);
		append_exit_registered = true;
	}
}

/*
 * Make room to note one more pin, before taking it (so that nothing can
 * fail between taking and noting it).
 */
static void
append_prepare_pin(void)
{
	append_register_exit();
	if (nheld_pins == held_pins_cap)
		held_pins = GrowArray(held_pins, &held_pins_cap, sizeof(int), 8,
							  TopMemoryContext);
}

/* Drop an appender's pin; the last one frees a slot released meanwhile. */
static void
append_unpin(int slotno)
{
	AppendSlot *slot = append_slot(slotno);
	bool		free_it;
	int64		segment_id;
	int			k;

	for (k = nheld_pins - 1; k >= 0; k--)
		if (held_pins[k] == slotno)
		{
			held_pins[k] = held_pins[--nheld_pins];
			break;
		}

	SpinLockAcquire(&slot->mutex);
	slot->pins--;
	free_it = slot->pins == 0 && slot->release_pending;
	segment_id = slot->segment_id;
	SpinLockRelease(&slot->mutex);
	if (free_it)
	{
		/*
		 * Between the spinlock and the lock, another backend may have
		 * freed the slot (a second release of the segment) and taken it
		 * for another segment, which it may be loading: free it only if
		 * it still holds this segment, loaded, unpinned and released.
		 */
		LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
		SpinLockAcquire(&slot->mutex);
		free_it = slot->segment_id == segment_id && slot->pins == 0 &&
			slot->release_pending;
		SpinLockRelease(&slot->mutex);
		if (free_it && slot->state == SLOT_READY)
			append_free_locked(slot);
		LWLockRelease(append_shared->lock);
		ConditionVariableBroadcast(&slot->cv);
	}
}

/*
 * The oldest transaction whose status the commit log still holds, as a
 * full id (it lies at most 2^31 before the next id).  Caller holds
 * XactTruncationLock.
 */
static FullTransactionId
append_oldest_clog_fxid(void)
{
	FullTransactionId next = ReadNextFullTransactionId();
	TransactionId oldest = ShmemVariableCache->oldestClogXid;
	uint32		epoch = EpochFromFullTransactionId(next);

	if (oldest > XidFromFullTransactionId(next) && epoch > 0)
		epoch--;
	return FullTransactionIdFromEpochAndXid(epoch, oldest);
}

/*
 * append_xid_committed
 *		Did the transaction that produced a batch commit?  Asked only of
 *		batches found in a file at load time, whose transactions are over
 *		(a batch's transaction id is in durable WAL before the batch is
 *		written, so recovery never hands it to another transaction).
 *		A transaction older than the commit log's horizon settled long ago:
 *		had it aborted, its VOID flag would be on disk (void marks are
 *		persisted by the sweeper's next pass, the fence or the first load
 *		after a crash, long before the horizon passes them).
 */
static bool
append_xid_committed(uint64 fxid_u64, int64 segment_id)
{
	FullTransactionId fxid = FullTransactionIdFromU64(fxid_u64);
	TransactionId xid = XidFromFullTransactionId(fxid);
	bool		committed;

	if (FullTransactionIdFollowsOrEquals(fxid, ReadNextFullTransactionId()))
	{
		/*
		 * A transaction's id is in durable WAL before its first batch is
		 * written (produce_flush), and a committed one's commit record moves
		 * the next id past it.  An id the server does not know never
		 * committed here.
		 */
		ereport(WARNING,
				(errmsg("segment " INT64_FORMAT " holds a batch of transaction " UINT64_FORMAT ", which this server does not know",
						segment_id, fxid_u64),
				 errdetail("The batch is marked void: its transaction cannot have committed.")));
		return false;
	}
	/*
	 * Compared as full ids: a batch more than 2^31 transactions old would
	 * wrap a 32-bit comparison and be judged by another transaction's
	 * status.  The lock keeps the commit log from being truncated between
	 * the horizon check and the lookup (as pg_xact_status does).
	 */
	LWLockAcquire(XactTruncationLock, LW_SHARED);
	if (FullTransactionIdPrecedes(fxid, append_oldest_clog_fxid()))
		committed = true;
	else if (TransactionIdIsInProgress(xid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("segment " INT64_FORMAT " holds a batch of transaction %u, which is still in progress",
						segment_id, xid)));
	else
		committed = TransactionIdDidCommit(xid);
	LWLockRelease(XactTruncationLock);
	return committed;
}

/*
 * append_resolve_recovered
 *		Mark void, durably, every batch in the file whose transaction did not
 *		commit (it was in doubt when the server stopped, or aborted before
 *		its void mark reached the disk).
 */
static void
append_resolve_recovered(File file, int64 segment_id, SegScan *scan)
{
	int			nvoid = 0;
	int			k;

	for (k = 0; k < scan->ntxn; k++)
	{
		if (append_xid_committed(scan->txns[k].xid, segment_id))
			continue;
		SegmentMarkVoid(file, segment_id, scan->txns[k].pos);
		nvoid++;
	}
	if (nvoid > 0)
	{
		SegmentSync(file, segment_id);
		ereport(LOG,
				(errmsg("malachi: marked %d batch(es) of segment " INT64_FORMAT " void: their transactions did not commit",
						nvoid, segment_id)));
	}
}

/*
 * AppendNoteFresh
 *		Remember a head whose file the writer just created (SegmentCreate):
 *		nothing but that head's own appends, from this server's life, will
 *		ever have written into it.  A note left by a head whose row never
 *		committed is harmless: its id is not given out again.
 */
void
AppendNoteFresh(int64 segment_id)
{
	LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
	append_shared->fresh[append_shared->fresh_next] = segment_id;
	append_shared->fresh_next = (append_shared->fresh_next + 1) % APPEND_FRESH_HEADS;
	LWLockRelease(append_shared->lock);
}

/* Was segment_id noted fresh?  Forgets it: only its first load is. */
static bool
append_take_fresh(int64 segment_id)
{
	bool		found = false;
	int			i;

	LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < APPEND_FRESH_HEADS; i++)
		if (append_shared->fresh[i] == segment_id)
		{
			append_shared->fresh[i] = 0;
			found = true;
			break;
		}
	LWLockRelease(append_shared->lock);
	return found;
}

/*
 * append_recover
 *		Load a slot from the segment's file: scan it, truncate a torn tail,
 *		and seed the edges and the next offset from what it holds.  A file
 *		with a seal trailer loads fenced, with the trailer's answer.
 */
static void
append_recover(AppendSlot *slot, int64 segment_id, int64 base_offset)
{
	File		file;
	SegScan		scan;
	SegIndexFile index;
	CodecTrailer trailer;
	bool		indexed;
	bool		from_index = false;
	bool		fresh;

	/*
	 * By its name, not through a File this backend may still hold open: a
	 * segment whose topic was dropped has lost its name before its slot
	 * was released (sweep.c), and loading it again would take a slot that
	 * no release ever frees.
	 */
	SegmentCheckExists(segment_id);
	fresh = append_take_fresh(segment_id);
	file = SegmentOpen(segment_id);
	InjectWait(INJECT_APPEND_LOADING);
	indexed = SegmentIndexLoad(segment_id, CurrentMemoryContext, &index);
	/* a head's own index only (segindex.c says why) */
	if (indexed && !index.complete &&
		index.points[index.npoints - 1].base_offset >= base_offset)
	{
		/* the batch at the last point: everything before it is settled */
		SegIndexPoint *last = &index.points[index.npoints - 1];

		SegmentScan(file, segment_id, last->pos, last->base_offset, &scan);
		from_index = scan.data_end > last->pos;
		if (!from_index)
			ereport(LOG,
					(errmsg("malachi: the index of segment " INT64_FORMAT " does not match its file; scanning the whole file",
							segment_id)));
	}
	if (!from_index)
	{
		SegmentScan(file, segment_id, 0, base_offset, &scan);
		/*
		 * A head's index that did not match, or any index past the data
		 * found, would mislead readers and the next restart.
		 */
		if (indexed && (!index.complete ||
						index.points[index.npoints - 1].pos >= scan.data_end))
			SegmentIndexRemove(segment_id);
	}

	/*
	 * A file whose first batch has another format version was written by
	 * another build: refuse it rather than cut it as a torn tail.  A torn
	 * or recycled tail never starts that way at position 0: a batch's
	 * magic and version are written whole or not at all, and a recycled
	 * file's first block is zeroed before a head takes it over
	 * (segment_recycle_prepare, or SegmentCreate for a spare an earlier
	 * build recycled).
	 */
	if (scan.torn && scan.data_end == 0 && scan.tail_error == CODEC_BAD_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("segment " INT64_FORMAT " was written in another format version", segment_id),
				 errdetail("Its first batch is not of format version %d, the one this build reads.",
						   CODEC_VERSION),
				 errhint("Read it with the build that wrote it; this build leaves the file as it is.")));
	/*
	 * A scan stopped before a sealed file's trailer found damage, not a
	 * torn tail or the end of the data: a fence writes and syncs
	 * everything before its trailer.  So whether a batch did not check or
	 * its header read as zeros (a lost block), cutting there would drop
	 * acknowledged batches and hand their offsets out again; the segment
	 * loads fenced at its trailer, and reads of the damaged batch fail
	 * with data_corrupted.  The trailer names its segment, so a recycled
	 * file's old one never counts.
	 */
	if (!scan.sealed && SegmentEndTrailer(file, segment_id, &trailer) &&
		trailer.byte_size > (int64) scan.data_end &&
		trailer.end_offset >= scan.end_offset)
	{
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("segment " INT64_FORMAT " is damaged at position " UINT64_FORMAT " (offset " INT64_FORMAT ")",
						segment_id, scan.data_end, scan.end_offset),
				 errdetail("The batch there does not check: %s.  The file ends in a valid seal trailer, so it is kept whole, sealed at offset " INT64_FORMAT ".",
						   scan.torn ? CodecResultString(scan.tail_error) :
						   "its header is all zeros", trailer.end_offset),
				 errhint("Reads of the damaged batch fail; restore the file from a copy, or delete the segment with malachi.delete_segment().")));
		scan.torn = false;
		scan.sealed = true;
		scan.trailer = trailer;
		scan.data_end = (uint64) trailer.byte_size;
		scan.end_offset = trailer.end_offset;
	}
	append_resolve_recovered(file, segment_id, &scan);
	if (scan.torn)
	{
		ereport(LOG,
				(errmsg("malachi: truncating torn tail of segment " INT64_FORMAT " at position " UINT64_FORMAT " (offset " INT64_FORMAT ")",
						segment_id, scan.data_end, scan.end_offset),
				 errdetail("The scan stopped at: %s.",
						   CodecResultString(scan.tail_error))));
		SegmentTruncate(file, segment_id, scan.data_end);
	}
	else if (!scan.sealed && !fresh)
	{
		/*
		 * A scan that stopped at a zero block does not prove that nothing
		 * follows it.  A crash can leave a region unwritten (zeros) while
		 * regions reserved after it were written: batches never
		 * acknowledged, since nothing past an unwritten region is.  Left
		 * in the file, one of them would be taken for the continuation
		 * once later appends happen to end exactly where it begins (the
		 * next offset equal to its base), and the next start would serve a
		 * record that this one dropped, behind newer ones.  Cutting the
		 * file where its data ends costs the rest of a spare's
		 * preallocated space; a head the writer created in this server's
		 * life and loads for the first time has nothing written past its
		 * data (no process that wrote into it can be gone), so it keeps
		 * that space.
		 */
		if (SegmentSize(file, segment_id) > scan.data_end)
		{
			ereport(DEBUG1,
					(errmsg_internal("malachi: cutting segment " INT64_FORMAT " at position " UINT64_FORMAT ", where its data ends",
									 segment_id, scan.data_end)));
			SegmentTruncate(file, segment_id, scan.data_end);
		}
	}

	/*
	 * The scan read through the page cache: what it found may not be on
	 * the disk yet (a server restarted cleanly after a producer died
	 * between its write and its sync, or a data directory outside PGDATA,
	 * which PostgreSQL's own sync at crash recovery does not reach).
	 * Readers are about to see it.  A head the writer created in this
	 * server's life, loaded for the first time and found empty, has
	 * nothing to sync: its file was synced when it was made (SegmentCreate,
	 * or the spare it took over), and nothing was written to it since.
	 * That spares each roll a sync.
	 */
	if (!(fresh && scan.data_end == 0 && !scan.torn && !scan.sealed))
		SegmentSync(file, segment_id);

	SpinLockAcquire(&slot->mutex);
	slot->base_offset = base_offset;
	slot->next_offset = scan.end_offset;
	slot->reserved = slot->written = slot->synced = scan.data_end;
	slot->written_offset = slot->durable_offset = scan.end_offset;
	slot->visible_offset = scan.end_offset;
	slot->voiding = false;
	slot->txn_first = slot->ntxn = 0;
	slot->syncing = slot->fencing = false;
	slot->last_append = 0;
	slot->index_saved = from_index ? index.points[index.npoints - 1].pos : 0;
	slot->first = slot->ninflight = 0;
	slot->fenced = slot->fence_durable = scan.sealed;
	slot->fenced_end = scan.sealed ? scan.trailer.end_offset : 0;
	slot->fenced_size = scan.sealed ? (uint64) scan.trailer.byte_size : 0;
	SpinLockRelease(&slot->mutex);
}

/* Give back a slot whose load failed (or whose loader exited). */
static void
append_load_failed(AppendSlot *slot)
{
	loading_slot = NULL;
	LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
	append_set_segment(slot, 0);
	slot->state = SLOT_FREE;
	LWLockRelease(append_shared->lock);
	ConditionVariableBroadcast(&slot->cv);
}

/*
 * append_load
 *		Recover a slot this backend took (state LOADING) and publish it; on
 *		failure give the slot back, so that the next user tries again.
 */
static void
append_load(AppendSlot *slot, int64 segment_id, int64 base_offset)
{
	PG_TRY();
	{
		append_recover(slot, segment_id, base_offset);
	}
	PG_CATCH();
	{
		append_load_failed(slot);
		PG_RE_THROW();
	}
	PG_END_TRY();
	loading_slot = NULL;

	LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
	slot->state = SLOT_READY;
	/* sealed or dropped while it loaded: nobody releases it again */
	if (slot->release_pending)
		append_free_locked(slot);
	LWLockRelease(append_shared->lock);
	ConditionVariableBroadcast(&slot->cv);
}

/*
 * append_reclaimable
 *		Can a loaded slot be taken for another segment when no slot is free
 *		or retired?  A durably fenced one nobody is using can: no append can
 *		land in it, and whoever needs it again reloads it from its file and
 *		its trailer.  Such a slot is left READY when a load finds a segment
 *		sealed in its file, typically by a reader whose snapshot still shows
 *		the segment as a head; no seal will release it again.  The caller
 *		holds the lock exclusively.
 */
static bool
append_reclaimable(AppendSlot *slot)
{
	bool		idle;

	if (slot->state != SLOT_READY)
		return false;
	SpinLockAcquire(&slot->mutex);
	idle = slot->fenced && slot->fence_durable && !slot->fencing &&
		slot->pins == 0 && slot->ninflight == 0 && slot->ntxn == 0;
	SpinLockRelease(&slot->mutex);
	return idle;
}

/*
 * AppendLookup
 *		The slot of a segment if one holds it loaded, else -1; never loads.
 */
int
AppendLookup(int64 segment_id)
{
	int			slotno;

	LWLockAcquire(append_shared->lock, LW_SHARED);
	slotno = append_find(segment_id);
	if (slotno >= 0 && append_shared->slots[slotno].state != SLOT_READY &&
		append_shared->slots[slotno].state != SLOT_RETIRED)
		slotno = -1;
	LWLockRelease(append_shared->lock);
	return slotno;
}

/*
 * AppendAttach
 *		The slot of a segment this node appends to, loading it (recovery)
 *		if this is its first use since the server started.  Slots are taken
 *		free first, then retired, then durably fenced and idle.
 */
int
AppendAttach(int64 segment_id, int64 base_offset)
{
	AppendSlot *slot;
	int			slotno;
	int			i;

	for (;;)
	{
		LWLockAcquire(append_shared->lock, LW_SHARED);
		slotno = append_find(segment_id);
		if (slotno >= 0 && (append_shared->slots[slotno].state == SLOT_READY ||
							append_shared->slots[slotno].state == SLOT_RETIRED))
		{
			LWLockRelease(append_shared->lock);
			return slotno;
		}
		LWLockRelease(append_shared->lock);

		if (slotno >= 0)
		{
			/* another backend is loading it: wait for that */
			slot = &append_shared->slots[slotno];
			ConditionVariablePrepareToSleep(&slot->cv);
			while (slot->state == SLOT_LOADING && slot->segment_id == segment_id)
				ConditionVariableTimedSleep(&slot->cv, 100, PG_WAIT_EXTENSION);
			ConditionVariableCancelSleep();
			continue;
		}

		/* take a free slot and load it */
		append_register_exit();
		LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
		if (append_find(segment_id) >= 0)
		{
			LWLockRelease(append_shared->lock);
			continue;
		}
		for (i = 0; i < append_shared->nslots; i++)
			if (append_shared->slots[i].state == SLOT_FREE)
				break;
		if (i == append_shared->nslots)
			for (i = 0; i < append_shared->nslots; i++)
				if (append_shared->slots[i].state == SLOT_RETIRED)
					break;
		if (i == append_shared->nslots)
			for (i = 0; i < append_shared->nslots; i++)
				if (append_reclaimable(&append_shared->slots[i]))
					break;
		if (i == append_shared->nslots)
		{
			LWLockRelease(append_shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many active malachi segments"),
					 errdetail("All %d append slots are in use.", append_shared->nslots),
					 errhint("Raise malachi.max_active_segments and restart the server.")));
		}
		slot = &append_shared->slots[i];
		append_set_segment(slot, segment_id);
		slot->state = SLOT_LOADING;
		loading_slot = slot;
		LWLockRelease(append_shared->lock);

		append_load(slot, segment_id, base_offset);
		return i;
	}
}

/* The slot a hint points at; callers check segment_id under its spinlock. */
static AppendSlot *
append_slot(int slotno)
{
	Assert(slotno >= 0 && slotno < append_shared->nslots);
	return &append_shared->slots[slotno];
}

/* The segment a loaded slot holds; 0 when it holds none or is loading. */
static int64
append_ready_segment(AppendSlot *slot)
{
	int64		segment_id = 0;

	LWLockAcquire(append_shared->lock, LW_SHARED);
	if (slot->state == SLOT_READY)
		segment_id = slot->segment_id;
	LWLockRelease(append_shared->lock);
	return segment_id;
}

/* A segment AppendPersistVoids flags, for SubxactTry. */
typedef struct PersistOne
{
	AppendSlot *slot;
	int64		segment_id;
} PersistOne;

static void
append_persist_one(void *arg)
{
	PersistOne *one = arg;
	File		file = SegmentOpenMissingOk(one->segment_id, true);

	if (file >= 0)				/* else dropped meanwhile: nothing to flag */
		append_persist_voids(one->slot, file, one->segment_id);
}

/*
 * AppendPersistVoids
 *		Flag in its file every void batch of a loaded segment that is void
 *		in memory only (the sweeper, each pass).  Recovery takes a batch
 *		older than the commit log's horizon for committed unless its file
 *		says void (append_xid_committed), so a void must not stay in memory
 *		alone for long; the fence and a full list of batches in doubt flag
 *		them too, but a quiet head may see neither for a long time.
 *
 *		Each segment is flagged in a subtransaction of its own: one whose
 *		file cannot be written (a disk error) is reported as a WARNING and
 *		the others are still flagged.  Returns how many failed, with the
 *		first failure's message in errbuf.
 */
int
AppendPersistVoids(char *errbuf, size_t errlen)
{
	int			failed = 0;
	int			i;

	for (i = 0; i < append_shared->nslots; i++)
	{
		AppendSlot *slot = &append_shared->slots[i];
		int64		segment_id = append_ready_segment(slot);
		bool		any = false;
		PersistOne	one;
		ErrorData  *edata;
		int			k;

		if (segment_id == 0)
			continue;

		SpinLockAcquire(&slot->mutex);
		for (k = 0; slot->segment_id == segment_id && k < slot->ntxn; k++)
		{
			AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

			if (t->state == TXN_VOID && !t->persisted)
				any = true;
		}
		SpinLockRelease(&slot->mutex);
		if (!any)
			continue;
		one.slot = slot;
		one.segment_id = segment_id;
		edata = SubxactTry(append_persist_one, &one);
		if (edata == NULL)
			continue;
		if (failed++ == 0)
			strlcpy(errbuf, edata->message, errlen);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("malachi: could not flag the void batches of segment " INT64_FORMAT,
						segment_id),
				 errdetail("%s", edata->message),
				 errhint("They stay void in memory; the next pass, the segment's fence or its next load flags them.")));
		FreeErrorData(edata);
	}
	return failed;
}

/*
 * AppendSafePoints
 *		The loaded heads whose settled prefix grew by min_advance bytes or
 *		more since their index was last saved: segment, base offset and
 *		the prefix's end (a batch boundary: the synced edge, or the first
 *		transactional batch not yet settled if that comes first).  A
 *		batch's commit counts once its commit record is flushed: the WAL is
 *		flushed here, after the slots are looked at (a commit marks its
 *		batches after its record is inserted).  Fenced heads are left out:
 *		their readers complete the index.  Returns how many, in a palloc'd
 *		array.
 */
int
AppendSafePoints(AppendSafePoint **points, uint64 min_advance)
{
	AppendSafePoint *out = palloc(sizeof(AppendSafePoint) * append_shared->nslots);
	int			n = 0;
	int			i;

	*points = out;
	/* a standby's heads only read; without fsync, synced is not durable */
	if (RecoveryInProgress() || !malachi_fsync)
		return 0;
	for (i = 0; i < append_shared->nslots; i++)
	{
		AppendSlot *slot = &append_shared->slots[i];
		int64		segment_id = append_ready_segment(slot);
		uint64		settled;

		if (segment_id == 0)
			continue;

		SpinLockAcquire(&slot->mutex);
		settled = slot->synced;
		if (slot->ntxn > 0)
			settled = Min(settled, slot->txn[slot->txn_first].pos);
		/* a fenced head's index is the reader's to complete */
		if (slot->segment_id == segment_id && !slot->fenced &&
			settled >= slot->index_saved + min_advance)
		{
			out[n].segment_id = segment_id;
			out[n].base_offset = slot->base_offset;
			out[n].settled = settled;
			n++;
		}
		SpinLockRelease(&slot->mutex);
	}
	/* a record of its own: flushing to GetXLogInsertRecPtr() can fail */
	if (n > 0)
		XLogFlush(LogLogicalMessage("malachi", "", 0, false));
	return n;
}

/*
 * Note that a head's index was saved, or tried, up to settled
 * (AppendSafePoints): it is listed again once it grows past that.
 */
void
AppendSafePointSaved(int64 segment_id, uint64 settled)
{
	int			i;

	for (i = 0; i < append_shared->nslots; i++)
	{
		AppendSlot *slot = &append_shared->slots[i];

		SpinLockAcquire(&slot->mutex);
		if (slot->segment_id == segment_id)
			slot->index_saved = Max(slot->index_saved, settled);
		SpinLockRelease(&slot->mutex);
	}
}

/*
 * AppendRelease
 *		Free a sealed segment's slot (its seal is recorded: readers take its
 *		end from the control plane from now on).  A durably fenced slot is
 *		retired (see append_free_locked); a dropped head's is emptied.  A
 *		slot still loading is freed by its loader once loaded.
 */
void
AppendRelease(int64 segment_id)
{
	int			slotno;

	LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
	slotno = append_find(segment_id);
	if (slotno >= 0 && append_shared->slots[slotno].state == SLOT_READY)
		append_free_locked(&append_shared->slots[slotno]);
	else if (slotno >= 0 && append_shared->slots[slotno].state == SLOT_LOADING)
	{
		AppendSlot *slot = &append_shared->slots[slotno];

		SpinLockAcquire(&slot->mutex);
		slot->release_pending = true;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(append_shared->lock);
}

/*
 * AppendFreeSlots
 *		How many slots are free or retired: what loads can take without
 *		reclaiming a loaded one.  A count of the moment.
 */
int
AppendFreeSlots(void)
{
	int			n = 0;
	int			i;

	LWLockAcquire(append_shared->lock, LW_SHARED);
	for (i = 0; i < append_shared->nslots; i++)
		if (append_shared->slots[i].state == SLOT_FREE ||
			append_shared->slots[i].state == SLOT_RETIRED)
			n++;
	LWLockRelease(append_shared->lock);
	return n;
}

/*---- appending ----*/

/* Is a transactional batch of the slot still in doubt?  Mutex held. */
static bool
append_any_in_doubt(AppendSlot *slot)
{
	int			k;

	for (k = 0; k < slot->ntxn; k++)
		if (slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN].state == TXN_IN_DOUBT)
			return true;
	return false;
}

/* Has an aborted batch of the slot no VOID flag on disk yet?  Mutex held. */
static bool
append_any_unflagged_void(AppendSlot *slot)
{
	int			k;

	for (k = 0; k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		if (t->state == TXN_VOID && !t->persisted)
			return true;
	}
	return false;
}

/*
 * append_refresh_visible
 *		Drop settled transactional batches from the front of the list and
 *		recompute visible_offset: the durable edge, held back by the first
 *		batch in doubt.  Caller holds the mutex.
 */
static void
append_refresh_visible(AppendSlot *slot)
{
	int			k;

	while (slot->ntxn > 0)
	{
		AppendTxn  *t = &slot->txn[slot->txn_first];

		if (t->state == TXN_IN_DOUBT || t->end_offset > slot->durable_offset ||
			(t->state == TXN_VOID && !t->persisted))
			break;
		slot->txn_first = (slot->txn_first + 1) % APPEND_MAX_TXN;
		slot->ntxn--;
	}
	slot->visible_offset = slot->durable_offset;
	for (k = 0; k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		if (t->state == TXN_IN_DOUBT)
		{
			slot->visible_offset = Min(slot->visible_offset, t->start_offset);
			break;
		}
	}
}

/*
 * append_persist_voids
 *		Write and sync the VOID flag of every aborted batch the slot still
 *		tracks, so that they can leave the list.  One backend at a time.
 */
static void
append_persist_voids(AppendSlot *slot, File file, int64 segment_id)
{
	uint64		pos[APPEND_MAX_TXN];
	int64		ends[APPEND_MAX_TXN];
	volatile int n = 0;
	int			k;
	int			j;

	SpinLockAcquire(&slot->mutex);
	if (slot->voiding || slot->fencing || slot->fenced ||
		slot->segment_id != segment_id)
	{
		SpinLockRelease(&slot->mutex);
		return;
	}
	for (k = 0; k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		if (t->state == TXN_VOID && !t->persisted)
		{
			pos[n] = t->pos;
			ends[n] = t->end_offset;
			n++;
		}
	}
	slot->voiding = n > 0;
	SpinLockRelease(&slot->mutex);
	if (n == 0)
		return;

	PG_TRY();
	{
		for (j = 0; j < n; j++)
			SegmentMarkVoid(file, segment_id, pos[j]);
		SegmentSync(file, segment_id);
	}
	PG_CATCH();
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->segment_id == segment_id)
			slot->voiding = false;
		SpinLockRelease(&slot->mutex);
		ConditionVariableBroadcast(&slot->cv);
		PG_RE_THROW();
	}
	PG_END_TRY();

	SpinLockAcquire(&slot->mutex);
	for (k = 0; slot->segment_id == segment_id && k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		for (j = 0; j < n; j++)
			if (t->end_offset == ends[j] && t->state == TXN_VOID)
				t->persisted = true;
	}
	if (slot->segment_id == segment_id)
	{
		slot->voiding = false;
		append_refresh_visible(slot);
	}
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
}

/*
 * append_complete
 *		Mark region i written (or failed) and advance the written edge over
 *		every leading region that is done.  Caller holds the mutex.
 */
static void
append_complete(AppendSlot *slot, int i, bool failed)
{
	int			k;

	slot->inflight[i].done = true;
	slot->inflight[i].failed = failed;
	if (failed)
		slot->fenced = true;	/* nothing after a hole may be acknowledged */
	while (slot->ninflight > 0)
	{
		AppendRegion *r = &slot->inflight[slot->first];

		if (!r->done || r->failed)
			break;
		slot->written = r->end;
		slot->written_offset = r->end_offset;
		if (!malachi_fsync)
		{
			slot->synced = r->end;
			slot->durable_offset = r->end_offset;
		}
		slot->first = (slot->first + 1) % APPEND_MAX_INFLIGHT;
		slot->ninflight--;
	}
	append_refresh_visible(slot);

	/*
	 * Behind a failed region nothing can become written.  Once every region
	 * in flight has finished, drop them all: their appenders see the fence
	 * and an unreached written edge, and answer "sealed".
	 */
	if (slot->ninflight > 0 && slot->inflight[slot->first].failed)
	{
		for (k = 0; k < slot->ninflight; k++)
			if (!slot->inflight[(slot->first + k) % APPEND_MAX_INFLIGHT].done)
				return;
		slot->ninflight = 0;
		slot->first = 0;
	}
}

/*
 * append_sync_to
 *		Wait until every byte below pos is durable, syncing ourselves when
 *		nobody else is (group commit).  False if the segment broke first.
 */
static bool
append_sync_to(AppendSlot *slot, File file, int64 segment_id, uint64 pos)
{
	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		uint64		target;
		int64		target_offset;

		SpinLockAcquire(&slot->mutex);
		if (slot->synced >= pos)
		{
			SpinLockRelease(&slot->mutex);
			break;
		}
		if (slot->written < pos || slot->syncing)
		{
			bool		earlier = slot->written < pos;
			bool		broken = slot->fenced && slot->ninflight == 0 &&
				slot->written < pos;

			SpinLockRelease(&slot->mutex);
			if (broken)
			{
				ConditionVariableCancelSleep();
				return false;
			}
			if (earlier)
				InjectWait(INJECT_APPEND_WAITING);
			ConditionVariableSleep(&slot->cv, PG_WAIT_EXTENSION);
			continue;
		}
		slot->syncing = true;
		target = slot->written;
		target_offset = slot->written_offset;
		SpinLockRelease(&slot->mutex);

		PG_TRY();
		{
			SegmentSync(file, segment_id);
		}
		PG_CATCH();
		{
			SpinLockAcquire(&slot->mutex);
			slot->syncing = false;
			SpinLockRelease(&slot->mutex);
			ConditionVariableBroadcast(&slot->cv);
			PG_RE_THROW();
		}
		PG_END_TRY();

		SpinLockAcquire(&slot->mutex);
		slot->syncing = false;
		slot->synced = Max(slot->synced, target);
		slot->durable_offset = Max(slot->durable_offset, target_offset);
		append_refresh_visible(slot);
		SpinLockRelease(&slot->mutex);
		ConditionVariableBroadcast(&slot->cv);
	}
	ConditionVariableCancelSleep();
	return true;
}

/*
 * append_void_failed
 *		A transactional batch whose append failed was never acknowledged: it
 *		is void at once (no transaction will settle it), so that nothing
 *		waits for it.  It lies past the written edge, where no reader and no
 *		fence looks, so there is no flag to write.
 */
static void
append_void_failed(AppendSlot *slot, int64 end_offset)
{
	int			k;

	SpinLockAcquire(&slot->mutex);
	for (k = 0; k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		if (t->end_offset == end_offset && t->state == TXN_IN_DOUBT)
		{
			t->state = TXN_VOID;
			t->persisted = true;
		}
	}
	append_refresh_visible(slot);
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
}

/*
 * append_write
 *		Write a reserved region (entry i of the in-flight list) and mark it
 *		written; a failed write fences the segment (see the rules above).
 *		An aligned region is lead filler bytes and then the len bytes at
 *		batch (the batch and its trailing filler) from start on.
 */
static void
append_write(AppendSlot *slot, File file, int64 segment_id,
			 const char *batch, size_t len, uint64 start, int i,
			 bool aligned, uint64 lead, int64 base_offset)
{
	TimestampTz now;

	PG_TRY();
	{
		InjectWait(INJECT_APPEND_RESERVED);
		if (lead > 0)
		{
			/* the filler up to the aligned start, through the page cache */
			char		filler[APPEND_DIRECT_ALIGN + CODEC_HEADER_SIZE];

			Assert(lead <= sizeof(filler));
			(void) CodecEncodeFiller(segment_id, base_offset, filler, lead);
			SegmentWrite(file, segment_id, filler, lead, start - lead);
		}
		if (aligned)
			SegmentWriteDirect(file, segment_id, batch, len, start);
		else
			SegmentWrite(file, segment_id, batch, len, start);
	}
	PG_CATCH();
	{
		SpinLockAcquire(&slot->mutex);
		append_complete(slot, i, true);
		SpinLockRelease(&slot->mutex);
		writing_slotno = -1;
		ConditionVariableBroadcast(&slot->cv);
		PG_RE_THROW();
	}
	PG_END_TRY();

	now = GetCurrentTimestamp();
	SpinLockAcquire(&slot->mutex);
	append_complete(slot, i, false);
	slot->last_append = now;
	SpinLockRelease(&slot->mutex);
	writing_slotno = -1;
	ConditionVariableBroadcast(&slot->cv);
}

/*
 * append_wait
 *		Wait until a written region is acknowledged: every earlier region
 *		written, and, with malachi.fsync on, all of it durable.  False if
 *		an earlier write failed (the region will never be part of the log).
 */
static bool
append_wait(AppendSlot *slot, File file, int64 segment_id, uint64 end)
{
	/* durable: ours and everything before it */
	if (malachi_fsync)
		return append_sync_to(slot, file, segment_id, end);

	/* without fsync, wait only for the earlier regions to be written */
	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		bool		ok;
		bool		broken;

		SpinLockAcquire(&slot->mutex);
		ok = slot->written >= end;
		broken = !ok && slot->fenced && slot->ninflight == 0;
		SpinLockRelease(&slot->mutex);
		if (ok || broken)
		{
			ConditionVariableCancelSleep();
			return ok;
		}
		InjectWait(INJECT_APPEND_WAITING);
		ConditionVariableSleep(&slot->cv, PG_WAIT_EXTENSION);
	}
}

/*
 * Bytes of filler from pos up to the next block boundary: none when pos is
 * on one, else never less than a filler's header.  (Not inlined: gcc
 * would take its local for one AppendBatchWrite's PG_TRY may clobber.)
 */
static pg_noinline uint64
append_pad(uint64 pos)
{
	uint64		pad = TYPEALIGN(APPEND_DIRECT_ALIGN, pos) - pos;

	if (pad > 0 && pad < CODEC_HEADER_SIZE)
		pad += APPEND_DIRECT_ALIGN;
	return pad;
}

/*
 * Release a ticket's pin.  A transactional batch whose region will never
 * be written (its own write failed, or an earlier region's did) becomes
 * void at once.  One that was written stays in doubt even when its caller
 * fails afterwards (an error or a cancel while waiting, a later batch of
 * the same call failing): the written edge may still pass it, so only its
 * transaction may settle it, and that transaction is aborting; its abort
 * marks the batch void, and the fence or the next persisting of voids
 * flags it in the file.
 */
static void
append_ticket_done(AppendTicket *ticket, bool never_written)
{
	AppendSlot *slot = append_slot(ticket->slotno);

	if (never_written && ticket->transactional)
		append_void_failed(slot, ticket->base_offset + ticket->nrecords);
	append_unpin(ticket->slotno);
	ticket->slotno = -1;
}

/*
 * May this backend give batches aligned regions (see the rules above)?
 * Only where the page cache's pages are no larger than APPEND_DIRECT_ALIGN;
 * learned once per backend, and logged once where they are not.
 */
static bool
append_direct_allowed(void)
{
	static int	allowed = -1;	/* not yet known */

	if (allowed < 0)
	{
		long		page = sysconf(_SC_PAGESIZE);

		allowed = page > 0 && page <= APPEND_DIRECT_ALIGN;
		if (!allowed)
			ereport(LOG,
					(errmsg("malachi.direct_io is not used: pages of %ld bytes are larger than its blocks of %d bytes",
							page, APPEND_DIRECT_ALIGN),
					 errdetail("This backend writes segments through the page cache.")));
	}
	return allowed;
}

/*
 * AppendBatchWrite
 *		The first half of an append: assign the batch's offsets, pin the
 *		slot, write the batch.  Returns false, appending nothing, when the
 *		segment is fenced (or already sealed and unloaded): the caller moves
 *		to the range's next head.  On success the caller must finish the
 *		ticket with AppendBatchWait, which may come after writing other
 *		batches (to other segments), so that their syncs overlap.
 *
 *		A transactional batch waits while the slot tracks APPEND_MAX_TXN of
 *		them: committed ones leave the list only from its front, so one
 *		batch in doubt there holds every later one.  The wait sleeps (and
 *		can be cancelled); with timeout_ms > 0 (a caller that holds batches
 *		in doubt elsewhere, which the one in front may be waiting for) it
 *		gives up after that long.
 */
bool
AppendBatchWrite(int slotno, int64 segment_id, char *batch, size_t len,
				 size_t cap, int nrecords, bool transactional,
				 long timeout_ms, AppendTicket *ticket)
{
	AppendSlot *slot = append_slot(slotno);
	File		file = SegmentOpen(segment_id);
	bool		aligned;
	uint64		start;
	uint64		lead = 0;
	size_t		tail = 0;
	int			i;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   timeout_ms);

	/* a large batch in an aligned buffer gets a region of whole blocks */
	aligned = malachi_direct_io && append_direct_allowed() &&
		len >= APPEND_DIRECT_MIN &&
		cap >= len + APPEND_DIRECT_SLACK &&
		(uintptr_t) batch % APPEND_DIRECT_ALIGN == 0;

	/* reserve offsets and a file region, and pin the slot */
	append_prepare_pin();
	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->segment_id != segment_id || slot->fenced)
		{
			SpinLockRelease(&slot->mutex);
			ConditionVariableCancelSleep();
			return false;
		}
		if (slot->ninflight < APPEND_MAX_INFLIGHT &&
			(!transactional || slot->ntxn < APPEND_MAX_TXN))
			break;
		if (transactional && slot->ntxn >= APPEND_MAX_TXN / 2 &&
			!slot->voiding && append_any_unflagged_void(slot))
		{
			/* make room: settle the aborted batches durably */
			SpinLockRelease(&slot->mutex);
			append_persist_voids(slot, file, segment_id);
			continue;
		}
		SpinLockRelease(&slot->mutex);
		if (timeout_ms > 0 && GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("timed out waiting for room in segment " INT64_FORMAT, segment_id),
					 errdetail("The segment holds %d transactional batches behind one not yet committed, while this transaction holds records in doubt in other segments.",
							   APPEND_MAX_TXN),
					 errhint("Retry the transaction.")));
		(void) ConditionVariableTimedSleep(&slot->cv, 100, PG_WAIT_EXTENSION);
	}
	ticket->slotno = slotno;
	ticket->segment_id = segment_id;
	ticket->base_offset = slot->next_offset;
	ticket->nrecords = nrecords;
	ticket->transactional = transactional;
	slot->next_offset += nrecords;
	start = slot->reserved;
	if (aligned)
	{
		lead = append_pad(start);
		start += lead;
		tail = append_pad(start + len);
	}
	ticket->end = start + len + tail;
	slot->reserved = ticket->end;
	i = (slot->first + slot->ninflight) % APPEND_MAX_INFLIGHT;
	slot->inflight[i].end = ticket->end;
	slot->inflight[i].end_offset = ticket->base_offset + nrecords;
	slot->inflight[i].done = false;
	slot->inflight[i].failed = false;
	slot->ninflight++;
	slot->pins++;
	held_pins[nheld_pins++] = slotno;
	writing_slotno = slotno;
	writing_region = i;
	writing_end_offset = ticket->base_offset + nrecords;
	writing_transactional = transactional;
	if (transactional)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + slot->ntxn) % APPEND_MAX_TXN];

		t->start_offset = ticket->base_offset;
		t->end_offset = ticket->base_offset + nrecords;
		t->pos = start;
		t->state = TXN_IN_DOUBT;
		t->persisted = false;
		slot->ntxn++;
		append_refresh_visible(slot);
	}
	SpinLockRelease(&slot->mutex);
	ConditionVariableCancelSleep();

	/* write outside the lock */
	CodecPlace(batch, segment_id, ticket->base_offset);
	if (tail > 0)
		(void) CodecEncodeFiller(segment_id, ticket->base_offset + nrecords,
								 batch + len, tail);
	PG_TRY();
	{
		append_write(slot, file, segment_id, batch, len + tail, start, i,
					 aligned, lead, ticket->base_offset);
	}
	PG_CATCH();
	{
		append_ticket_done(ticket, true);	/* the write failed */
		PG_RE_THROW();
	}
	PG_END_TRY();
	return true;
}

/*
 * AppendBatchWait
 *		The second half of an append: wait until the batch is acknowledged
 *		(durable with malachi.fsync on, and, unless transactional, visible)
 *		and release the pin.  False if an earlier region's write failed, so
 *		that this batch will never be part of the log.  A transactional
 *		batch stays in doubt, invisible, until AppendResolve; the caller
 *		must resolve it (commit or abort) whatever happens.
 */
bool
AppendBatchWait(AppendTicket *ticket)
{
	AppendSlot *slot = append_slot(ticket->slotno);
	volatile bool ok = false;

	PG_TRY();
	{
		ok = append_wait(slot, SegmentOpen(ticket->segment_id),
						 ticket->segment_id, ticket->end);
	}
	PG_CATCH();
	{
		append_ticket_done(ticket, false);	/* written: stays in doubt */
		PG_RE_THROW();
	}
	PG_END_TRY();
	append_ticket_done(ticket, !ok);	/* !ok: behind a failed region */
	return ok;
}

/*
 * AppendBatchAbandon
 *		Release a ticket without waiting for it (the caller is failing).  A
 *		transactional batch stays in doubt until its transaction's abort
 *		voids it; an immediate one may still become readable, as any append
 *		whose caller saw an error.
 */
void
AppendBatchAbandon(AppendTicket *ticket)
{
	append_ticket_done(ticket, false);
}

/*
 * AppendResolve
 *		Settle a transactional batch, identified by its segment and end
 *		offset: committed ones become visible (once nothing before them is
 *		in doubt), void ones are skipped by readers.  Called from the commit
 *		and abort callbacks: changes shared memory only and cannot fail.
 */
void
AppendResolve(int64 segment_id, int64 end_offset, bool committed)
{
	AppendSlot *slot = NULL;
	int			slotno;
	int			k;

	LWLockAcquire(append_shared->lock, LW_SHARED);
	slotno = append_find(segment_id);
	if (slotno >= 0)
		slot = &append_shared->slots[slotno];
	LWLockRelease(append_shared->lock);
	if (slot == NULL)
		return;					/* the segment is gone (its topic dropped) */

	SpinLockAcquire(&slot->mutex);
	if (slot->segment_id == segment_id)
	{
		for (k = 0; k < slot->ntxn; k++)
		{
			AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

			if (t->end_offset == end_offset && t->state == TXN_IN_DOUBT)
			{
				t->state = committed ? TXN_COMMITTED : TXN_VOID;
				break;
			}
		}
		append_refresh_visible(slot);
	}
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
}

/*---- fencing and reading ----*/

/*
 * AppendFence
 *		Set the fence latch, wait for the regions in flight, write and sync
 *		the seal trailer, and answer the end offset and byte size.
 *		Idempotent: a fenced segment answers what it answered first.
 *		Returns false if the slot no longer holds the segment (it was sealed
 *		and unloaded meanwhile): attach again, which reloads it from its
 *		file, fence included.  The fence waits for the segment's batches in
 *		doubt to settle; with timeout_ms > 0 (a caller that holds batches
 *		in doubt elsewhere, which could otherwise wait in a cycle) it gives
 *		up after that long.
 */
bool
AppendFence(int slotno, int64 segment_id, int64 *end_offset,
			uint64 *byte_size, long timeout_ms)
{
	AppendSlot *slot = append_slot(slotno);
	File		file = SegmentOpen(segment_id);
	CodecTrailer trailer;
	char		buf[CODEC_TRAILER_SIZE];
	uint64		void_pos[APPEND_MAX_TXN];
	int			nvoid;
	int			k;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   timeout_ms);

	append_prepare_pin();
	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		SpinLockAcquire(&slot->mutex);
		if (slot->segment_id != segment_id)
		{
			/* sealed and unloaded meanwhile: the caller reloads it */
			SpinLockRelease(&slot->mutex);
			ConditionVariableCancelSleep();
			return false;
		}
		slot->fenced = true;
		if (slot->fence_durable)
		{
			*end_offset = slot->fenced_end;
			*byte_size = slot->fenced_size;
			SpinLockRelease(&slot->mutex);
			ConditionVariableCancelSleep();
			return true;
		}
		if (slot->ninflight == 0 && !slot->fencing && !slot->voiding &&
			!append_any_in_doubt(slot))
			break;
		SpinLockRelease(&slot->mutex);
		if (timeout_ms > 0 && GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("timed out waiting for segment " INT64_FORMAT " to be sealed", segment_id),
					 errdetail("Another transaction's records in it are not yet committed, while this transaction holds records in doubt in other segments."),
					 errhint("Retry the transaction.")));
		InjectWait(INJECT_FENCE_WAITING);
		(void) ConditionVariableTimedSleep(&slot->cv, 100, PG_WAIT_EXTENSION);
	}
	/*
	 * Pin the slot for the trailer's I/O, as an appender pins it for its
	 * write: a release meanwhile (the topic dropped) only marks it, so that
	 * the slot cannot be given to another segment before the fence's answer
	 * is stored in it.
	 */
	slot->fencing = true;
	slot->pins++;
	held_pins[nheld_pins++] = slotno;
	fencing_slotno = slotno;
	nvoid = 0;
	for (k = 0; k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		if (t->state == TXN_VOID && !t->persisted)
			void_pos[nvoid++] = t->pos;
	}
	trailer.segment_id = segment_id;
	trailer.end_offset = slot->written_offset;
	trailer.byte_size = (int64) slot->written;
	SpinLockRelease(&slot->mutex);
	ConditionVariableCancelSleep();
	trailer.sealed_at = GetCurrentTimestamp();

	CodecEncodeTrailer(&trailer, buf);
	PG_TRY();
	{
		InjectWait(INJECT_FENCE_WRITING);
		for (k = 0; k < nvoid; k++)
			SegmentMarkVoid(file, segment_id, void_pos[k]);
		/*
		 * Everything before the trailer is durable before the trailer is
		 * written: a trailer on disk then proves the data before it whole
		 * (append_recover relies on that), whatever order a crash during
		 * the final sync would have left the pages in.
		 */
		SegmentSync(file, segment_id);
		SegmentWrite(file, segment_id, buf, sizeof(buf), trailer.byte_size);
		SegmentTruncate(file, segment_id, trailer.byte_size + sizeof(buf));
		SegmentSyncAll(file, segment_id);
	}
	PG_CATCH();
	{
		append_fence_failed(slot);
		append_unpin(slotno);
		PG_RE_THROW();
	}
	PG_END_TRY();

	SpinLockAcquire(&slot->mutex);
	Assert(slot->segment_id == segment_id);
	fencing_slotno = -1;
	slot->fencing = false;
	slot->fence_durable = true;
	slot->fenced_end = trailer.end_offset;
	slot->fenced_size = (uint64) trailer.byte_size;
	slot->synced = slot->written;
	slot->durable_offset = slot->written_offset;
	slot->txn_first = slot->ntxn = 0;
	slot->visible_offset = slot->durable_offset;
	*end_offset = slot->fenced_end;
	*byte_size = slot->fenced_size;
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
	append_unpin(slotno);
	return true;
}

/*
 * The trailer of a fence could not be written: clear the fencing flag, so
 * that the next fence tries again (the latch stays set).
 */
static void
append_fence_failed(AppendSlot *slot)
{
	fencing_slotno = -1;
	SpinLockAcquire(&slot->mutex);
	slot->fencing = false;
	SpinLockRelease(&slot->mutex);
	ConditionVariableBroadcast(&slot->cv);
}

/* What a reader may see of a segment; false if the slot no longer holds it. */
bool
AppendGetView(int slotno, int64 segment_id, AppendView *view)
{
	AppendSlot *slot = append_slot(slotno);
	int			k;

	SpinLockAcquire(&slot->mutex);
	if (slot->segment_id != segment_id)
	{
		SpinLockRelease(&slot->mutex);
		return false;
	}
	view->visible_offset = slot->visible_offset;
	view->visible_bytes = slot->synced;
	view->fenced = slot->fenced;
	view->in_doubt = append_any_in_doubt(slot);
	view->fence_durable = slot->fence_durable;
	view->fenced_end = slot->fenced_end;
	view->fenced_size = slot->fenced_size;
	view->nvoids = 0;
	for (k = 0; k < slot->ntxn; k++)
	{
		AppendTxn  *t = &slot->txn[(slot->txn_first + k) % APPEND_MAX_TXN];

		if (t->state == TXN_VOID && t->start_offset < slot->visible_offset)
		{
			view->voids[view->nvoids].start_offset = t->start_offset;
			view->voids[view->nvoids].end_offset = t->end_offset;
			view->nvoids++;
		}
	}
	SpinLockRelease(&slot->mutex);
	return true;
}

/*
 * AppendWaitBeyond
 *		Sleep until the segment has visible records at or past offset, or it
 *		is fenced, or timeout_ms passed (long poll).  A fenced head with
 *		nothing past offset is waited on for APPEND_FENCED_POLL_MS at most
 *		(its seal may take long to be recorded: a caller that looks again at
 *		once would spin).  Interruptible.
 */
void
AppendWaitBeyond(int slotno, int64 segment_id, int64 offset, long timeout_ms)
{
	AppendSlot *slot = append_slot(slotno);
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   timeout_ms);

	ConditionVariablePrepareToSleep(&slot->cv);
	for (;;)
	{
		bool		ready;
		long		left;

		bool		fenced;

		SpinLockAcquire(&slot->mutex);
		ready = slot->segment_id != segment_id ||
			slot->visible_offset > offset;
		fenced = slot->fenced;
		SpinLockRelease(&slot->mutex);
		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (ready || left <= 0)
			break;
		if (fenced)
		{
			(void) ConditionVariableTimedSleep(&slot->cv,
											   Min(left, APPEND_FENCED_POLL_MS),
											   PG_WAIT_EXTENSION);
			break;
		}
		(void) ConditionVariableTimedSleep(&slot->cv, left, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
}

/* SQL: head_state(): the segments loaded in the slot table and their edges */
Datum
malachi_head_state(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < append_shared->nslots; i++)
	{
		AppendSlot *slot = &append_shared->slots[i];
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		int64		segment_id;

		LWLockAcquire(append_shared->lock, LW_SHARED);
		segment_id = slot->state == SLOT_READY ? slot->segment_id : 0;
		LWLockRelease(append_shared->lock);
		if (segment_id == 0)
			continue;

		SpinLockAcquire(&slot->mutex);
		values[0] = Int64GetDatum(segment_id);
		values[1] = Int64GetDatum(slot->visible_offset);
		values[2] = Int64GetDatum((int64) slot->synced);
		values[3] = BoolGetDatum(slot->fenced);
		values[4] = TimestampTzGetDatum(slot->last_append);
		nulls[4] = slot->last_append == 0;
		SpinLockRelease(&slot->mutex);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * SQL: init_storage(), run by CREATE EXTENSION: forget every loaded head (no
 * segment of an earlier installation is live any more) and return the
 * largest segment id that has a file, which new ids must stay above.
 */
Datum
malachi_init_storage(PG_FUNCTION_ARGS)
{
	int			i;

	if (!creating_extension)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("malachi.init_storage() runs only as part of CREATE EXTENSION malachi")));

	LWLockAcquire(append_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < append_shared->nslots; i++)
	{
		if (append_shared->slots[i].state == SLOT_READY ||
			append_shared->slots[i].state == SLOT_RETIRED)
		{
			append_set_segment(&append_shared->slots[i], 0);
			append_shared->slots[i].state = SLOT_FREE;
		}
	}
	LWLockRelease(append_shared->lock);
	PG_RETURN_INT64(SegmentMaxId());
}
