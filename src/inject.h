/*-------------------------------------------------------------------------
 *
 * inject.h
 *	  Named pause points for tests of races (isolation specs).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_INJECT_H
#define MALACHI_INJECT_H

/* Pause points and the advisory lock keys that hold them */
#define INJECT_PRODUCE_ROUTED	"produce-routed"
#define INJECT_APPEND_RESERVED	"append-reserved"
#define INJECT_APPEND_WAITING	"append-waiting"
#define INJECT_FENCE_WAITING	"fence-waiting"
#define INJECT_OPEN_BUSY		"open-busy"
#define INJECT_SEAL_FENCED		"seal-fenced"
#define INJECT_AFTER_FLUSH		"after-flush"
#define INJECT_SCRUB_LISTED		"scrub-listed"
#define INJECT_APPEND_LOADING	"append-loading"
#define INJECT_STREAM_READ		"stream-read"
#define INJECT_CHILD_STARTING	"child-starting"
#define INJECT_RETENTION_DELETED	"retention-deleted"
#define INJECT_HEAD_CREATED	"head-created"
#define INJECT_HEAD_LISTED	"head-listed"
#define INJECT_GROUP_DERIVE	"group-derive"
#define INJECT_FENCE_WRITING	"fence-writing"
#define INJECT_ORPHAN_CHECKED	"orphan-checked"
#define INJECT_RESET_LISTED	"reset-listed"
#define INJECT_RECYCLE_FILE	"recycle-file"
#define INJECT_MANIFEST_WRITING	"manifest-writing"
#define INJECT_CONSUME_LISTED	"consume-listed"

/* Failure points: listed in malachi.inject_wait, they raise an error */
#define INJECT_FAIL_AFTER_FLUSH	"fail-after-flush"
#define INJECT_FAIL_SEAL_FENCED	"fail-seal-fenced"
/* ... or make a system call fail where the code asks InjectSyscallFails */
#define INJECT_FAIL_SPARE_SYNC	"fail-spare-sync"
#define INJECT_FAIL_SPARE_WRITEBACK	"fail-spare-writeback"
#define INJECT_REFUSE_SPARE_WRITEBACK	"refuse-spare-writeback"
#define INJECT_FAIL_SPARE_ROOM	"fail-spare-room"
#define INJECT_FAIL_RECYCLE_CLEAR	"fail-recycle-clear"
#define INJECT_FAIL_HEAD_SYNC	"fail-head-sync"
/* ... or act as another library would (produce.c) */
#define INJECT_PRODUCE_LATE	"produce-late"

extern char *malachi_inject_wait;
extern int	malachi_inject_disk_limit;
extern int	malachi_inject_free_bytes;

extern void InjectInit(void);
extern void InjectWait(const char *point);
extern void InjectFail(const char *point);
extern bool InjectFailing(const char *point);
extern bool InjectSyscallFails(const char *point, int err);

#endif							/* MALACHI_INJECT_H */
