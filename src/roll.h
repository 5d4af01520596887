/*-------------------------------------------------------------------------
 *
 * roll.h
 *	  Rolling heads through fences; splitting and merging ranges.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_ROLL_H
#define MALACHI_ROLL_H

extern int64 HeadSeal(int64 segment_id, int64 base_offset, bool *already,
					  long fence_timeout_ms, long busy_timeout_ms);
extern int64 RangeRoll(int64 range_id);

#endif							/* MALACHI_ROLL_H */
