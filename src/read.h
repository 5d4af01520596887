/*-------------------------------------------------------------------------
 *
 * read.h
 *	  Reading a range: records by offset, across sealed and active segments.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_READ_H
#define MALACHI_READ_H

#include "codec.h"

/* Called per record in offset order; return false to stop. */
typedef bool (*ReadEmit) (void *arg, int64 offset, const CodecRecord *rec);

extern int64 ReadRange(int64 range_id, int64 offset, ReadEmit emit, void *arg);
extern void ReadRecordValues(int64 range_id, int64 offset,
							 const CodecRecord *rec, Datum *values, bool *nulls);
extern void ReadForgetSegment(int64 segment_id);

#endif							/* MALACHI_READ_H */
