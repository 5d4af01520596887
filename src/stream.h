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

/* What one page did besides emitting records. */
typedef struct StreamPage
{
	int			count;			/* records emitted */
	bool		caught_up;		/* stopped at the readable end, not at max */
	int			nskips;
	StringInfoData skips;		/* jsonb text of the skips, oldest first */
} StreamPage;

extern void StreamRead(StreamPos *pos, int max_records, StreamEmit emit,
					   void *arg, StreamPage *page);
extern bool StreamWait(const StreamPos *pos, long timeout_ms);

#endif							/* MALACHI_STREAM_H */
