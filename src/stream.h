/*-------------------------------------------------------------------------
 *
 * stream.h
 *	  Reading a range's cross-epoch stream: pages, skips, long polls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_STREAM_H
#define MALACHI_STREAM_H

#include "lib/stringinfo.h"

#include "codec.h"
#include "cursor.h"

/* Called per record of a page: the range that holds it and its offset. */
typedef void (*StreamEmit) (void *arg, int64 range_id, int64 offset,
							const CodecRecord *rec);

/*
 * The most record bytes (keys, values, headers) a page returned as one
 * malachi.record[] holds, unless its first record alone is larger: an
 * array is at most 1 GB, and building it takes a few times its size.
 */
#define STREAM_PAGE_MAX_BYTES	(64 * 1024 * 1024)
/* what a record takes in the array besides its key, value and headers */
#define STREAM_RECORD_OVERHEAD	64

/* What one page did besides emitting records. */
typedef struct StreamPage
{
	int			count;			/* records emitted */
	int64		bytes;			/* their keys', values' and headers' bytes,
								 * and STREAM_RECORD_OVERHEAD each */
	bool		caught_up;		/* stopped at the readable end, not at a limit */
	int			nskips;
	StringInfoData skips;		/* jsonb text of the skips, oldest first */
} StreamPage;

extern void StreamRead(StreamPos *pos, int max_records, int64 max_bytes,
					   StreamEmit emit, void *arg, StreamPage *page);
extern bool StreamWait(const StreamPos *pos, long timeout_ms);

#endif							/* MALACHI_STREAM_H */
