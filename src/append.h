/*-------------------------------------------------------------------------
 *
 * append.h
 *	  Shared-memory append state of active segments: offsets, edges, fence.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_APPEND_H
#define MALACHI_APPEND_H

/* What a reader may see of a segment this node appends to. */
typedef struct AppendView
{
	int64		visible_offset; /* offsets below are written and durable */
	uint64		visible_bytes;	/* file position after those batches */
	bool		fenced;			/* no append can land any more */
	bool		fence_durable;	/* the seal trailer is on disk */
	int64		fenced_end;		/* end offset answered by the fence */
	uint64		fenced_size;	/* byte size answered by the fence */
} AppendView;

extern void AppendInit(void);
extern int	AppendAttach(int64 segment_id, int64 base_offset);
extern bool AppendBatch(int slotno, int64 segment_id, char *batch, size_t len,
						int nrecords, int64 *base_offset);
extern bool AppendFence(int slotno, int64 segment_id, int64 *end_offset,
						uint64 *byte_size);
extern bool AppendGetView(int slotno, int64 segment_id, AppendView *view);
extern void AppendRelease(int64 segment_id);
extern void AppendWaitBeyond(int slotno, int64 segment_id, int64 offset,
							 long timeout_ms);

#endif							/* MALACHI_APPEND_H */
