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

extern uint64 SpiQueryRun(SpiQuery *q, Datum *args, Snapshot snap);
extern int64 SpiInt64(uint64 row, int col, bool *isnull);
extern HTAB *Int64HashCreate(const char *name, Size entrysize,
							 MemoryContext cxt);
extern void *GrowArray(void *array, int *cap, Size elem, int min,
					   MemoryContext cxt);
extern void *GrowBuffer(void *buf, Size *cap, Size need, MemoryContext cxt);
extern ErrorData *SubxactTry(void (*fn) (void *arg), void *arg);
extern ErrorData *SubxactTryUndone(void (*fn) (void *arg), void *arg);
extern bool WriteFileDurably(const char *path, const char *tmp,
							 const char *data, size_t len, int elevel);
extern void WorkerConnect(void);
extern void WorkerRegister(const char *name, const char *function,
						   int restart_seconds);

#endif							/* MALACHI_UTIL_H */
