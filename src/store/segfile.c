/*-------------------------------------------------------------------------
 *
 * segfile.c
 *	  Segment files: naming, I/O through the virtual file layer, scanning.
 *
 * A segment's file is $PGDATA/<malachi.data_directory>/<segment id in 16 hex
 * digits>.seg: named by id only, never by a user-supplied string.  Files are
 * opened through PostgreSQL's virtual file layer (PathNameOpenFile), so a
 * backend with many segments never runs out of kernel descriptors; each
 * backend keeps its own File per segment in a small hash.
 *
 * Rules:
 * - Writers write whole batches at positions the append state reserved for
 *   them (append.c); this file never decides where to write.
 * - Space ahead of the write edge is preallocated: a new segment takes over
 *   a spare file that the writer worker zero-filled and synced in the
 *   background (a file that is already allocated and written syncs much
 *   faster than one that grows: measured on this project's machines, 1.5
 *   to 2.5 times for 1 MiB appends with fdatasync each; posix_fallocate's
 *   unwritten extents gave no gain).  The zero bytes read from the unused
 *   part decode as "end of data" (CODEC_END).  Without a spare, the file
 *   simply grows.
 * - A deleted segment's file is recycled (as PostgreSQL recycles WAL
 *   segments): SegmentUnlink renames it to recycle-<id>, and once no process
 *   can still hold it open the writer worker makes it a spare, up to
 *   malachi.max_spare_segments of them, with its first block zeroed and
 *   synced (segment_recycle_prepare).  Its old batches stay in it, past
 *   the new segment's data; the header CRC covers the segment id (codec.h),
 *   so a scan stops at the first of them as at any garbage.  "Can still
 *   hold it open": every process raises its flag in SegOpenProc before it
 *   opens a segment file by path, and counts a close once it has closed
 *   them all (at the end of each transaction, and at exit).  A descriptor
 *   opened before the rename is in a process whose flag was up at the
 *   rename; one opened after it finds no file (the virtual file layer
 *   reopens by path too).  So the writer records the close counts of the
 *   processes whose flag is up after the rename and waits until each has
 *   moved: no write can reach the file after that.  The writer lists the
 *   directory for recycle- files only when some process renamed one since
 *   its last listing (a shared count), at its start, and once a
 *   RECYCLE_RESCAN_MS: a listing reads every name in the directory (3.8 ms
 *   for 20,000 files here), and it used to run every time the writer's
 *   loop turned and 100 ms had passed: once a second when idle, every
 *   100 ms while it served requests or filled a spare.
 * - A batch append.c aligned to whole blocks is written with O_DIRECT
 *   (SegmentWriteDirect) through a second File of the segment, from the
 *   producer's buffer straight to the disk.  A file system that refuses
 *   O_DIRECT (EINVAL) makes this backend fall back to the page cache for
 *   good; the bytes written are the same either way.
 * - Appends are made durable with fdatasync; a fence, which also cuts the
 *   file, with fsync.  With malachi.fsync on, every write also starts its
 *   writeback at once (FileWriteback, sync_file_range on Linux): a produce
 *   that wrote batches into several segments then waits for their I/O
 *   together instead of one fdatasync after another (1 KiB records in
 *   batches of 1,000 over 4 ranges, 1 client: p50 3.7 ms instead of
 *   4.4 ms per call).  A large write starts it every
 *   SEGMENT_WRITEBACK_CHUNK of the file, so the disk writes a batch's start
 *   while its rest is still being copied into the page cache (1 MiB calls
 *   to one range on the dev node: 6 % less time per call in an A/B of 4
 *   rounds; within the noise of the bench, see docs/benchmarks.md).
 * - Every I/O error is raised with errcode_for_file_access() and %m; an
 *   fdatasync failure is a PANIC through data_sync_elevel, as PostgreSQL
 *   does for its own files: a failed fsync may have dropped dirty pages.
 *   Except in files nothing depends on yet: a spare, a new head's file
 *   before its row commits; their failed fsync is an ERROR.  A deleted
 *   segment's file that cannot be prepared as a spare is logged and
 *   removed instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "portability/instr_time.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "append.h"
#include "codec.h"
#include "inject.h"
#include "segfile.h"
#include "segindex.h"
#include "settings.h"
#include "util.h"

/*
 * One open segment file of this backend.  The files are closed at the end
 * of every transaction: a file that another backend unlinks (retention,
 * drop_topic) must not stay allocated on disk because some idle backend
 * once read it.
 */
typedef struct SegFileEntry
{
	int64		segment_id;		/* hash key */
	File		file;
	File		direct;			/* opened with O_DIRECT; -1 until needed */
} SegFileEntry;

static HTAB *segfile_cache = NULL;

/*
 * Set once the segment directory refused O_DIRECT (EINVAL: tmpfs, some
 * network file systems): this backend then writes everything through the
 * page cache.
 */
static bool direct_unsupported = false;

/*
 * Which processes may hold segment files open (see the recycling rule at
 * the top), one entry per PGPROC (pgprocno).  No lock: each field is an
 * atomic that only its own process writes, with a full barrier between
 * raising the flag and opening, and between closing and counting.
 */
typedef struct SegOpenProc
{
	pg_atomic_uint32 open;		/* 1 from before this process opens a
								 * segment file until it has closed them all */
	pg_atomic_uint64 closes;	/* how many times it closed them all */
} SegOpenProc;

static void segfile_exit(int code, Datum arg);
static bool segfile_exists(char *path);
static void segfile_recycled_path(char *buf, const char *prefix,
								  int64 segment_id);
static bool segment_recycle_prepare(const char *path);

/*
 * Write n bytes at pos, all of them: false with errno set otherwise (ENOSPC
 * for a short write, which sets none).
 */
static bool
segfile_pwrite_whole(int fd, const void *buf, size_t n, off_t pos)
{
	errno = 0;
	if (pg_pwrite(fd, buf, n, pos) == (ssize_t) n)
		return true;
	if (errno == 0)
		errno = ENOSPC;
	return false;
}

static SegOpenProc *segopen = NULL;
static int	segopen_count = 0;	/* entries in segopen */
static bool segopen_up = false; /* this process's flag is raised */

/*
 * How many files processes renamed to recycle- since shared memory was set
 * up.  No lock: an atomic, incremented after each rename (SegmentUnlink),
 * read by the writer worker before it lists the directory for them.
 */
static pg_atomic_uint64 *recycle_renames = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Raise this process's flag: it is about to open a segment file by path. */
static void
segfile_flag_open(void)
{
	static bool exit_hooked = false;

	if (segopen_up || segopen == NULL || MyProc == NULL)
		return;
	Assert(MyProc->pgprocno >= 0 && MyProc->pgprocno < segopen_count);
	if (!exit_hooked)
	{
		before_shmem_exit(segfile_exit, (Datum) 0);
		exit_hooked = true;
	}
	pg_atomic_write_u32(&segopen[MyProc->pgprocno].open, 1);
	pg_memory_barrier();
	segopen_up = true;
}

/* Count a close: every segment file this process opened is closed. */
static void
segfile_count_close(void)
{
	SegOpenProc *me;

	if (!segopen_up)
		return;
	me = &segopen[MyProc->pgprocno];
	pg_memory_barrier();
	pg_atomic_fetch_add_u64(&me->closes, 1);
	pg_atomic_write_u32(&me->open, 0);
	segopen_up = false;
}

/* Close a cache entry's files. */
static void
segfile_close_entry(SegFileEntry *entry)
{
	FileClose(entry->file);
	if (entry->direct >= 0)
		FileClose(entry->direct);
}

/* Close every segment file this backend has open. */
static void
segfile_close_all(void)
{
	HASH_SEQ_STATUS status;
	SegFileEntry *entry;

	if (segfile_cache != NULL)
	{
		hash_seq_init(&status, segfile_cache);
		while ((entry = hash_seq_search(&status)) != NULL)
			segfile_close_entry(entry);
		hash_destroy(segfile_cache);
		segfile_cache = NULL;
	}
	segfile_count_close();
}

/* At exit, close and count, so that no recycling waits for a process gone. */
static void
segfile_exit(int code, Datum arg)
{
	segfile_close_all();
}

/* At the end of a transaction, close its segment files (see above). */
static void
segfile_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT)
		segfile_close_all();
}

/* Two structs: ShmemInitStruct rounds each up to a cache line */
static Size
segfile_shmem_size(void)
{
	return add_size(CACHELINEALIGN(mul_size(MaxBackends + NUM_AUXILIARY_PROCS,
											sizeof(SegOpenProc))),
					CACHELINEALIGN(sizeof(pg_atomic_uint64)));
}

static void
segfile_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(segfile_shmem_size());
}

static void
segfile_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	segopen_count = MaxBackends + NUM_AUXILIARY_PROCS;
	segopen = ShmemInitStruct("malachi open segment files",
							  mul_size(segopen_count, sizeof(SegOpenProc)),
							  &found);
	if (!found)
		for (i = 0; i < segopen_count; i++)
		{
			pg_atomic_init_u32(&segopen[i].open, 0);
			pg_atomic_init_u64(&segopen[i].closes, 0);
		}
	recycle_renames = ShmemInitStruct("malachi recycled segment files",
									  sizeof(pg_atomic_uint64), &found);
	if (!found)
		pg_atomic_init_u64(recycle_renames, 0);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * SegmentFilesInit
 *		Register the end-of-transaction close and the shared flags of open
 *		files.  Called first in _PG_init: transaction callbacks run newest
 *		first, so this one runs after those of the other layers, which may
 *		still write segments at commit.
 */
void
SegmentFilesInit(void)
{
	RegisterXactCallback(segfile_xact_callback, NULL);
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = segfile_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = segfile_shmem_startup;
}

/*---- naming ----*/

/* The directory of segment files (absolute, or relative to $PGDATA). */
char *
SegmentDirectory(void)
{
	return malachi_data_directory;
}

/* The path of a segment's file. */
char *
SegmentPath(int64 segment_id)
{
	return psprintf("%s/%016llx.seg", SegmentDirectory(),
					(unsigned long long) segment_id);
}

/*
 * Create the segment directory if it does not exist yet, durably: its
 * entry in its parent is synced too (SegmentCreate syncs only the entries
 * in it), or a crash could take the directory, and every acknowledged
 * record in it, away.  Each process syncs them once, also when it finds
 * the directory made: by another process, which may not have synced it
 * yet (a crash may also have come between the two).
 */
void
SegmentEnsureDirectory(void)
{
	static bool synced = false;
	const char *dir = SegmentDirectory();
	char		parent[MAXPGPATH];
	bool		made = MakePGDirectory(dir) == 0;

	if (!made && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", dir)));
	if (synced && !made)
		return;
	fsync_fname(dir, true);
	strlcpy(parent, dir, sizeof(parent));
	get_parent_directory(parent);
	fsync_fname(parent[0] != '\0' ? parent : ".", true);
	synced = true;
}

/*---- spare files ----*/

#define SPARE_PREFIX	"spare-"
#define RECYCLE_PREFIX	"recycle-"
#define RECYCLED_SPARE_PREFIX "spare-r"
#define SPARE_CHUNK		(1024 * 1024)

/* A write's writeback starts at each multiple of this in the file */
#define SEGMENT_WRITEBACK_CHUNK	((size_t) 256 * 1024)

/*
 * The finished spares as the writer worker knows them: their names, in
 * TopMemoryContext, read from the directory at the first use and then kept
 * by the writer itself, which alone finishes spares, renames deleted
 * segments' files into spares and claims them for new heads.  So neither a
 * head's open nor a count of the spares reads the directory, which holds
 * every segment's file and index (20,000 names took 14 ms to list here).
 * A name that is not there any more (removed by hand) is dropped when a
 * claim finds it missing.  Writer-local.
 */
static List *spare_names = NIL;
static bool spare_names_read = false;

/* sync_file_range refused (ENOSYS, EINVAL, ESPIPE): not tried again */
static bool spare_writeback_refused = false;

/* Is a directory entry a finished spare file? */
static bool
segment_is_spare(const char *name)
{
	size_t		len = strlen(name);

	return strncmp(name, SPARE_PREFIX, strlen(SPARE_PREFIX)) == 0 &&
		!(len > 4 && strcmp(name + len - 4, ".tmp") == 0);
}

/* Read the finished spares' names from the directory, the first time. */
static void
spare_names_load(void)
{
	const char *dirpath = SegmentDirectory();
	DIR		   *dir;
	struct dirent *de;
	MemoryContext old;
	List	   *names = NIL;

	if (spare_names_read)
		return;
	SegmentEnsureDirectory();
	old = MemoryContextSwitchTo(TopMemoryContext);
	dir = AllocateDir(dirpath);
	while ((de = ReadDir(dir, dirpath)) != NULL)
		if (segment_is_spare(de->d_name))
			names = lappend(names, pstrdup(de->d_name));
	FreeDir(dir);
	MemoryContextSwitchTo(old);
	/* whole or not at all: a read that failed half way is read again */
	spare_names = names;
	spare_names_read = true;
}

/* A spare was finished, or made of a deleted segment's file, at path. */
static void
spare_names_add(const char *path)
{
	const char *slash = strrchr(path, '/');
	MemoryContext old;

	/* not read yet: the first read finds it */
	if (!spare_names_read)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	spare_names = lappend(spare_names, pstrdup(slash ? slash + 1 : path));
	MemoryContextSwitchTo(old);
}

/*
 * segment_claim_spare
 *		Give a new segment's path the blocks of a spare file, if there is
 *		one.  link() then unlink(): unlike rename(), link() never replaces
 *		a file that exists, so a segment file is never swapped under a
 *		writer.  Returns true when the path got a spare.
 */
static bool
segment_claim_spare(int64 segment_id, const char *path)
{
	const char *dirpath = SegmentDirectory();
	ListCell   *lc;
	bool		claimed = false;

	spare_names_load();
	foreach(lc, spare_names)
	{
		char	   *name = lfirst(lc);
		char		spare[MAXPGPATH];
		unsigned long long recycled;
		struct stat st;

		/*
		 * Only a deleted segment's file of a lower id.  A head that takes a
		 * recycled file writes over its start only: the older segments'
		 * batches stay after its own, layer under layer, and carry their
		 * ids.  Claimed only by higher ids, every layer of spare-r<R> is of
		 * an id no greater than R, so a new head whose id a restored dump
		 * set back (to R or below) never takes a file holding batches of
		 * its own id: they, and their trailer, would pass for its own.
		 */
		if (sscanf(name, RECYCLED_SPARE_PREFIX "%16llx", &recycled) == 1 &&
			(int64) recycled >= segment_id)
			continue;
		snprintf(spare, sizeof(spare), "%s/%s", dirpath, name);

		/*
		 * Not a spare that has another name already: a claim that a crash
		 * cut short between its link and its unlink, or whose unlink
		 * failed.  That name may be a head's.  Drop the spare's name.
		 */
		if (stat(spare, &st) == 0 && st.st_nlink > 1)
		{
			ereport(LOG,
					(errmsg("malachi: spare segment file \"%s\" has another name; removing this one",
							spare)));
			(void) unlink(spare);
			spare_names = foreach_delete_current(spare_names, lc);
			pfree(name);
			continue;
		}
		if (link(spare, path) == 0)
		{
			if (unlink(spare) != 0)
			{
				int			save = errno;

				(void) unlink(path);
				errno = save;
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not remove the name of spare segment file \"%s\": %m",
								spare)));
			}
			spare_names = foreach_delete_current(spare_names, lc);
			pfree(name);
			claimed = true;
			break;
		}
		if (errno == EEXIST)
			break;				/* the segment has its file already */
		if (errno == ENOENT)
		{
			/* removed by hand */
			spare_names = foreach_delete_current(spare_names, lc);
			pfree(name);
		}
	}
	return claimed;
}

/* Number of finished spare files (as the writer knows them). */
int
SegmentSpareCount(void)
{
	spare_names_load();
	return list_length(spare_names);
}

/* Remove half-filled spares a crash left behind. */
void
SegmentSpareCleanup(void)
{
	const char *dirpath = SegmentDirectory();
	DIR		   *dir;
	struct dirent *de;

	SegmentEnsureDirectory();
	dir = AllocateDir(dirpath);
	while ((de = ReadDir(dir, dirpath)) != NULL)
	{
		size_t		len = strlen(de->d_name);

		if (strncmp(de->d_name, SPARE_PREFIX, strlen(SPARE_PREFIX)) == 0 &&
			len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0)
		{
			char		p[MAXPGPATH];

			snprintf(p, sizeof(p), "%s/%s", dirpath, de->d_name);
			(void) unlink(p);
		}
	}
	FreeDir(dir);
}

/*
 * Start filling a new spare file of size bytes.  The descriptor is a plain
 * one (BasicOpenFile): it outlives the transactions the writer worker runs
 * between two chunks.  Its name is one no spare has: a writer that got the
 * pid of an earlier one (after a restart, say) would otherwise replace that
 * one's spares as it finishes its own (rename), and fill again.
 * Only the writer makes spares, so a name free now stays free.
 */
void
SegmentSpareBegin(SpareFill *fill, uint64 size)
{
	static uint64 counter = 0;

	do
		snprintf(fill->path, sizeof(fill->path), "%s/" SPARE_PREFIX "%d-" UINT64_FORMAT,
				 SegmentDirectory(), (int) getpid(), ++counter);
	while (access(fill->path, F_OK) == 0);
	strlcat(fill->path, ".tmp", sizeof(fill->path));
	fill->fd = BasicOpenFile(fill->path, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
	if (fill->fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create spare segment file \"%s\": %m", fill->path)));
	fill->size = size;
	fill->done = 0;
}

/*
 * SegmentSpareRoom
 *		May a spare of size bytes, done of them written, be filled on?  Only
 *		while the file system keeps, once it is complete, the spare's size
 *		again and 1 % of its space free.  A spare only spares a head the
 *		cost of growing its file: filled into the last free bytes, it made
 *		appends to heads without one fail, and PostgreSQL itself where
 *		pg_wal shares the file system (a WAL segment switch that meets
 *		ENOSPC panics).  Sets *free_bytes and *needed for the message.
 *		(Failure point fail-spare-room: statvfs fails with EIO.)
 */
bool
SegmentSpareRoom(uint64 size, uint64 done, uint64 *free_bytes, uint64 *needed)
{
	struct statvfs st;
	uint64		total;

	if ((InjectSyscallFails(INJECT_FAIL_SPARE_ROOM, EIO) ? -1 :
		 statvfs(SegmentDirectory(), &st)) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read the free space of \"%s\": %m",
						SegmentDirectory())));
	total = (uint64) st.f_blocks * st.f_frsize;
	*free_bytes = malachi_inject_free_bytes >= 0 ?
		(uint64) malachi_inject_free_bytes :
		(uint64) st.f_bavail * st.f_frsize;
	*needed = size - Min(done, size) + Max(size, total / 100);
	return *free_bytes >= *needed;
}

/* Close and remove a spare that could not be finished; keeps errno. */
void
SegmentSpareDiscard(SpareFill *fill)
{
	int			save = errno;

	close(fill->fd);
	(void) unlink(fill->path);
	fill->fd = -1;
	errno = save;
}

/*
 * SegmentSpareStep
 *		Zero-fill the next chunk of a spare; once complete, sync it and give
 *		it its final name.  Returns true when the spare is finished.
 */
bool
SegmentSpareStep(SpareFill *fill)
{
	static const char zeros[SPARE_CHUNK];
	size_t		n = Min((uint64) SPARE_CHUNK, fill->size - fill->done);
	char		final[MAXPGPATH];

	if (n > 0)
	{
		if (!segfile_pwrite_whole(fill->fd, zeros, n, (off_t) fill->done))
		{
			SegmentSpareDiscard(fill);
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not fill spare segment file \"%s\": %m", fill->path)));
		}
#ifdef HAVE_SYNC_FILE_RANGE

		/*
		 * Start this chunk's writeback now and wait for the previous one's:
		 * at most two chunks are ever in flight.  Left to the final fsync,
		 * the whole file went to the disk at once, and every producer's
		 * fdatasync meanwhile waited behind it (40-50 ms for 64 MiB).  A
		 * wait that fails is the spare's failure: it reports a writeback
		 * error once, and the fsync after it would not report it again.
		 * Except a refusal of the call itself (ENOSYS, EINVAL, ESPIPE):
		 * logged once, and spares are then written back by their fsync
		 * alone.  With fsync off, pg_fsync does nothing, and neither does
		 * this.  (Failure points: refuse-spare-writeback makes the start
		 * fail with EINVAL, fail-spare-writeback the wait with EIO.)
		 */
		if (enableFsync && !spare_writeback_refused)
		{
			int			rc;

			rc = InjectSyscallFails(INJECT_REFUSE_SPARE_WRITEBACK, EINVAL) ? -1 :
				sync_file_range(fill->fd, (off_t) fill->done, (off_t) n,
								SYNC_FILE_RANGE_WRITE);
			if (rc == 0 && fill->done >= SPARE_CHUNK)
				rc = InjectSyscallFails(INJECT_FAIL_SPARE_WRITEBACK, EIO) ? -1 :
					sync_file_range(fill->fd,
									(off_t) (fill->done - SPARE_CHUNK),
									SPARE_CHUNK,
									SYNC_FILE_RANGE_WAIT_BEFORE |
									SYNC_FILE_RANGE_WRITE |
									SYNC_FILE_RANGE_WAIT_AFTER);
			if (rc != 0 && errno != ENOSYS && errno != EINVAL && errno != ESPIPE)
			{
				SegmentSpareDiscard(fill);
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not write back spare segment file \"%s\": %m",
								fill->path)));
			}
			if (rc != 0)
			{
				ereport(LOG,
						(errmsg("malachi writer: sync_file_range refused on spare segment file \"%s\": %m",
								fill->path),
						 errdetail("Spares are written back by their fsync alone from now on.")));
				spare_writeback_refused = true;
			}
		}
#endif
		fill->done += n;
		if (fill->done < fill->size)
			return false;
	}

	/*
	 * A failed fsync is an ERROR here, not a PANIC (data_sync_elevel):
	 * PostgreSQL panics because a later fsync may report success over
	 * dirty pages that the failed one dropped, but nothing depends on a
	 * spare's zeros.  The file goes, and the writer tries again later.
	 */
	if ((InjectSyscallFails(INJECT_FAIL_SPARE_SYNC, EIO) ? -1 :
		 pg_fsync(fill->fd)) != 0)
	{
		SegmentSpareDiscard(fill);
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync spare segment file \"%s\": %m", fill->path)));
	}
	close(fill->fd);
	fill->fd = -1;
	strlcpy(final, fill->path, sizeof(final));
	final[strlen(final) - 4] = '\0';	/* drop ".tmp" */
	/* synced already (above); its new name is made durable with the directory */
	if (rename(fill->path, final) != 0)
	{
		int			save = errno;

		(void) unlink(fill->path);
		errno = save;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not give spare segment file \"%s\" its name: %m",
						fill->path)));
	}
	spare_names_add(final);
	/* an ERROR, not a PANIC: nothing depends on a spare (above) */
	(void) fsync_fname_ext(SegmentDirectory(), true, false, ERROR);
	return true;
}

/*---- recycled files ----*/

/*
 * How often the writer lists the directory for recycle- files even though
 * no rename was counted (or sooner, if the clock went back).  Files renamed
 * before the writer started are found by its first listing; this finds the
 * ones a listing left, such as a file whose removal failed (logged), which
 * SegmentRecycleFinish counts as handled.
 */
#define RECYCLE_RESCAN_MS	60000

/*
 * SegmentRecycleTake
 *		Start waiting for the recycle- files there are now: record the
 *		close count of every process whose flag is up.  Returns false, with
 *		wait untouched, when there are none, or when nothing was renamed
 *		since the last listing and it is less than RECYCLE_RESCAN_MS old.
 *		wait's memory is allocated in TopMemoryContext and freed by
 *		SegmentRecycleFinish.  Writer worker only.
 */
bool
SegmentRecycleTake(RecycleWait *wait)
{
	/* the rename count the last complete listing began after, and when */
	static bool listed = false;
	static uint64 listed_renames = 0;
	static TimestampTz listed_at = 0;
	const char *dirpath = SegmentDirectory();
	DIR		   *dir;
	struct dirent *de;
	List	   *names = NIL;
	MemoryContext old;
	TimestampTz now = GetCurrentTimestamp();
	uint64		renames = 0;
	int			i;

	Assert(recycle_renames != NULL);	/* the writer runs preloaded only */
	if (recycle_renames != NULL)
		renames = pg_atomic_read_u64(recycle_renames);
	if (listed && renames == listed_renames && listed_at <= now &&
		!TimestampDifferenceExceeds(listed_at, now, RECYCLE_RESCAN_MS))
		return false;
	/* a rename counted after the read above is listed now or next time */
	pg_memory_barrier();

	SegmentEnsureDirectory();
	old = MemoryContextSwitchTo(TopMemoryContext);
	dir = AllocateDir(dirpath);
	while ((de = ReadDir(dir, dirpath)) != NULL)
		if (strncmp(de->d_name, RECYCLE_PREFIX, strlen(RECYCLE_PREFIX)) == 0)
			names = lappend(names, pstrdup(de->d_name));
	FreeDir(dir);
	if (names != NIL)
	{
		uint64	   *closes = palloc(sizeof(uint64) * segopen_count);

		/* the renames are done; every descriptor to them is counted now */
		pg_memory_barrier();
		for (i = 0; i < segopen_count; i++)
			closes[i] = pg_atomic_read_u32(&segopen[i].open) ?
				pg_atomic_read_u64(&segopen[i].closes) : PG_UINT64_MAX;
		wait->closes = closes;
		wait->since = GetCurrentTimestamp();
		wait->names = names;
	}
	MemoryContextSwitchTo(old);
	/* only a listing that went through counts (one that failed is redone) */
	listed = true;
	listed_renames = renames;
	listed_at = now;
	return names != NIL;
}

/* Has every process that might hold a waited-for file closed its files? */
bool
SegmentRecycleReady(const RecycleWait *wait)
{
	int			i;

	for (i = 0; i < segopen_count; i++)
		if (wait->closes[i] != PG_UINT64_MAX &&
			pg_atomic_read_u64(&segopen[i].closes) == wait->closes[i])
			return false;
	return true;
}

/*
 * How long one call of SegmentRecycleFinish may spend on the files: the
 * writer worker serves no request meanwhile, and removing a file can take
 * tens of milliseconds (ext4 frees a 64 MiB file's blocks in about 30 ms
 * on this project's machines).  Handled in one go, the files of a dropped
 * topic of 35 segments held a new head of another topic for 0.42-0.44 s;
 * in slices, 14-16 ms.  One removal is cut into steps too (below).
 */
#define RECYCLE_FINISH_MS	5

/*
 * A file is removed by cutting RECYCLE_REMOVE_STEP bytes off its end at a
 * time, then unlinking what is left: the time a removal takes grows with
 * the blocks it frees (on a file system mounted with discard, each block
 * is discarded too).  Measured here: unlinking a 64 MiB file took 26-46 ms
 * in one call; in 8 MiB steps, at most 3.4-4.2 ms a step, the same in all.
 */
#define RECYCLE_REMOVE_STEP	(8 * 1024 * 1024)

/*
 * segment_remove_step
 *		Cut one step off a file being removed, or remove it once it is no
 *		longer than one step.  Returns true once the file is gone.  With
 *		whole, remove it at once: a process may still hold it open (the
 *		wait was given up), and a reader there must go on reading what it
 *		had.
 */
static bool
segment_remove_step(const char *path, bool whole)
{
	int			fd = whole ? -1 : BasicOpenFile(path, O_RDWR | PG_BINARY);
	struct stat st;

	if (fd >= 0)
	{
		bool		cut = fstat(fd, &st) == 0 &&
			st.st_size > RECYCLE_REMOVE_STEP &&
			ftruncate(fd, st.st_size - RECYCLE_REMOVE_STEP) == 0;

		close(fd);
		if (cut)
			return false;
	}
	if (unlink(path) < 0 && errno != ENOENT)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not remove recycled segment file \"%s\": %m", path)));
	return true;
}

/*
 * SegmentRecycleFinish
 *		Once the wait is over, handle the next few waited-for files: make
 *		them spares while there are fewer than malachi.max_spare_segments,
 *		and remove the rest; remove every one when give_up (a process kept
 *		its files open too long: removing is always safe, it only gives the
 *		space back).  The first call decides give_up for the whole list.
 *		Works for about RECYCLE_FINISH_MS (at least one rename or one step
 *		of a removal), so that the writer can serve requests between calls.
 *		Returns true, with the wait cleared, once every file is handled.
 */
bool
SegmentRecycleFinish(RecycleWait *wait, bool give_up)
{
	const char *dirpath = SegmentDirectory();
	instr_time	start;

	if (!wait->finishing)
	{
		wait->give_up = give_up;
		wait->next = 0;
		wait->finishing = true;
	}
	INSTR_TIME_SET_CURRENT(start);
	while (wait->next < list_length(wait->names))
	{
		const char *name = list_nth(wait->names, wait->next);
		char		from[MAXPGPATH];
		char		to[MAXPGPATH];
		instr_time	now;

		InjectWait(INJECT_RECYCLE_FILE);
		snprintf(from, sizeof(from), "%s/%s", dirpath, name);
		if (!wait->removing)
		{
			/*
			 * A file not begun: make it a spare, or begin to remove it.
			 * The spares are counted for each file: between two calls new
			 * heads take spares, and the writer may finish zero-filling
			 * one.
			 */
			wait->removing = true;
			if (!wait->give_up &&
				SegmentSpareCount() < malachi_max_spare_segments &&
				segment_recycle_prepare(from))
			{
				snprintf(to, sizeof(to), "%s/" RECYCLED_SPARE_PREFIX "%s",
						 dirpath, name + strlen(RECYCLE_PREFIX));
				if (durable_rename(from, to, LOG) == 0)
				{
					spare_names_add(to);
					wait->removing = false;
					wait->next++;
				}
				else if (access(from, F_OK) != 0 && access(to, F_OK) == 0)
				{
					/* renamed, but not synced (logged): a spare all the same */
					spare_names_add(to);
					wait->removing = false;
					wait->next++;
				}
			}
		}
		if (wait->removing && segment_remove_step(from, wait->give_up))
		{
			wait->removing = false;
			wait->next++;
		}
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, start);
		if (INSTR_TIME_GET_MILLISEC(now) >= RECYCLE_FINISH_MS)
			break;
	}
	if (wait->next < list_length(wait->names))
		return false;
	list_free_deep(wait->names);
	pfree(wait->closes);
	memset(wait, 0, sizeof(*wait));
	return true;
}

/*---- first blocks ----*/

/*
 * segment_zero_first_block
 *		Write zeros over the first block of an open file: where a new
 *		head's data begins.  Not synced.  Returns false with errno set on
 *		failure.
 */
static bool
segment_zero_first_block(int fd)
{
	static const PGAlignedBlock zeros;

	return segfile_pwrite_whole(fd, zeros.data, BLCKSZ, 0);
}

/* Does an open file's first block read as zeros (or is it shorter)? */
static bool
segment_first_block_zero(int fd)
{
	PGAlignedBlock block;
	ssize_t		n = pg_pread(fd, block.data, BLCKSZ, 0);

	if (n < 0)
		return false;
	for (ssize_t i = 0; i < n; i++)
		if (block.data[i] != 0)
			return false;
	return true;
}

/*
 * segment_recycle_prepare
 *		Before a deleted segment's file becomes a spare: write zeros over
 *		its first block (the start of its old first batch), so that a new
 *		head taking the spare over reads as empty without a write and a
 *		sync of its own on the producer's path (SegmentCreate).  The rename
 *		that follows makes it durable: durable_rename fsyncs the file
 *		before it renames it, and a file it could not fsync keeps its name.
 *		LOGs and returns false when it cannot; the file is then removed
 *		instead.  (Failure point fail-recycle-clear: the write fails with
 *		EIO.)
 */
static bool
segment_recycle_prepare(const char *path)
{
	int			fd = OpenTransientFile(path, O_RDWR | PG_BINARY);
	bool		done = fd >= 0 &&
		!InjectSyscallFails(INJECT_FAIL_RECYCLE_CLEAR, EIO) &&
		segment_zero_first_block(fd);

	if (!done)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not clear the first block of recycled segment file \"%s\": %m", path),
				 errdetail("The file is removed instead of kept as a spare.")));
	if (fd >= 0)
		CloseTransientFile(fd);
	return done;
}

/*
 * fsync a new head's file, before its row is recorded.  (Failure point
 * fail-head-sync: it fails with EIO.)  False with errno set on failure.
 */
static bool
segment_head_sync(int fd)
{
	return !InjectSyscallFails(INJECT_FAIL_HEAD_SYNC, EIO) && pg_fsync(fd) == 0;
}

/*---- open files ----*/

/*
 * SegmentCreate
 *		Create the file of a new segment, taking over a spare when there is
 *		one, and make its name durable.  Called by whoever opens a head,
 *		before the head is recorded: from then on a missing file means lost
 *		data, never "not written yet".
 */
void
SegmentCreate(int64 segment_id)
{
	char	   *path = SegmentPath(segment_id);
	int			fd;
	bool		claimed = false;

	SegmentEnsureDirectory();

	/*
	 * A file that is there already is not this head's.  The writer skips
	 * ids whose files exist (writer_fresh_segment_id: an earlier
	 * installation's segment whose id a restored dump handed out again,
	 * or a head whose row a crash took back), so this is only a last
	 * guard.  Its batches would carry this very id and read as the new
	 * head's records: remove it, and its index, and start a file of its
	 * own.
	 */
	if (access(path, F_OK) == 0)
	{
		ereport(LOG,
				(errmsg("malachi: segment file \"%s\" exists already; replacing it with an empty one for the new head",
						path)));
		if (unlink(path) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not remove segment file \"%s\": %m", path)));
		SegmentIndexRemove(segment_id);
	}
	claimed = segment_claim_spare(segment_id, path);
	fd = OpenTransientFile(path, O_RDWR | O_CREAT | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create segment file \"%s\": %m", path)));

	/*
	 * The head's file must read as empty (CODEC_END), not as a torn tail,
	 * which recovery would cut, preallocation and all.  A spare's first
	 * block is zeros already, and durable: a zero-filled spare was synced
	 * whole, a recycled one had its first block cleared before the
	 * durable_rename that made it a spare (segment_recycle_prepare).  So
	 * only a new file is synced here, and a spare whose first block still
	 * holds data (recycled by an earlier build) is cleared and synced.  An
	 * ERROR, not a PANIC, as for a spare: the head is not recorded yet, so
	 * nothing depends on this file, which becomes an orphan.
	 */
	if (!claimed)
	{
		if (!segment_head_sync(fd))
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not fsync segment file \"%s\": %m", path)));
	}
	else if (!segment_first_block_zero(fd) &&
			 (!segment_zero_first_block(fd) || !segment_head_sync(fd)))
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not clear the first block of segment file \"%s\": %m", path)));
	CloseTransientFile(fd);
	fsync_fname(SegmentDirectory(), true);
	pfree(path);
}

/*
 * SegmentOpen
 *		This backend's File for an existing segment, opened once per
 *		transaction.  A missing file is an error: segment files are created
 *		with their head.
 */
File
SegmentOpen(int64 segment_id)
{
	return SegmentOpenMissingOk(segment_id, false);
}

/*
 * SegmentIdTaken
 *		Does a file of this segment id exist under any of its names (the
 *		segment's, its index's, or as a recycled file or spare)?  Checked
 *		in the order a file moves through them (<id>.seg, recycle-<id>,
 *		spare-r<id>), so that a file renamed during the check is still
 *		seen under its next name.
 */
bool
SegmentIdTaken(int64 segment_id)
{
	char		path[MAXPGPATH];

	if (segfile_exists(SegmentPath(segment_id)) ||
		segfile_exists(SegmentIndexPath(segment_id)))
		return true;
	segfile_recycled_path(path, RECYCLE_PREFIX, segment_id);
	if (access(path, F_OK) == 0)
		return true;
	segfile_recycled_path(path, RECYCLED_SPARE_PREFIX, segment_id);
	return access(path, F_OK) == 0;
}

/* Does a file exist at path (palloc'd; freed here)? */
static bool
segfile_exists(char *path)
{
	bool		exists = access(path, F_OK) == 0;

	pfree(path);
	return exists;
}

/* The path of a deleted segment's file under prefix (recycle- or spare-r). */
static void
segfile_recycled_path(char *buf, const char *prefix, int64 segment_id)
{
	snprintf(buf, MAXPGPATH, "%s/%s%016llx", SegmentDirectory(), prefix,
			 (unsigned long long) segment_id);
}

/*
 * SegmentCheckExists
 *		Fail unless the segment's file exists under its name (a File opened
 *		earlier may outlive the name).
 */
void
SegmentCheckExists(int64 segment_id)
{
	char	   *path = SegmentPath(segment_id);

	if (access(path, F_OK) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open segment file \"%s\": %m", path)));
	pfree(path);
}

/*
 * SegmentOpenMissingOk
 *		SegmentOpen, but with missing_ok a file that does not exist (a
 *		segment deleted meanwhile) returns -1 instead of an error.
 */
File
SegmentOpenMissingOk(int64 segment_id, bool missing_ok)
{
	SegFileEntry *entry;
	bool		found;
	char	   *path;
	File		file;

	if (segfile_cache == NULL)
		segfile_cache = Int64HashCreate("malachi segment files",
										sizeof(SegFileEntry), TopMemoryContext);
	entry = hash_search(segfile_cache, &segment_id, HASH_FIND, NULL);
	if (entry != NULL)
		return entry->file;

	path = SegmentPath(segment_id);
	segfile_flag_open();
	file = PathNameOpenFile(path, O_RDWR | PG_BINARY);
	if (file < 0 && missing_ok && errno == ENOENT)
	{
		pfree(path);
		return -1;
	}
	if (file < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open segment file \"%s\": %m", path)));
	entry = hash_search(segfile_cache, &segment_id, HASH_ENTER, &found);
	entry->file = file;
	entry->direct = -1;
	pfree(path);
	return file;
}

/*
 * segment_open_direct
 *		This backend's O_DIRECT File for a segment it has open, or -1 when
 *		direct I/O is not to be used.
 */
static File
segment_open_direct(int64 segment_id)
{
#ifdef O_DIRECT
	SegFileEntry *entry;
	char	   *path;

	if (!malachi_direct_io || direct_unsupported || segfile_cache == NULL)
		return -1;
	entry = hash_search(segfile_cache, &segment_id, HASH_FIND, NULL);
	if (entry == NULL)
		return -1;
	if (entry->direct >= 0)
		return entry->direct;
	path = SegmentPath(segment_id);
	segfile_flag_open();
	entry->direct = PathNameOpenFile(path, O_RDWR | O_DIRECT | PG_BINARY);
	if (entry->direct < 0)
	{
		if (errno != EINVAL)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open segment file \"%s\": %m", path)));
		ereport(LOG,
				(errmsg("could not open segment file \"%s\" for direct I/O: %m", path),
				 errdetail("This backend writes segments through the page cache from now on.")));
		direct_unsupported = true;
	}
	pfree(path);
	return entry->direct;
#else
	return -1;
#endif
}

/* Close this backend's File for a segment, if it has one. */
void
SegmentForget(int64 segment_id)
{
	SegFileEntry *entry;

	if (segfile_cache == NULL)
		return;
	entry = hash_search(segfile_cache, &segment_id, HASH_FIND, NULL);
	if (entry == NULL)
		return;
	segfile_close_entry(entry);
	hash_search(segfile_cache, &segment_id, HASH_REMOVE, NULL);
}

/*---- I/O ----*/

/* Raise the error of a failed segment write. */
static void
segment_write_error(int64 segment_id, uint64 pos)
{
	if (errno == 0)
		errno = ENOSPC;
	ereport(ERROR,
			(errcode_for_file_access(),
			 errmsg("could not write segment " INT64_FORMAT " at position " UINT64_FORMAT ": %m",
					segment_id, pos)));
}

/*
 * The test hook malachi.inject_disk_limit: a disk that is full at a size.
 * As a kernel does, a write that crosses the limit writes what fits (a
 * short write) and the next one fails with ENOSPC.  How much of want to
 * write at pos.
 */
static size_t
segment_disk_limit(int64 segment_id, size_t want, uint64 pos)
{
	if (malachi_inject_disk_limit < 0 ||
		pos + want <= (uint64) malachi_inject_disk_limit)
		return want;
	if (pos >= (uint64) malachi_inject_disk_limit)
	{
		errno = ENOSPC;
		segment_write_error(segment_id, pos);
	}
	return (size_t) ((uint64) malachi_inject_disk_limit - pos);
}

/*
 * Write len bytes at pos through file, all of them or an error (ENOSPC
 * included).  Returns false when file is a direct one and the kernel
 * refused a request (EINVAL): the caller writes the same bytes again
 * through the page cache.
 */
static bool
segment_write_all(File file, bool direct, int64 segment_id, const char *buf,
				  size_t len, uint64 pos)
{
	while (len > 0)
	{
		size_t		want = Min(len, (size_t) 64 * 1024 * 1024);
		int			n;

		errno = 0;
		n = FileWrite(file, (char *) buf,
					  segment_disk_limit(segment_id, want, pos),
					  (off_t) pos, PG_WAIT_EXTENSION);
		if (n < 0 && direct && errno == EINVAL)
			return false;
		if (n <= 0)
			segment_write_error(segment_id, pos);

		/*
		 * A short direct write of whole blocks (a disk filling up) goes on
		 * where it stopped, still aligned: the next write then fails with
		 * the reason (ENOSPC: disk_full).  The rest of any other would
		 * start off its block.
		 */
		if (direct && (size_t) n < want && n % APPEND_DIRECT_ALIGN != 0)
			ereport(ERROR,
					(errcode(ERRCODE_IO_ERROR),
					 errmsg("could not write segment " INT64_FORMAT " at position " UINT64_FORMAT ": wrote %d of %zu bytes with direct I/O",
							segment_id, pos, n, want)));
		buf += n;
		len -= n;
		pos += n;
	}
	return true;
}

/*
 * Write len bytes at pos through the page cache, all of them or an error
 * (ENOSPC included).  With malachi.fsync on, the write is cut at the file's
 * SEGMENT_WRITEBACK_CHUNK boundaries, and each piece's writeback starts as
 * soon as it is written (see the file's header).  At a boundary, not every
 * SEGMENT_WRITEBACK_CHUNK bytes of the batch: a piece ending mid-page would
 * send that page to the disk half written and dirty it again with the next
 * piece (where pages must stay stable under writeback, the next write
 * would also wait for it).
 */
void
SegmentWrite(File file, int64 segment_id, const char *buf, size_t len,
			 uint64 pos)
{
	while (len > 0)
	{
		/* up to the next chunk boundary of the file: whole pages go */
		size_t		n = malachi_fsync ?
			Min(len, SEGMENT_WRITEBACK_CHUNK - pos % SEGMENT_WRITEBACK_CHUNK) : len;

		(void) segment_write_all(file, false, segment_id, buf, n, pos);
		if (malachi_fsync)
			FileWriteback(file, (off_t) pos, (off_t) n, PG_WAIT_EXTENSION);
		buf += n;
		len -= n;
		pos += n;
	}
}

/*
 * SegmentWriteDirect
 *		SegmentWrite of whole blocks from an aligned buffer (append.c):
 *		with O_DIRECT when the segment directory allows it, so the bytes go
 *		from buf to the disk without a copy in the page cache.
 */
void
SegmentWriteDirect(File file, int64 segment_id, const char *buf, size_t len,
				   uint64 pos)
{
	File		direct;

	direct = segment_open_direct(segment_id);
	if (direct >= 0 &&
		segment_write_all(direct, true, segment_id, buf, len, pos))
		return;
	if (direct >= 0)
	{
		ereport(LOG,
				(errmsg("direct I/O refused by segment file of segment " INT64_FORMAT ": %m", segment_id),
				 errdetail("This backend writes segments through the page cache from now on.")));
		direct_unsupported = true;
	}
	SegmentWrite(file, segment_id, buf, len, pos);
}

/* Read up to len bytes at pos; returns how many there were. */
size_t
SegmentRead(File file, int64 segment_id, char *buf, size_t len, uint64 pos)
{
	size_t		done = 0;

	while (done < len)
	{
		int			n = FileRead(file, buf + done, len - done,
								 (off_t) (pos + done), PG_WAIT_EXTENSION);

		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read segment " INT64_FORMAT " at position " UINT64_FORMAT ": %m",
							segment_id, pos + done)));
		if (n == 0)
			break;
		done += n;
	}
	return done;
}

/* Make every byte written to the segment durable (fdatasync). */
void
SegmentSync(File file, int64 segment_id)
{
	int			fd = FileGetRawDesc(file);

	if (fd < 0)
	{
		/*
		 * The VFD was closed behind our back: touching it reopens it by
		 * path.  If that fails (the segment's file was removed or recycled
		 * meanwhile), say so; fdatasync of no descriptor would PANIC.
		 */
		if (FileSize(file) < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not reopen segment " INT64_FORMAT " to sync it: %m",
							segment_id)));
		fd = FileGetRawDesc(file);
	}
	pgstat_report_wait_start(PG_WAIT_EXTENSION);
	if (pg_fdatasync(fd) != 0)
	{
		pgstat_report_wait_end();
		ereport(data_sync_elevel(ERROR),
				(errcode_for_file_access(),
				 errmsg("could not fdatasync segment " INT64_FORMAT ": %m", segment_id)));
	}
	pgstat_report_wait_end();
}

/* Make the segment and its size durable (fsync): after a fence cut it. */
void
SegmentSyncAll(File file, int64 segment_id)
{
	if (FileSync(file, PG_WAIT_EXTENSION) < 0)
		ereport(data_sync_elevel(ERROR),
				(errcode_for_file_access(),
				 errmsg("could not fsync segment " INT64_FORMAT ": %m", segment_id)));
}

/* Cut the file at len (a torn tail, or preallocated space after a seal). */
void
SegmentTruncate(File file, int64 segment_id, uint64 len)
{
	if (FileTruncate(file, (off_t) len, PG_WAIT_EXTENSION) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not truncate segment " INT64_FORMAT " to " UINT64_FORMAT " bytes: %m",
						segment_id, len)));
}

/*
 * SegmentUnlink
 *		Remove a deleted segment's file; a file that is already gone is
 *		fine.  With malachi.max_spare_segments above 0, a file that is not
 *		empty is renamed to recycle-<id> instead, for the writer worker to
 *		make a spare of (SegmentRecycleTake).  Not durable: after
 *		a crash the file is either still an orphan segment file, which the
 *		sweeper removes, or a recycle- file.
 */
void
SegmentUnlink(int64 segment_id)
{
	char	   *path = SegmentPath(segment_id);
	struct stat st;

	SegmentForget(segment_id);

	/*
	 * A file with a second name is never recycled: a crash between the
	 * link and the unlink of a claim (SegmentCreate) leaves a spare and an
	 * orphan naming one file, and recycling the orphan would give that
	 * file to two segments.
	 */
	if (malachi_max_spare_segments > 0 && stat(path, &st) == 0 &&
		st.st_size > 0 && st.st_nlink == 1)
	{
		char		recycled[MAXPGPATH];

		segfile_recycled_path(recycled, RECYCLE_PREFIX, segment_id);
		if (rename(path, recycled) == 0)
		{
			/* for the writer worker to list the directory again */
			if (recycle_renames != NULL)
				pg_atomic_fetch_add_u64(recycle_renames, 1);
			pfree(path);
			return;
		}
	}
	if (unlink(path) < 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove segment file \"%s\": %m", path)));
	pfree(path);
}

/*
 * SegmentFileName
 *		Whether a file name in the segment directory is a segment's file
 *		(<id>.seg) or its index (<id>.idx); if so, its segment id and which.
 */
bool
SegmentFileName(const char *name, int64 *segment_id, bool *is_index)
{
	unsigned long long id;
	char		suffix[8];

	if (strlen(name) != 20 ||
		sscanf(name, "%16llx.%3s", &id, suffix) != 2 ||
		(strcmp(suffix, "seg") != 0 && strcmp(suffix, "idx") != 0))
		return false;
	*segment_id = (int64) id;
	*is_index = strcmp(suffix, "idx") == 0;
	return true;
}

/*
 * SegmentMaxId
 *		The largest segment id that has a file (0 when none), counting the
 *		ids in the names of recycled files: new ids must stay above it, so
 *		that a recreated extension never writes into a file some earlier
 *		segment left behind, and no segment ever has the id of the old
 *		batches a recycled spare still holds (their checksums would pass).
 */
int64
SegmentMaxId(void)
{
	const char *dirpath = SegmentDirectory();
	DIR		   *dir;
	struct dirent *de;
	int64		max = 0;
	int			pass;

	/*
	 * Two passes: the writer may rename recycle-<id> to spare-r<id> while
	 * one reads the directory, and a pass may then see neither name.  The
	 * writer renames each file once, so the next pass sees the new name.
	 */
	SegmentEnsureDirectory();
	for (pass = 0; pass < 2; pass++)
	{
		dir = AllocateDir(dirpath);
		while ((de = ReadDir(dir, dirpath)) != NULL)
		{
			int64		id;
			bool		is_index;
			unsigned long long recycled;

			if (SegmentFileName(de->d_name, &id, &is_index) && id > max)
				max = id;
			if ((sscanf(de->d_name, RECYCLE_PREFIX "%16llx", &recycled) == 1 ||
				 sscanf(de->d_name, RECYCLED_SPARE_PREFIX "%16llx", &recycled) == 1) &&
				(int64) recycled > max)
				max = (int64) recycled;
		}
		FreeDir(dir);
	}
	return max;
}

/*
 * SegmentMarkVoid
 *		Set the VOID flag of the batch at pos (its transaction aborted):
 *		rewrite its header with a CRC that covers the new flag.  The caller
 *		syncs.
 */
void
SegmentMarkVoid(File file, int64 segment_id, uint64 pos)
{
	CodecHeader header;
	CodecResult result;
	char	   *batch = SegmentReadBatch(file, segment_id, pos, &header, &result);

	if (batch == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("segment " INT64_FORMAT " has no valid batch at position " UINT64_FORMAT " to mark void: %s",
						segment_id, pos, CodecResultString(result))));
	CodecSetFlags(batch, segment_id, header.flags | CODEC_FLAG_VOID);
	SegmentWrite(file, segment_id, batch, CODEC_HEADER_SIZE, pos);
	pfree(batch);
}

/*---- scanning ----*/

/*
 * SegmentReadBatch
 *		Read and check the batch at pos: header, then payload and CRC.
 *		Returns the whole batch (palloc'd) with *result CODEC_OK, or NULL
 *		with the reason (CODEC_END, CODEC_TRAILER, a corruption).
 */
char *
SegmentReadBatch(File file, int64 segment_id, uint64 pos, CodecHeader *header,
				 CodecResult *result)
{
	char	   *buf = NULL;
	Size		cap = 0;

	return SegmentReadBatchInto(file, segment_id, pos, header, result, &buf, &cap);
}

/*
 * SegmentReadBatchInto
 *		SegmentReadBatch into a caller's buffer (*buf of *cap bytes; NULL
 *		and 0 the first time), grown in its memory context when too small:
 *		a reader of many batches allocates once, not once per batch.  The
 *		batch is valid until the buffer is used again.
 */
char *
SegmentReadBatchInto(File file, int64 segment_id, uint64 pos,
					 CodecHeader *header, CodecResult *result,
					 char **buf, Size *cap)
{
	char		hdr[CODEC_HEADER_SIZE];
	size_t		n = SegmentRead(file, segment_id, hdr, sizeof(hdr), pos);
	char	   *batch;
	size_t		len;
	int			attempt;
	CodecHeader again;

	if (n == 0)
	{
		*result = CODEC_END;
		return NULL;
	}
	*result = CodecDecodeHeader(hdr, n, header);
	if (*result != CODEC_OK)
		return NULL;
	len = CODEC_HEADER_SIZE + (size_t) header->payload_len;
	*buf = GrowBuffer(*buf, cap, len,
					  *buf ? GetMemoryChunkContext(*buf) : CurrentMemoryContext);
	batch = *buf;
	memcpy(batch, hdr, CODEC_HEADER_SIZE);
	if (SegmentRead(file, segment_id, batch + CODEC_HEADER_SIZE,
					header->payload_len, pos + CODEC_HEADER_SIZE) <
		header->payload_len)
	{
		*result = CODEC_SHORT;
		return NULL;
	}
	for (attempt = 0;; attempt++)
	{
		*result = CodecCheckBatch(batch, len, header, segment_id);
		if (*result == CODEC_BAD_CRC &&
			CodecTornVoid(batch, len, header, segment_id, pos))
			*result = CODEC_OK; /* a void mark a crash tore: void */
		if (*result != CODEC_BAD_CRC || attempt == 2)
			break;

		/*
		 * A void mark may have been rewriting this header as we read it
		 * (the only change ever made to written bytes): read the header
		 * again, and check again if it changed.
		 */
		if (SegmentRead(file, segment_id, hdr, sizeof(hdr), pos) < sizeof(hdr) ||
			memcmp(hdr, batch, CODEC_HEADER_SIZE) == 0 ||
			CodecDecodeHeader(hdr, sizeof(hdr), &again) != CODEC_OK ||
			CODEC_HEADER_SIZE + (size_t) again.payload_len != len)
			break;
		*header = again;
		memcpy(batch, hdr, CODEC_HEADER_SIZE);
	}
	if (*result != CODEC_OK)
		return NULL;
	return batch;
}

/* The size of a segment's file. */
uint64
SegmentSize(File file, int64 segment_id)
{
	off_t		size = FileSize(file);

	if (size < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read the size of segment " INT64_FORMAT ": %m",
						segment_id)));
	return (uint64) size;
}

/*
 * SegmentEndTrailer
 *		Does the file end in a valid seal trailer of this segment, right
 *		after byte_size bytes of data?  A fence cuts the file just past its
 *		trailer after writing and syncing it, so such a trailer proves that
 *		every byte before it was written whole, whatever a scan finds there.
 */
bool
SegmentEndTrailer(File file, int64 segment_id, CodecTrailer *trailer)
{
	uint64		size = SegmentSize(file, segment_id);
	char		buf[CODEC_TRAILER_SIZE];

	if (size < CODEC_TRAILER_SIZE)
		return false;
	if (SegmentRead(file, segment_id, buf, sizeof(buf),
					(uint64) (size - CODEC_TRAILER_SIZE)) != sizeof(buf))
		return false;
	return CodecDecodeTrailer(buf, sizeof(buf), trailer) == CODEC_OK &&
		trailer->segment_id == segment_id &&
		trailer->byte_size == (int64) (size - CODEC_TRAILER_SIZE);
}

/*
 * SegmentScan
 *		Walk the batches from position from (whose first offset is
 *		from_offset), checking every CRC, up to the end of the data: a zero
 *		block, the end of the file, a seal trailer, or a batch that does not
 *		check out (the tail is torn).  Never reads past what it validated.
 */
void
SegmentScan(File file, int64 segment_id, uint64 from, int64 from_offset,
			SegScan *scan)
{
	uint64		pos = from;
	int64		next = from_offset;
	int			txncap = 0;

	memset(scan, 0, sizeof(*scan));
	for (;;)
	{
		CodecHeader header;
		CodecResult result;
		char	   *batch;

		CHECK_FOR_INTERRUPTS();
		batch = SegmentReadBatch(file, segment_id, pos, &header, &result);
		if (batch == NULL)
		{
			if (result == CODEC_TRAILER)
			{
				char		buf[CODEC_TRAILER_SIZE];
				size_t		n = SegmentRead(file, segment_id, buf, sizeof(buf), pos);

				if (CodecDecodeTrailer(buf, n, &scan->trailer) == CODEC_OK &&
					scan->trailer.segment_id == segment_id &&
					scan->trailer.byte_size == (int64) pos &&
					scan->trailer.end_offset == next)
				{
					scan->sealed = true;
					break;
				}
				result = CODEC_BAD_HEADER;
			}
			if (result != CODEC_END)
			{
				scan->torn = true;
				scan->tail_error = result;
			}
			break;
		}
		if (header.base_offset != next)
		{
			/* a valid batch that does not continue the run: stale data */
			pfree(batch);
			scan->torn = true;
			scan->tail_error = CODEC_BAD_HEADER;
			break;
		}
		if (header.xid != 0 && !(header.flags & CODEC_FLAG_VOID))
		{
			if (scan->ntxn == txncap)
			{
				txncap = Max(64, txncap * 2);
				scan->txns = scan->txns ?
					repalloc_huge(scan->txns, sizeof(SegTxnBatch) * txncap) :
					palloc(sizeof(SegTxnBatch) * txncap);
			}
			scan->txns[scan->ntxn].pos = pos;
			scan->txns[scan->ntxn].xid = header.xid;
			scan->ntxn++;
		}
		next += header.record_count;
		pos += CODEC_HEADER_SIZE + header.payload_len;
		scan->nbatches++;
		scan->max_timestamp = Max(scan->max_timestamp, header.max_timestamp);
		pfree(batch);
	}
	scan->end_offset = next;
	scan->data_end = pos;
}
