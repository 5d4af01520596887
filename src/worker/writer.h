/*-------------------------------------------------------------------------
 *
 * writer.h
 *	  The writer worker: control-plane changes in transactions of their own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_WRITER_H
#define MALACHI_WRITER_H

#include "postgres.h"

typedef enum WriterKind
{
	WRITER_OPEN_HEAD,				/* the range's active segment, opened if none */
	WRITER_RECORD_SEAL			/* record a fenced segment's end and size */
} WriterKind;

/* A request and its answer; one per backend, in shared memory. */
typedef struct WriterCall
{
	WriterKind	kind;
	int64		range_id;		/* OPEN_HEAD: in; RECORD_SEAL: out */
	int64		segment_id;		/* OPEN_HEAD: out; RECORD_SEAL: in */
	int32		seq;			/* OPEN_HEAD: out */
	int64		base_offset;	/* OPEN_HEAD: out */
	int64		end_offset;		/* RECORD_SEAL: in, and out (the recorded) */
	int64		byte_size;		/* RECORD_SEAL: in, and out (the recorded) */
	bool		already_sealed; /* RECORD_SEAL: out, sealed before this call */
} WriterCall;

extern void WriterInit(void);
extern void WriterRun(WriterCall *call);
extern int	WriterTry(WriterCall *call, int tolerated, long busy_timeout_ms);
extern uint64 WriterSegmentsEpoch(void);
extern void WriterSegmentsChanged(void);
extern int64 WriterCreatingSegment(void);

extern PGDLLEXPORT void malachi_writer_main(Datum main_arg);

#endif							/* MALACHI_WRITER_H */
