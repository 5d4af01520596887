/*-------------------------------------------------------------------------
 *
 * util.c
 *	  Small helpers several layers share: cached SPI plans, id-keyed hashes,
 *	  growing buffers, subtransactions, worker registration, durable small
 *	  files.
 *
 * SPI helpers are called between SPI_connect and SPI_finish by their
 * callers; plans are kept for the life of the backend (SPI_keepplan) and
 * replanned by PostgreSQL when the tables they use change.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "executor/spi.h"
#include "postmaster/bgworker.h"
#include "storage/fd.h"
#include "utils/guc.h"
#include "utils/resowner.h"
#include "utils/hsearch.h"

#include "settings.h"
#include "util.h"

/*
 * SpiQueryRun
 *		Execute a query, preparing its plan on first use; with a snapshot,
 *		read as of it instead of the transaction's.  Returns the number of
 *		rows processed.  Queries run with read_only = false, so under READ
 *		COMMITTED each sees the latest committed rows.
 */
uint64
SpiQueryRun(SpiQuery *q, Datum *args, Snapshot snap)
{
	int			rc;
	int			path_level = SpiPathPin();

	if (q->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(q->sql, q->nargs, q->argtypes);

		if (plan == NULL)
			elog(ERROR, "could not prepare malachi query \"%s\": %s",
				 q->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "could not keep the plan of \"%s\"", q->sql);
		q->plan = plan;
	}
	if (snap != NULL)
		rc = SPI_execute_snapshot(q->plan, args, NULL, snap,
								  InvalidSnapshot, false, true, 0);
	else
		rc = SPI_execute_plan(q->plan, args, NULL, false, 0);
	if (rc < 0)
		elog(ERROR, "malachi query \"%s\" failed: %s",
			 q->sql, SPI_result_code_string(rc));
	SpiPathRestore(path_level);
	return SPI_processed;
}

/*
 * RunAsSuperuser
 *		Run fn(arg) as the bootstrap superuser, in a security-restricted
 *		operation, and switch back (an error switches back too, with its
 *		transaction).  For malachi's own queries on tables the caller may
 *		not write or lock (their rows must agree with the segment files),
 *		behind functions only the right roles may execute.  Every name in
 *		those queries is qualified or resolved with a pinned search_path,
 *		pinned here once for them all (an error unwinds it with its
 *		(sub)transaction, as SpiPathPin says).
 */
void
RunAsSuperuser(void (*fn) (void *arg), void *arg)
{
	Oid			save_user;
	int			save_sec;
	int			path_level;

	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	/* pinned once for all of fn's queries (SpiQueryRun then keeps it) */
	path_level = SpiPathPin();
	PG_TRY();
	{
		fn(arg);
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_user, save_sec);
	}
	PG_END_TRY();
	SpiPathRestore(path_level);
}

/*
 * SpiPathPin
 *		Plan and run malachi's own queries with search_path pg_catalog,
 *		pg_temp, whoever calls: a function or operator another role created
 *		in a schema of the caller's path must never stand in for a built-in
 *		one in them (and run with the caller's rights).  Returns the level
 *		to give SpiPathRestore; an error unwinds it with its (sub)transaction.
 */
int
SpiPathPin(void)
{
	int			level;

	/* the workers' own path (WorkerConnect), or a caller's pinned already */
	if (namespace_search_path != NULL &&
		strcmp(namespace_search_path, MALACHI_SEARCH_PATH) == 0)
		return -1;
	level = NewGUCNestLevel();
	(void) set_config_option("search_path", MALACHI_SEARCH_PATH,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	return level;
}

/* SpiPathRestore: the caller's search_path again (see SpiPathPin). */
void
SpiPathRestore(int level)
{
	if (level >= 0)
		AtEOXact_GUC(true, level);
}

/*
 * subxact_run
 *		Run fn(arg) in an internal subtransaction of its own: released into
 *		the caller's when fn returns true, rolled back when it returns false
 *		or raises an error, which is then copied into the caller's memory
 *		context (*edata; NULL without one).  Returns whether it was kept.
 */
static bool
subxact_run(bool (*fn) (void *arg), void *arg, ErrorData **edata)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile error = NULL;
	volatile bool keep = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		keep = fn(arg);
		if (keep)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		error = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	*edata = error;
	return keep && error == NULL;
}

/* A SubxactTry step, for subxact_run. */
typedef struct SubxactStep
{
	void		(*fn) (void *arg);
	void	   *arg;
} SubxactStep;

static bool
subxact_step(void *arg)
{
	SubxactStep *step = arg;

	step->fn(step->arg);
	return true;
}

/*
 * SubxactTry
 *		Run fn(arg) in an internal subtransaction of its own.  NULL when it
 *		returned (the subtransaction is released into the caller's); else
 *		the error it raised, copied into the caller's memory context, with
 *		the subtransaction rolled back (its database changes undone, its
 *		files, locks and buffers released).  For a step whose failure the
 *		caller reports and goes on from.  A cancel (a user's, or
 *		statement_timeout) is raised again: it ends the caller too.
 */
ErrorData *
SubxactTry(void (*fn) (void *arg), void *arg)
{
	SubxactStep step = {fn, arg};
	ErrorData  *edata;

	(void) subxact_run(subxact_step, &step, &edata);
	if (edata != NULL && edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
		ReThrowError(edata);
	return edata;
}

/*
 * SubxactKeepIf
 *		Run fn(arg) in an internal subtransaction of its own, kept (released
 *		into the caller's) when fn returns true and rolled back when it
 *		returns false: for an attempt that must give back the locks it took
 *		when it fails, row locks included, which only the end of their
 *		subtransaction releases.  An error fn raises is raised again, once
 *		the subtransaction is rolled back.  Returns what fn returned.
 */
bool
SubxactKeepIf(bool (*fn) (void *arg), void *arg)
{
	ErrorData  *edata;
	bool		kept = subxact_run(fn, arg, &edata);

	if (edata != NULL)
		ReThrowError(edata);
	return kept;
}

/*
 * WorkerConnect
 *		Connect a malachi worker (writer, sweeper, supervisor) to
 *		malachi.database, its transactions READ COMMITTED whatever
 *		default_transaction_isolation says: they lock rows (often NOWAIT)
 *		as of their latest versions, and a REPEATABLE READ or SERIALIZABLE
 *		snapshot would fail them with serialization errors no caller
 *		expects.  Its search_path is pg_catalog only: it runs as a
 *		superuser, and a function or operator another role created in a
 *		schema of the default path must never stand in for a built-in one.
 */
void
WorkerConnect(void)
{
	BackgroundWorkerInitializeConnection(malachi_database, NULL, 0);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", MALACHI_SEARCH_PATH,
					PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * WorkerRegister
 *		Register one of malachi's background workers: connected to
 *		malachi.database, started after crash recovery, restarted
 *		restart_seconds after it exits.  Called from _PG_init.
 */
void
WorkerRegister(const char *name, const char *function, int restart_seconds)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = restart_seconds;
	strlcpy(worker.bgw_library_name, "malachi", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker.bgw_name, name, BGW_MAXLEN);
	strlcpy(worker.bgw_type, name, BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* Column col (from 1) of a result row as int64; -1 and *isnull for NULL. */
int64
SpiInt64(uint64 row, int col, bool *isnull)
{
	bool		null;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
								  col, &null);

	if (isnull)
		*isnull = null;
	return null ? -1 : DatumGetInt64(d);
}

/*
 * GrowArray
 *		Double the capacity of an array of *cap elements of elem bytes (at
 *		least to min), allocating it in cxt if it is NULL; return it.  *cap
 *		changes only once the allocation has succeeded, so that a failed one
 *		leaves the array and its capacity as they were.
 */
void *
GrowArray(void *array, int *cap, Size elem, int min, MemoryContext cxt)
{
	int			newcap = Max(min, *cap * 2);
	void	   *grown = array ? repalloc(array, elem * newcap) :
		MemoryContextAlloc(cxt, elem * newcap);

	*cap = newcap;
	return grown;
}

/*
 * GrowBuffer
 *		A scratch buffer of at least need bytes: buf itself when its *cap
 *		bytes are enough, else a new one (its contents not kept) of double
 *		the capacity or need, allocated in cxt before buf is freed, so that
 *		a failed allocation leaves buf and *cap as they were.
 */
void *
GrowBuffer(void *buf, Size *cap, Size need, MemoryContext cxt)
{
	Size		newcap;
	void	   *fresh;

	if (buf != NULL && *cap >= need)
		return buf;
	newcap = Max(need, *cap * 2);
	fresh = MemoryContextAllocHuge(cxt, newcap);
	if (buf != NULL)
		pfree(buf);
	*cap = newcap;
	return fresh;
}

/* A backend-local hash table keyed by an int64 id. */
HTAB *
Int64HashCreate(const char *name, Size entrysize, MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = entrysize;
	ctl.hcxt = cxt;
	return hash_create(name, 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * WriteFileDurably
 *		Write a small file durably: tmp (a name of the caller's, so that
 *		two processes never share one), synced, renamed over path (and the
 *		directory synced).  A failure is reported at elevel and removes
 *		tmp; below ERROR the answer is false and the old file, if any,
 *		stays as it was.
 */
bool
WriteFileDurably(const char *path, const char *tmp, const char *data,
				 size_t len, int elevel)
{
	int			fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	const char *failed = NULL;

	if (fd < 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not create \"%s\": %m", tmp)));
		return false;
	}
	errno = 0;
	if (write(fd, data, len) != (ssize_t) len)
	{
		if (errno == 0)
			errno = ENOSPC;		/* a short write sets none */
		failed = "write";
	}
	else if (pg_fsync(fd) != 0)
		failed = "fsync";
	if (failed)
	{
		int			save_errno = errno;

		(void) CloseTransientFile(fd);
		(void) unlink(tmp);
		errno = save_errno;
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not %s \"%s\": %m", failed, tmp)));
		return false;
	}
	if (CloseTransientFile(fd) != 0)
	{
		ereport(elevel,
				(errcode_for_file_access(),
				 errmsg("could not close \"%s\": %m", tmp)));
		return false;
	}
	return durable_rename(tmp, path, elevel) == 0;
}
