/*-------------------------------------------------------------------------
 *
 * roll.c
 *	  Splitting and merging ranges.
 *
 * A split seals an active range and adds its two halves as active children;
 * a merge seals two active buddies and adds their union as the child of
 * both.  A range never changes its slice, and a sealed range never becomes
 * active again (the table's triggers refuse both).
 *
 * Rules:
 * - A split or merge locks every range it seals FOR NO KEY UPDATE before
 *   checking that it is still active: concurrent splits and merges of one
 *   range serialize on that row lock, and the loser sees the winner's seal and
 *   fails with range_not_active.  Merges lock the lower id first, so two
 *   merges never deadlock each other.
 * - Only the ranges involved are locked: changes to other ranges of the
 *   topic proceed in parallel (no per-topic queue).  The topic's row is
 *   held FOR KEY SHARE first (it only keeps the topic from being dropped,
 *   and conflicts with nothing else), in the same order drop_topic takes
 *   its locks: topic, then ranges.
 * - Both run in the caller's transaction, but first fence the heads of the
 *   ranges they seal and record those seals in the writer's own
 *   transactions (rule 2: no record can land in a sealed parent).  A
 *   producer racing the split finds the head fenced, cannot open another
 *   head on the parent while the split holds its row lock (the writer
 *   takes that lock NOWAIT and the producer backs off), and after the
 *   split commits routes to a child.  If the split rolls back, the parent
 *   simply gets a new head at the fenced end.
 * - A roll (by size, on demand, or before a split) fences at the store and
 *   records exactly the fence's answer; a seal that finds the segment
 *   already sealed converges on the recorded length (rule 3).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"

#include "append.h"
#include "catalog.h"
#include "errors.h"
#include "inject.h"
#include "writer.h"
#include "keyspace.h"
#include "roll.h"

PG_FUNCTION_INFO_V1(malachi_split_range);
PG_FUNCTION_INFO_V1(malachi_merge_ranges);
PG_FUNCTION_INFO_V1(malachi_roll);

/*---- rolling heads ----*/

/*
 * HeadSeal
 *		Fence a head at the store and record the seal in the control plane
 *		with exactly the fence's answer; free its append slot.  Returns the
 *		recorded end offset; *already says it had been recorded before.
 *		Returns -1 when the segment's row is gone (its topic was dropped
 *		while it was fenced): there is no seal to record, and the caller
 *		reports what is missing, as the open of a head does.
 *		fence_timeout_ms: see AppendFence (0: wait as long as it takes);
 *		busy_timeout_ms: how long to back off a segment row another
 *		transaction holds (a drop_topic still open) before failing with
 *		lock_not_available (0: as long as it takes).
 */
int64
HeadSeal(int64 segment_id, int64 base_offset, bool *already,
		 long fence_timeout_ms, long busy_timeout_ms)
{
	int64		end_offset;
	uint64		byte_size;
	WriterCall	call;

	/* a slot unloaded under us is reloaded from the file, fence included */
	while (!AppendFence(AppendAttach(segment_id, base_offset), segment_id,
						&end_offset, &byte_size, fence_timeout_ms))
		CHECK_FOR_INTERRUPTS();
	InjectWait(INJECT_SEAL_FENCED);
	InjectFail(INJECT_FAIL_SEAL_FENCED);

	memset(&call, 0, sizeof(call));
	call.kind = WRITER_RECORD_SEAL;
	call.segment_id = segment_id;
	call.end_offset = end_offset;
	call.byte_size = (int64) byte_size;
	if (WriterTry(&call, ERRCODE_MALACHI_NO_SUCH_SEGMENT, busy_timeout_ms) != 0)
	{
		AppendRelease(segment_id);
		return -1;
	}
	if (call.already_sealed && call.end_offset != end_offset)
		ereport(WARNING,
				(errmsg("segment " INT64_FORMAT " was recorded sealed at offset " INT64_FORMAT ", its fence answered " INT64_FORMAT,
						segment_id, call.end_offset, end_offset)));
	AppendRelease(segment_id);
	if (already)
		*already = call.already_sealed;
	return call.end_offset;
}

/*
 * RangeRoll
 *		Seal a range's head now; returns the sealed segment's id, 0 when
 *		the range has no head, or -1 when its topic was dropped meanwhile
 *		(see HeadSeal).
 */
int64
RangeRoll(int64 range_id)
{
	int64		segment_id;
	int64		base_offset;

	if (!CatalogRangeHead(range_id, &segment_id, &base_offset))
		return 0;
	if (HeadSeal(segment_id, base_offset, NULL, 0, 0) < 0)
		return -1;
	return segment_id;
}

/*
 * roll_seal_range
 *		Seal a locked active range: roll its head, then record the range's
 *		final end (its newest segment's end), which stays when retention
 *		deletes the range's segments.  No head can open meanwhile: the
 *		writer opens one only under the range's row lock, which the caller
 *		holds.
 */
static void
roll_seal_range(int64 range_id)
{
	int64		end_offset;

	(void) RangeRoll(range_id);
	if (!CatalogRangeLastEnd(range_id, &end_offset))
		elog(ERROR, "range " INT64_FORMAT " still has a head after its roll",
			 range_id);
	CatalogSealRange(range_id, end_offset);
}

/*
 * roll_lock_active
 *		Lock a range's topic (KEY SHARE) and then the range (NO KEY UPDATE), and
 *		check that it is active (no_such_range, range_not_active otherwise).
 */
static void
roll_lock_active(int64 range_id, RangeRow *row)
{
	if (!CatalogLockRangeTopic(range_id) || !CatalogLockRange(range_id, row))
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
				 errmsg("range " INT64_FORMAT " does not exist", range_id)));
	if (!row->active)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_RANGE_NOT_ACTIVE),
				 errmsg("range " INT64_FORMAT " is not active", range_id),
				 errdetail("It was sealed by an earlier split or merge."),
				 errhint("Look up the active ranges with malachi.active_range_ids(topic).")));
}

/*
 * RangeSplit
 *		Seal an active range and add its two halves; returns their ids.
 */
static void
RangeSplit(int64 range_id, int64 *left_id, int64 *right_id)
{
	RangeRow	row;
	KeySlice	left;
	KeySlice	right;

	roll_lock_active(range_id, &row);
	if (!SliceSplit(row.slice, &left, &right))
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_RANGE_TOO_SMALL),
				 errmsg("range " INT64_FORMAT " is too small to split", range_id),
				 errdetail("Its slice [" UINT64_FORMAT ", " UINT64_FORMAT ") holds a single key hash.",
						   row.slice.lo, row.slice.hi)));

	roll_seal_range(range_id);
	*left_id = CatalogInsertRange(row.topic_id, left, &range_id, 1, true);
	*right_id = CatalogInsertRange(row.topic_id, right, &range_id, 1, true);
}

/*
 * RangeMerge
 *		Seal two active buddy ranges and add their union; returns its id.
 */
static int64
RangeMerge(int64 a, int64 b)
{
	RangeRow	ra;
	RangeRow	rb;
	RangeRow   *lower;
	int64		parents[2];

	if (a == b)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NOT_BUDDIES),
				 errmsg("range " INT64_FORMAT " cannot be merged with itself", a)));

	/* lock in id order, so that concurrent merges cannot deadlock */
	roll_lock_active(Min(a, b), a < b ? &ra : &rb);
	roll_lock_active(Max(a, b), a < b ? &rb : &ra);

	if (ra.topic_id != rb.topic_id || !SliceAreBuddies(ra.slice, rb.slice))
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NOT_BUDDIES),
				 errmsg("ranges " INT64_FORMAT " and " INT64_FORMAT " are not buddies", a, b),
				 ra.topic_id != rb.topic_id ?
				 errdetail("They belong to different topics.") :
				 errdetail("Slices [" UINT64_FORMAT ", " UINT64_FORMAT ") and [" UINT64_FORMAT ", " UINT64_FORMAT ") are not the two halves of one slice.",
						   ra.slice.lo, ra.slice.hi, rb.slice.lo, rb.slice.hi),
				 errhint("Only the two children of one split can be merged.")));

	lower = ra.slice.lo < rb.slice.lo ? &ra : &rb;
	parents[0] = lower->range_id;
	parents[1] = lower == &ra ? rb.range_id : ra.range_id;
	roll_seal_range(a);
	roll_seal_range(b);
	return CatalogInsertRange(ra.topic_id, SliceParent(ra.slice), parents, 2,
							  true);
}

/* SQL: split_range(range_id) returns (left_id, right_id) */
Datum
malachi_split_range(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	int64		left_id;
	int64		right_id;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range_id must not be null")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "split_range must return a composite type");

	RangeSplit(PG_GETARG_INT64(0), &left_id, &right_id);

	values[0] = Int64GetDatum(left_id);
	values[1] = Int64GetDatum(right_id);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/* SQL: merge_ranges(a, b) returns the child range id */
Datum
malachi_merge_ranges(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range ids must not be null")));
	PG_RETURN_INT64(RangeMerge(PG_GETARG_INT64(0), PG_GETARG_INT64(1)));
}

/* SQL: roll(range_id) returns the sealed segment id, NULL without a head */
Datum
malachi_roll(PG_FUNCTION_ARGS)
{
	int64		range_id;
	int64		segment_id;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("range_id must not be null")));
	range_id = PG_GETARG_INT64(0);
	if (!CatalogRangeExists(range_id))
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
				 errmsg("range " INT64_FORMAT " does not exist", range_id)));
	segment_id = RangeRoll(range_id);
	if (segment_id < 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NO_SUCH_RANGE),
				 errmsg("range " INT64_FORMAT " does not exist", range_id),
				 errdetail("Its topic was dropped while its head was being rolled.")));
	if (segment_id == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(segment_id);
}
