/*-------------------------------------------------------------------------
 *
 * util.h
 *	  Small helpers several layers share: cached SPI plans, id-keyed hashes,
 *	  growing arrays, subtransactions, worker registration.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_UTIL_H
#define MALACHI_UTIL_H

#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/hsearch.h"
#include "utils/snapshot.h"

/* A query with its plan, prepared on first use and kept for the backend. */
typedef struct SpiQuery
{
	const char *sql;
	int			nargs;
	Oid			argtypes[5];
	SPIPlanPtr	plan;
} SpiQuery;

/*
 * Malachi's own heavyweight locks: advisory lock tags whose fourth field no
 * SQL function uses (pg_advisory_lock and friends use 1 and 2), so no role
 * can take or hold one from SQL.  They are still waited for interruptibly,
 * seen by the deadlock detector, shown in pg_locks (locktype advisory,
 * objsubid the kind) and released at transaction end or exit.
 */
#define MALACHI_LOCK_SWEEP		0x4d01	/* one sweeper pass at a time */
#define MALACHI_LOCK_GATE		0x4d02	/* a (group, range) gate, groups.c */

/* The tag of one of malachi's own locks, in this database. */
static inline void
MalachiLockTag(LOCKTAG *tag, uint32 key1, uint32 key2, uint16 kind)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, key1, key2, kind);
}

extern uint64 SpiQueryRun(SpiQuery *q, Datum *args, Snapshot snap);
/* The search_path of malachi's own queries (SpiPathPin, WorkerConnect) */
#define MALACHI_SEARCH_PATH		"pg_catalog, pg_temp"

extern int	SpiPathPin(void);
extern void SpiPathRestore(int level);
extern int64 SpiInt64(uint64 row, int col, bool *isnull);
extern HTAB *Int64HashCreate(const char *name, Size entrysize,
							 MemoryContext cxt);
extern void *GrowArray(void *array, int *cap, Size elem, int min,
					   MemoryContext cxt);
extern void *GrowBuffer(void *buf, Size *cap, Size need, MemoryContext cxt);
extern ErrorData *SubxactTry(void (*fn) (void *arg), void *arg);
extern bool SubxactKeepIf(bool (*fn) (void *arg), void *arg);
extern void RunAsSuperuser(void (*fn) (void *arg), void *arg);
extern bool WriteFileDurably(const char *path, const char *tmp,
							 const char *data, size_t len, int elevel);
extern void WorkerConnect(void);
extern void WorkerRegister(const char *name, const char *function,
						   int restart_seconds);

#endif							/* MALACHI_UTIL_H */
