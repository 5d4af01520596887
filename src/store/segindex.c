/*-------------------------------------------------------------------------
 *
 * segindex.c
 *	  A segment's sparse index file: offsets and timestamps to positions.
 *
 * <id>.idx beside the segment's file holds points of the segment's sparse
 * index (a batch every 64 KiB or so, read.c decides which): the batch's
 * first offset, its file position and the newest timestamp of the batches
 * before it; and the newest timestamp of every batch it covers.  Two kinds:
 *
 * - complete: a sealed segment's whole index, written by the first reader
 *   of the segment (read.c);
 * - a head's settled prefix, written by the sweeper (sweep.c): only points
 *   before which every batch is durable and settled (committed, immediate,
 *   or void with its flag on disk).  A head's recovery after a start scans
 *   from the last of them instead of from the start of the file (append.c),
 *   and a reader of the segment once sealed completes it.
 *
 * Rules:
 * - The index is an optimisation: a file that is missing, damaged or of
 *   another version is ignored (and rebuilt by whoever needs it); a failed
 *   save is logged, never an error.
 * - A save writes <id>.idx.<pid>.tmp (a name of its own: a reader and the
 *   sweeper may save the same segment's index at once), fsyncs it and
 *   renames it over the index; the CRC32C over the whole file catches a
 *   torn one.  A crash can leave the tmp file: the sweeper's orphan step
 *   removes it (SegmentIndexTmpName).
 * - A head's recovery trusts only a head's index (not complete): a
 *   complete one is written by a reader, which does not make the commits
 *   it saw durable, and a crash can take a seal back (append.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"

#include "segfile.h"
#include "segindex.h"
#include "util.h"

#define SEGINDEX_MAGIC		0x49434c4d	/* "MLCI" read little-endian */

/* Version 1 had points without timestamps: such a file is ignored. */
#define SEGINDEX_VERSION	2

/* Most points a file may hold (a 1 GiB segment has about 16,000). */
#define SEGINDEX_MAX_POINTS	(16 * 1024 * 1024)

/* The file: this head, the points, then a CRC32C of both. */
typedef struct SegIndexHead
{
	uint32		magic;
	uint32		version;
	uint32		npoints;
	uint32		complete;		/* 1 or 0 */
	int64		max_ts;
} SegIndexHead;

/* Path of a segment's index file. */
char *
SegmentIndexPath(int64 segment_id)
{
	return psprintf("%s/%016llx.idx", SegmentDirectory(),
					(unsigned long long) segment_id);
}

/* CRC32C of an index file's head and points. */
static pg_crc32c
segindex_crc(const SegIndexHead *head, const SegIndexPoint *points)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, head, sizeof(*head));
	COMP_CRC32C(crc, points, sizeof(SegIndexPoint) * head->npoints);
	FIN_CRC32C(crc);
	return crc;
}

/*
 * SegmentIndexLoad
 *		Read a segment's index file into index, the points allocated in
 *		cxt.  False (index untouched) when it is missing, damaged, empty or
 *		of another version.
 */
bool
SegmentIndexLoad(int64 segment_id, MemoryContext cxt, SegIndexFile *index)
{
	char	   *path = SegmentIndexPath(segment_id);
	int			fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	SegIndexHead head;
	pg_crc32c	stored;
	SegIndexPoint *points;
	bool		ok = false;

	pfree(path);
	if (fd < 0)
		return false;
	if (read(fd, &head, sizeof(head)) == sizeof(head) &&
		head.magic == SEGINDEX_MAGIC && head.version == SEGINDEX_VERSION &&
		head.npoints > 0 && head.npoints < SEGINDEX_MAX_POINTS &&
		head.complete <= 1)
	{
		size_t		len = sizeof(SegIndexPoint) * head.npoints;

		points = MemoryContextAlloc(cxt, len);
		if (read(fd, points, len) == (ssize_t) len &&
			read(fd, &stored, sizeof(stored)) == sizeof(stored) &&
			EQ_CRC32C(segindex_crc(&head, points), stored))
		{
			index->npoints = (int) head.npoints;
			index->points = points;
			index->max_ts = head.max_ts;
			index->complete = head.complete == 1;
			ok = true;
		}
		else
			pfree(points);
	}
	CloseTransientFile(fd);
	return ok;
}

/*
 * SegmentIndexSave
 *		Write a segment's index file durably (tmp, fsync, rename).  A
 *		failure is logged, and the answer false: reads never fail for the
 *		index.
 */
bool
SegmentIndexSave(int64 segment_id, const SegIndexFile *index)
{
	char	   *path = SegmentIndexPath(segment_id);
	char	   *tmp = psprintf("%s.%d.tmp", path, MyProcPid);
	SegIndexHead head = {SEGINDEX_MAGIC, SEGINDEX_VERSION,
	(uint32) index->npoints, index->complete ? 1 : 0, index->max_ts};
	size_t		len = sizeof(SegIndexPoint) * index->npoints;
	pg_crc32c	crc = segindex_crc(&head, index->points);
	char	   *data = palloc(sizeof(head) + len + sizeof(crc));
	bool		ok;

	memcpy(data, &head, sizeof(head));
	memcpy(data + sizeof(head), index->points, len);
	memcpy(data + sizeof(head) + len, &crc, sizeof(crc));
	ok = WriteFileDurably(path, tmp, data, sizeof(head) + len + sizeof(crc),
						  LOG);
	pfree(data);
	pfree(tmp);
	pfree(path);
	return ok;
}

/* Remove a segment's index file, if it has one. */
void
SegmentIndexRemove(int64 segment_id)
{
	char	   *path = SegmentIndexPath(segment_id);

	if (unlink(path) < 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
	pfree(path);
}

/*
 * Is a file name an index being written: <id>.idx.<pid>.tmp, or
 * <id>.idx.tmp as builds before this one named it?
 */
bool
SegmentIndexTmpName(const char *name)
{
	const char *rest;

	if (strspn(name, "0123456789abcdef") != 16 || strncmp(name + 16, ".idx.", 5) != 0)
		return false;
	rest = name + 21;
	rest += strspn(rest, "0123456789");
	return strcmp(rest, "tmp") == 0 ||
		(rest > name + 21 && strcmp(rest, ".tmp") == 0);
}
