/*-------------------------------------------------------------------------
 *
 * read.h
 *	  Reading a range: records by offset, across sealed and active segments.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_READ_H
#define MALACHI_READ_H

#include "datatype/timestamp.h"
#include "nodes/execnodes.h"

#include "codec.h"

/* Called per record in offset order; return false to stop. */
typedef bool (*ReadEmit) (void *arg, int64 offset, const CodecRecord *rec);

/* Told of offsets [from, to) a read stepped over: no longer stored. */
typedef void (*ReadSkip) (void *arg, int64 from, int64 to);

extern int64 ReadRange(int64 range_id, int64 offset, ReadEmit emit, void *arg);
extern int64 ReadRangeSkipping(int64 range_id, int64 offset, ReadEmit emit,
							   ReadSkip skip, void *arg);
extern int64 ReadOffsetForTime(int64 range_id, TimestampTz ts);
extern int64 ReadRangeEnd(int64 range_id, bool *sealed);
extern void ReadWaitBeyond(int64 range_id, int64 offset, long timeout_ms);
extern void ReadRecordValues(int64 range_id, int64 offset,
							 const CodecRecord *rec, Datum *values, bool *nulls);
extern void ReadPutRecord(ReturnSetInfo *rsinfo, int64 range_id, int64 offset,
						  const CodecRecord *rec);
extern void ReadForgetSegment(int64 segment_id);
extern bool ReadSaveHeadIndex(int64 segment_id, int64 base_offset,
							  uint64 settled);

#endif							/* MALACHI_READ_H */
