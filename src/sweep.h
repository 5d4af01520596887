/*-------------------------------------------------------------------------
 *
 * sweep.h
 *	  The sweeper: age rolls, retention, fence completion, orphans, scrub.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_SWEEP_H
#define MALACHI_SWEEP_H

/* What one pass did. */
typedef struct SweepCounts
{
	int			rolled;			/* heads sealed by age */
	int			fences_completed;	/* fences recorded from the store */
	int			deleted;		/* sealed segments past retention */
	int			orphans_removed;	/* files no segment row names */
	int			heads_indexed;	/* heads whose index was saved */
	int64		scrubbed_bytes; /* sealed segment bytes verified */
	int			corrupt;		/* segments the scrub found damaged */
	int			errors;			/* steps that failed (see the log) */
} SweepCounts;

extern void SweepInit(void);
extern void SweepPass(bool own_transactions, SweepCounts *counts);
extern void SweepDropAtCommit(int64 segment_id);

extern PGDLLEXPORT void malachi_sweeper_main(Datum main_arg);

#endif							/* MALACHI_SWEEP_H */
