/*-------------------------------------------------------------------------
 *
 * cursor.h
 *	  Positions in a range's cross-epoch stream, and cursors that carry them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_CURSOR_H
#define MALACHI_CURSOR_H

#include "utils/array.h"

/*
 * One source of a range's stream still to be read: the records of range
 * source_id at offsets from offset on whose key hash lies in [key_lo,
 * key_hi).
 */
typedef struct StreamEntry
{
	int64		source_id;
	int64		key_lo;
	int64		key_hi;
	int64		offset;
} StreamEntry;

/*
 * Where a reader stands in range_id's stream: the sources it has not
 * finished, in stream order (the first is the one being read).  Sources
 * before the first are done.  The range's own records are always the last
 * source; an empty list means a sealed range's stream was read to its end.
 */
typedef struct StreamPos
{
	int64		range_id;
	int64		topic_id;
	int			n;
	int			cap;
	StreamEntry *entries;
} StreamPos;

/* A range's place in the history: what the stream needs to know of it. */
typedef struct StreamRange
{
	int64		range_id;
	int64		topic_id;
	int64		key_lo;
	int64		key_hi;
	int			nparents;
	int64	   *parents;
} StreamRange;

extern const StreamRange *StreamRangeGet(int64 range_id);
extern StreamPos *StreamStart(int64 range_id);
extern StreamPos *StreamPosNew(int64 range_id);
extern StreamPos *StreamPosCopy(const StreamPos *pos);
extern void StreamPosAppend(StreamPos *pos, const StreamEntry *entry);
extern void StreamPosRestrict(StreamPos *dst, const StreamPos *src);
extern int64 StreamPosOwnOffset(const StreamPos *pos);
extern void StreamPosValidate(const StreamPos *pos, const char *what);

extern text *CursorEncode(const StreamPos *pos);
extern StreamPos *CursorDecode(text *cursor, int64 range_id);
extern ArrayType *StreamPosToArray(const StreamPos *pos);
extern StreamPos *StreamPosFromArray(ArrayType *array, int64 range_id);

#endif							/* MALACHI_CURSOR_H */
