/*-------------------------------------------------------------------------
 *
 * inject.c
 *	  Named pause points for tests of races (isolation specs).
 *
 * The isolation tester sees only heavyweight-lock waits.  A session that
 * lists a point in malachi.inject_wait (superuser only) passes through it by
 * taking and releasing a shared advisory lock whose key is derived from the
 * point's name; a controlling session that holds that advisory lock
 * exclusively holds every such session at the point, visibly to the tester.
 * With the setting empty (the default) a point costs one string test.
 *
 * malachi.inject_disk_limit makes this session's segment writes fail with
 * ENOSPC past a file size, so that a full disk can be tested without one;
 * malachi.inject_free_bytes sets the free space the writer worker sees
 * before it fills a spare file.
 *
 *   key = 77000000 + the position of the point in inject_points[] + 1
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "inject.h"

char	   *malachi_inject_wait = NULL;
int			malachi_inject_disk_limit = -1;
int			malachi_inject_free_bytes = -1;

static const char *const inject_points[] = {
	INJECT_PRODUCE_ROUTED,
	INJECT_APPEND_RESERVED,
	INJECT_APPEND_WAITING,
	INJECT_FENCE_WAITING,
	INJECT_OPEN_BUSY,
	INJECT_SEAL_FENCED,
	INJECT_AFTER_FLUSH,
	INJECT_SCRUB_LISTED,
	INJECT_APPEND_LOADING,
	INJECT_STREAM_READ,
	INJECT_CHILD_STARTING,
	INJECT_RETENTION_DELETED,
	INJECT_HEAD_CREATED,
	INJECT_HEAD_LISTED,
	INJECT_GROUP_DERIVE,
	INJECT_FENCE_WRITING,
	INJECT_ORPHAN_CHECKED,
	INJECT_RESET_LISTED,
	INJECT_RECYCLE_FILE,
	INJECT_MANIFEST_WRITING,
	INJECT_CONSUME_LISTED,
	NULL
};

/* Define malachi.inject_wait. */
void
InjectInit(void)
{
	DefineCustomStringVariable("malachi.inject_wait",
							   "Pause points this session waits at (tests only).",
							   "A comma-separated list; see src/inject.c.",
							   &malachi_inject_wait, "",
							   PGC_SUSET, GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.inject_disk_limit",
							"Segment writes past this file size fail with ENOSPC (tests only; -1: off).",
							NULL,
							&malachi_inject_disk_limit, -1, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_BYTE | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.inject_free_bytes",
							"The free space the writer worker sees before it fills a spare (tests only; -1: the file system's).",
							NULL,
							&malachi_inject_free_bytes, -1, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_BYTE | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
}

/*
 * InjectWait
 *		Pass through a pause point: wait while a controlling session holds
 *		its advisory lock.
 */
void
InjectWait(const char *point)
{
	int			i;

	if (malachi_inject_wait == NULL || malachi_inject_wait[0] == '\0' ||
		strstr(malachi_inject_wait, point) == NULL)
		return;
	for (i = 0; inject_points[i] != NULL; i++)
	{
		if (strcmp(inject_points[i], point) == 0)
		{
			Datum		key = Int64GetDatum(77000000 + i + 1);

			(void) DirectFunctionCall1(pg_advisory_lock_shared_int8, key);
			(void) DirectFunctionCall1(pg_advisory_unlock_shared_int8, key);
			return;
		}
	}
	elog(ERROR, "unknown pause point \"%s\"", point);
}

/*
 * InjectFail
 *		Raise an error at a failure point listed in malachi.inject_wait, to
 *		test what a failure there leaves behind.
 */
void
InjectFail(const char *point)
{
	if (!InjectFailing(point))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("injected failure at \"%s\"", point)));
}

/*
 * InjectFailing
 *		Is a failure point listed in malachi.inject_wait?  For points that
 *		do something else than raise an error (InjectSyscallFails,
 *		produce-late).
 */
bool
InjectFailing(const char *point)
{
	return malachi_inject_wait != NULL && malachi_inject_wait[0] != '\0' &&
		strstr(malachi_inject_wait, point) != NULL;
}

/*
 * InjectSyscallFails
 *		InjectFailing that also sets errno to err when the point is listed,
 *		for a system call that it stands in for:
 *		InjectSyscallFails(point, EIO) ? -1 : fsync(fd).
 */
bool
InjectSyscallFails(const char *point, int err)
{
	if (!InjectFailing(point))
		return false;
	errno = err;
	return true;
}
