/*-------------------------------------------------------------------------
 *
 * append.h
 *	  Shared-memory append state of active segments: offsets, edges, fence.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_APPEND_H
#define MALACHI_APPEND_H

/* Transactional batches a slot tracks at once */
#define APPEND_MAX_TXN			128

/*
 * Direct I/O of large batches (see append.c): a batch of at least
 * APPEND_DIRECT_MIN bytes, in a buffer aligned to APPEND_DIRECT_ALIGN with
 * APPEND_DIRECT_SLACK bytes of room after it, gets a file region of whole
 * blocks (fillers before and after it) and is written with O_DIRECT.
 */
#define APPEND_DIRECT_ALIGN		4096
#define APPEND_DIRECT_MIN		(64 * 1024)
#define APPEND_DIRECT_SLACK		(APPEND_DIRECT_ALIGN + 64)

/* An offset range readers must skip: an aborted transaction's batch. */
typedef struct AppendVoid
{
	int64		start_offset;
	int64		end_offset;
} AppendVoid;

/* What a reader may see of a segment this node appends to. */
typedef struct AppendView
{
	int64		visible_offset; /* offsets below are readable */
	uint64		visible_bytes;	/* file position after those batches */
	bool		fenced;			/* no append can land any more */
	bool		in_doubt;		/* a transactional batch is in doubt */
	bool		fence_durable;	/* the seal trailer is on disk */
	int64		fenced_end;		/* end offset answered by the fence */
	uint64		fenced_size;	/* byte size answered by the fence */
	int			nvoids;			/* void batches below visible_offset */
	AppendVoid	voids[APPEND_MAX_TXN];
} AppendView;

/* An append between its write and its acknowledgement (slot pinned). */
typedef struct AppendTicket
{
	int			slotno;
	int64		segment_id;
	int64		base_offset;	/* the batch's first offset */
	int			nrecords;
	uint64		end;			/* file position after the batch (and its
								 * filler) */
	bool		transactional;
} AppendTicket;

/* A head's settled prefix (AppendSafePoints). */
typedef struct AppendSafePoint
{
	int64		segment_id;
	int64		base_offset;
	uint64		settled;		/* file position: a batch boundary */
} AppendSafePoint;

extern void AppendInit(void);
extern int	AppendLookup(int64 segment_id);
extern int	AppendAttach(int64 segment_id, int64 base_offset);
extern void AppendNoteFresh(int64 segment_id);
extern bool AppendBatchWrite(int slotno, int64 segment_id, char *batch,
							 size_t len, size_t cap, int nrecords,
							 bool transactional, long timeout_ms,
							 AppendTicket *ticket);
extern bool AppendBatchWait(AppendTicket *ticket);
extern void AppendBatchAbandon(AppendTicket *ticket);
extern void AppendResolve(int64 segment_id, int64 end_offset, bool committed);
extern bool AppendFence(int slotno, int64 segment_id, int64 *end_offset,
						uint64 *byte_size, long timeout_ms);
extern bool AppendGetView(int slotno, int64 segment_id, AppendView *view);
extern void AppendRelease(int64 segment_id);
extern int	AppendFreeSlots(void);
extern int	AppendPersistVoids(char *errbuf, size_t errlen);
extern int	AppendSafePoints(AppendSafePoint **points, uint64 min_advance);
extern void AppendSafePointSaved(int64 segment_id, uint64 settled);
extern void AppendWaitBeyond(int slotno, int64 segment_id, int64 offset,
							 long timeout_ms);

#endif							/* MALACHI_APPEND_H */
