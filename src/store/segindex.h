/*-------------------------------------------------------------------------
 *
 * segindex.h
 *	  A segment's sparse index file: offsets and timestamps to positions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_SEGINDEX_H
#define MALACHI_SEGINDEX_H

#include "utils/palloc.h"

/* A point of a segment's sparse index: a batch, and what precedes it. */
typedef struct SegIndexPoint
{
	int64		base_offset;	/* first offset of the batch */
	uint64		pos;			/* file position of the batch */
	int64		max_ts_before;	/* newest timestamp of the segment's batches
								 * before this one; PG_INT64_MIN if none */
} SegIndexPoint;

/* An index as its file holds it. */
typedef struct SegIndexFile
{
	int			npoints;
	SegIndexPoint *points;		/* ascending by position */
	int64		max_ts;			/* newest timestamp of the batches indexed
								 * (an upper bound); PG_INT64_MIN if none */
	bool		complete;		/* covers the whole sealed segment; else a
								 * head's settled prefix */
} SegIndexFile;

extern char *SegmentIndexPath(int64 segment_id);
extern bool SegmentIndexLoad(int64 segment_id, MemoryContext cxt,
							 SegIndexFile *index);
extern bool SegmentIndexSave(int64 segment_id, const SegIndexFile *index);
extern void SegmentIndexRemove(int64 segment_id);
extern bool SegmentIndexTmpName(const char *name);

#endif							/* MALACHI_SEGINDEX_H */
