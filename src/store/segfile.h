/*-------------------------------------------------------------------------
 *
 * segfile.h
 *	  Segment files: naming, I/O through the virtual file layer, scanning.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_SEGFILE_H
#define MALACHI_SEGFILE_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "storage/fd.h"

#include "codec.h"

/* A transactional batch a scan found (not yet marked void). */
typedef struct SegTxnBatch
{
	uint64		pos;			/* its file position */
	uint64		xid;			/* its FullTransactionId */
} SegTxnBatch;

/* What a scan of a segment file found. */
typedef struct SegScan
{
	int64		end_offset;		/* one past the last valid record */
	uint64		data_end;		/* file position after the last valid batch */
	int64		nbatches;		/* valid batches seen */
	int64		max_timestamp;	/* largest record timestamp seen, or 0 */
	bool		sealed;			/* a valid trailer follows the data */
	CodecTrailer trailer;		/* when sealed */
	bool		torn;			/* data past data_end that is not a batch */
	CodecResult tail_error;		/* why the scan stopped, when torn */
	int			ntxn;			/* transactional batches not marked void */
	SegTxnBatch *txns;			/* palloc'd, in file order */
} SegScan;

extern char *SegmentDirectory(void);
extern char *SegmentPath(int64 segment_id);
extern void SegmentEnsureDirectory(void);
extern void SegmentCreate(int64 segment_id);
extern File SegmentOpen(int64 segment_id);
extern void SegmentCheckExists(int64 segment_id);
extern bool SegmentIdTaken(int64 segment_id);
extern File SegmentOpenMissingOk(int64 segment_id, bool missing_ok);
extern void SegmentForget(int64 segment_id);
extern void SegmentFilesInit(void);
extern bool SegmentFileName(const char *name, int64 *segment_id,
							bool *is_index);
extern void SegmentWrite(File file, int64 segment_id, const char *buf,
						 size_t len, uint64 pos);
extern void SegmentWriteDirect(File file, int64 segment_id, const char *buf,
							   size_t len, uint64 pos);
extern size_t SegmentRead(File file, int64 segment_id, char *buf, size_t len,
						  uint64 pos);
extern void SegmentSync(File file, int64 segment_id);
extern void SegmentSyncAll(File file, int64 segment_id);
extern void SegmentTruncate(File file, int64 segment_id, uint64 len);
extern uint64 SegmentSize(File file, int64 segment_id);
extern void SegmentUnlink(int64 segment_id);
extern void SegmentMarkVoid(File file, int64 segment_id, uint64 pos);
extern int64 SegmentMaxId(void);

/* Spare files: zero-filled ahead of need, claimed by new segments. */
typedef struct SpareFill
{
	int			fd;				/* the spare being filled, or -1 */
	char		path[MAXPGPATH];	/* its temporary name */
	uint64		size;			/* its target size */
	uint64		done;			/* bytes zero-filled so far */
} SpareFill;

/*
 * Files of deleted segments waiting to become spares: their names and, per
 * process (pgprocno, one entry per slot of the shared open-file flags),
 * the close count to pass (PG_UINT64_MAX: none).
 */
typedef struct RecycleWait
{
	List	   *names;			/* recycle- file names; NIL when no wait */
	uint64	   *closes;
	TimestampTz since;			/* when the wait began */
	bool		finishing;		/* the wait is over: files are being handled */
	bool		give_up;		/* ... by removing every one of them */
	int			next;			/* index in names of the next file to handle */
	bool		removing;		/* that file is being cut down to be removed */
} RecycleWait;

extern bool SegmentRecycleTake(RecycleWait *wait);
extern bool SegmentRecycleReady(const RecycleWait *wait);
extern bool SegmentRecycleFinish(RecycleWait *wait, bool give_up);
extern int	SegmentSpareCount(void);
extern void SegmentSpareBegin(SpareFill *fill, uint64 size);
extern bool SegmentSpareStep(SpareFill *fill);
extern bool SegmentSpareRoom(uint64 size, uint64 done, uint64 *free_bytes,
							 uint64 *needed);
extern void SegmentSpareDiscard(SpareFill *fill);
extern void SegmentSpareCleanup(void);
extern bool SegmentEndTrailer(File file, int64 segment_id,
							  CodecTrailer *trailer);
extern void SegmentScan(File file, int64 segment_id, uint64 from,
						int64 from_offset, SegScan *scan);
extern char *SegmentReadBatch(File file, int64 segment_id, uint64 pos,
							  CodecHeader *header, CodecResult *result);
extern char *SegmentReadBatchInto(File file, int64 segment_id, uint64 pos,
								  CodecHeader *header, CodecResult *result,
								  char **buf, Size *cap);

#endif							/* MALACHI_SEGFILE_H */
