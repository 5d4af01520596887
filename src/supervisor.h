/*-------------------------------------------------------------------------
 *
 * supervisor.h
 *	  Declared lists: the supervisor worker, its children, the child spec.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_SUPERVISOR_H
#define MALACHI_SUPERVISOR_H

#include "utils/jsonb.h"

/* Longest hub or child id, in bytes (as topic names) */
#define DECLARED_NAME_MAX	249

/*
 * Longest hub name, in bytes: its manifest copy is named hub-<hex>.json
 * (written as ....json.tmp first), and a file name holds 255 bytes.
 */
#define DECLARED_HUB_MAX	120

/* Version of the manifest format and of the declared_hubs rows */
#define DECLARED_FORMAT		1

/*
 * A hub's ($1) manifest: {format, version, mutated_by, entries}.  One query,
 * so that the supervisor can run it with the snapshot it read the lists in.
 */
#define DECLARED_MANIFEST_SQL \
	"SELECT jsonb_build_object('format', coalesce(h.format, 1), " \
	"'version', coalesce(h.version, 0), 'mutated_by', h.mutated_by, " \
	"'entries', (SELECT coalesce(jsonb_agg(jsonb_build_object('child_id', c.child_id, " \
	"'spec', c.spec, 'meta', c.meta, 'owner', c.owner) ORDER BY c.child_id), '[]') " \
	"FROM malachi.declared_children c WHERE c.hub = $1)) " \
	"FROM (SELECT $1 AS hub) x LEFT JOIN malachi.declared_hubs h ON h.hub = x.hub"

/* A consumer child's spec, parsed */
typedef struct ChildSpec
{
	char	   *topic;
	char	   *group;
	char	   *function;		/* as written: a function taking malachi.record[] */
	int			batch;			/* records per transaction */
	char	   *wait;			/* long poll, interval text */
} ChildSpec;

extern void SupervisorInit(void);
extern void SupervisorWakeAtCommit(void);
extern bool SupervisorHubParked(const char *hub);
extern int64 SupervisorHubEvidence(const char *hub);
extern bool ChildSpecCheck(Jsonb *spec, ChildSpec *out, char **problem);
extern void ChildSpecParse(Jsonb *spec, ChildSpec *out);
extern bool ChildSpecQualified(const char *function);
extern Oid	ChildSpecFunction(const char *function, bool missing_ok);

#endif							/* MALACHI_SUPERVISOR_H */
