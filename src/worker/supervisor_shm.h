/*-------------------------------------------------------------------------
 *
 * supervisor_shm.h
 *	  The supervisor's shared state: hubs and child slots (see supervisor.c
 *	  for the rules that protect them).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_SUPERVISOR_SHM_H
#define MALACHI_SUPERVISOR_SHM_H

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#define SUPERVISOR_MAX_HUBS		64
#define SUPERVISOR_MAX_CHILDREN	64
#define SUPERVISOR_NAME_LEN		256
#define SUPERVISOR_SPEC_LEN		2048
#define SUPERVISOR_ERROR_LEN	512

/* The state of a child slot */
typedef enum ChildState
{
	CHILD_FREE = 0,				/* no child */
	CHILD_STARTING,				/* to be started (at next_start), or starting */
	CHILD_RUNNING,				/* its process runs */
	CHILD_BACKOFF,				/* exited; restarted at next_start */
	CHILD_STOPPING				/* no longer declared; its process is stopped */
} ChildState;

/* What the supervisor knows of a hub (lock: SupervisorShared.lock) */
typedef struct SupervisorHub
{
	bool		in_use;
	char		hub[SUPERVISOR_NAME_LEN];
	int64		evidence;		/* highest version seen (durable) */
	bool		parked;
	char		reason[SUPERVISOR_ERROR_LEN];	/* why it is parked */
} SupervisorHub;

/* A declared child and its process (lock: SupervisorShared.lock) */
typedef struct SupervisorChild
{
	ChildState	state;
	uint64		generation;		/* changes when the slot gets another child */
	char		hub[SUPERVISOR_NAME_LEN];
	char		child_id[SUPERVISOR_NAME_LEN];
	char		spec[SUPERVISOR_SPEC_LEN];	/* jsonb text */
	char		owner[NAMEDATALEN];	/* the role it runs as */
	int			pid;			/* its process, set by the child; 0: none */
	int			restarts;		/* times it was started again after exiting */
	int			failures;		/* exits and errors since its last good batch */
	TimestampTz next_start;		/* when to start it (STARTING, BACKOFF) */
	char		last_error[SUPERVISOR_ERROR_LEN];
	int64		processed;		/* records committed through its function */
} SupervisorChild;

typedef struct SupervisorShared
{
	LWLock	   *lock;			/* protects hubs[] and children[] */
	slock_t		mutex;			/* protects latch */
	Latch	   *latch;			/* the supervisor's, while it runs */
	bool		evidence_loaded;	/* (lock) the supervisor has loaded its
									 * evidence file since the server started */

	/*
	 * Set by the postmaster when it initializes shared memory, before any
	 * other process attaches, and only read after that (no lock): crash
	 * restarts in a row (0 after a start), and the time before which no
	 * child starts (0: none).
	 */
	int			crash_streak;
	TimestampTz hold_until;
	SupervisorHub hubs[SUPERVISOR_MAX_HUBS];
	SupervisorChild children[SUPERVISOR_MAX_CHILDREN];
} SupervisorShared;

extern SupervisorShared *supervisor_shared;

#endif							/* MALACHI_SUPERVISOR_SHM_H */
