/*-------------------------------------------------------------------------
 *
 * supervisor.c
 *	  The supervisor worker: keeps exactly the declared children running.
 *
 * One registered background worker per node.  It reconciles after every
 * committed change of a declared list (a trigger on the list's tables sets
 * its latch at commit) and every malachi.supervisor_interval: for each
 * child declared on a hub that is not parked it keeps one dynamic
 * background worker running (src/worker/child.c), restarts one that exited
 * or crashed after an exponential backoff (1 s doubling up to 60 s; a batch
 * committed resets it), and stops children no longer declared or whose
 * spec changed (the new spec starts afresh).
 *
 * Evidence and park.  The supervisor keeps, in a durable file of its own
 * ($PGDATA/malachi/declared.evidence, written to a temporary file, synced
 * and renamed), the highest version it has seen of each hub's list, for
 * the installation of the extension it saw them in.  A hub whose list is
 * missing (its row deleted), of an unknown format, corrupt (a child spec
 * that does not parse) or older than that evidence is parked: none of its
 * children is started or stopped, declared_parked() says so and the log
 * says why.  clear_declared() (a version above the evidence) lifts it.
 *
 * Manifests.  With malachi.manifest_directory set, every version of a
 * hub's list the supervisor sees is written there (hub-<hex of name>.json,
 * durably, naming the installation of the extension it belongs to), an
 * off-cluster copy; when the supervisor starts with the extension
 * installed, a hub whose list is missing while such a copy exists (of this
 * installation, not older than the evidence, and writable by the server's
 * OS user only) gets its list back from it, each child running as the
 * owner the copy names (a copy with an entry that names no owner is not
 * restored: the supervisor runs as a superuser, and an owner is never
 * guessed).
 *
 * Crash hold.  A crash restart resets shared memory, and so every child's
 * backoff: the postmaster, whose own memory outlives it, counts crash
 * restarts in a row and sets hold_until as it initializes shared memory;
 * no child starts before then (1 s, doubling per crash restart within 5
 * minutes of the previous start, up to 60 s), so a child whose batch
 * brings the server down cannot do so again at once.
 *
 * Rules (locks):
 * - SupervisorShared.crash_streak and hold_until are written by the
 *   postmaster before any other process attaches, and only read after.
 * - SupervisorShared.lock (LWLock) protects hubs[] and children[]: the
 *   supervisor assigns slots and hub states under it exclusively; a child
 *   updates its own slot's pid, counts and error under it exclusively;
 *   readers (children_state, declared_parked) take it shared.
 * - SupervisorShared.mutex (spinlock) protects latch, the supervisor's
 *   latch that committing backends set.
 * - A slot's generation changes whenever the supervisor gives the slot to
 *   another child (or the same child with a new spec), and when a new
 *   supervisor frees an earlier one's slots: a child process only touches
 *   its slot while the generation is the one it started with, and runs
 *   only while its slot is neither free nor stopping (a child registered
 *   by a supervisor that exited may start after its successor began).
 * - BackgroundWorkerHandles live in the supervisor's own memory; a new
 *   supervisor (after its own crash) first stops every child still
 *   running, so that no child ever runs twice.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "replication/message.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_crc32c.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "inject.h"
#include "segfile.h"
#include "settings.h"
#include "supervisor.h"
#include "supervisor_shm.h"
#include "util.h"

/* Backoff of a child that exited: 1 s, doubling, at most 60 s */
#define CHILD_BACKOFF_MS		1000
#define CHILD_BACKOFF_MAX_MS	60000
/* What the log and malachi.children say of a crash hold (then: in, or at, when) */
#define CRASH_HOLD_TEXT "the server restarted after a crash (%d in a row): children start "

/* a crash restart this long after the previous start begins a new streak */
#define CRASH_STREAK_RESET_MS	(5 * CHILD_BACKOFF_MAX_MS)

SupervisorShared *supervisor_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static bool wake_at_commit = false;
static bool wake_callback_registered = false;

/*
 * Postmaster-local: when it last initialized shared memory, and the crash
 * restarts in a row so far.  The postmaster's own memory outlives a crash
 * restart, which initializes shared memory anew (and so forgets every
 * child's backoff).
 */
static TimestampTz pm_last_init = 0;
static int	pm_crash_streak = 0;

/* Supervisor-local: the handle of each slot's process */
static BackgroundWorkerHandle *handles[SUPERVISOR_MAX_CHILDREN];

/* Supervisor-local: the installation the evidence belongs to */
static Oid	evidence_installation = InvalidOid;

/*
 * Supervisor-local: the last write of the evidence file failed (a WARNING
 * said why); the next pass writes it again.  The evidence itself is in
 * shared memory meanwhile.
 */
static bool evidence_unsaved = false;

/*
 * Supervisor-local: the last version written to the manifest directory,
 * per hub, and which directory that was (a new one starts empty).
 */
typedef struct WrittenManifest
{
	char		hub[SUPERVISOR_NAME_LEN];
	int64		version;
} WrittenManifest;
static WrittenManifest written[SUPERVISOR_MAX_HUBS];
static char written_directory[MAXPGPATH];
static bool write_refused = false;	/* that directory is not trusted (said) */

PG_FUNCTION_INFO_V1(malachi_children_state);

void		malachi_supervisor_main(Datum main_arg);

/*---- setup ----*/

static long child_backoff_ms(int failures);

/*
 * In the postmaster, as it initializes shared memory: after a crash
 * restart, hold every child back, for as long as a child that failed as
 * many times in a row would be.  A child whose batch brings the server
 * down (the OOM killer, a crashing C function) would otherwise do it
 * again at once, and forever: its batch was never committed, and its
 * backoff was in the shared memory the crash reset.
 */
static void
supervisor_crash_hold(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (pm_last_init != 0)
	{
		if (TimestampDifferenceExceeds(pm_last_init, now, CRASH_STREAK_RESET_MS))
			pm_crash_streak = 1;
		else if (pm_crash_streak < 1000)
			pm_crash_streak++;
		supervisor_shared->hold_until =
			TimestampTzPlusMilliseconds(now, child_backoff_ms(pm_crash_streak));
		ereport(LOG,
				(errmsg(CRASH_HOLD_TEXT "in %ld ms",
						pm_crash_streak, child_backoff_ms(pm_crash_streak)),
				 errdetail("A child that brought the server down would otherwise do it again at once. The wait doubles with each crash restart less than %d s after the previous start, up to %d s.",
						   CRASH_STREAK_RESET_MS / 1000, CHILD_BACKOFF_MAX_MS / 1000)));
	}
	supervisor_shared->crash_streak = pm_crash_streak;
	pm_last_init = now;
}

static void
supervisor_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(SupervisorShared)));
	RequestNamedLWLockTranche("malachi supervisor", 1);
}

static void
supervisor_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	supervisor_shared = ShmemInitStruct("malachi supervisor",
										sizeof(SupervisorShared), &found);
	if (!found)
	{
		memset(supervisor_shared, 0, sizeof(SupervisorShared));
		supervisor_shared->lock = &(GetNamedLWLockTranche("malachi supervisor"))->lock;
		SpinLockInit(&supervisor_shared->mutex);
		if (!IsUnderPostmaster)
			supervisor_crash_hold();
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * SupervisorInit
 *		Ask for the shared state and register the supervisor worker.
 *		Called from _PG_init.
 */
void
SupervisorInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = supervisor_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = supervisor_shmem_startup;
	WorkerRegister("malachi supervisor", "malachi_supervisor_main", 5);
}

/*---- for backends ----*/

static void
supervisor_wake_callback(XactEvent event, void *arg)
{
	/*
	 * COMMIT PREPARED runs in another session, which would not wake the
	 * supervisor: the change would wait for its next scheduled pass.
	 */
	if (event == XACT_EVENT_PRE_PREPARE && wake_at_commit)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot prepare a transaction that changed a declared list"),
				 errhint("Change declared lists in a transaction that commits directly.")));
	if (event == XACT_EVENT_COMMIT && wake_at_commit)
	{
		Latch	   *latch;

		SpinLockAcquire(&supervisor_shared->mutex);
		latch = supervisor_shared->latch;
		SpinLockRelease(&supervisor_shared->mutex);
		if (latch)
			SetLatch(latch);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		wake_at_commit = false;
}

/* Wake the supervisor when the current transaction commits. */
void
SupervisorWakeAtCommit(void)
{
	if (!wake_callback_registered)
	{
		RegisterXactCallback(supervisor_wake_callback, NULL);
		wake_callback_registered = true;
	}
	wake_at_commit = true;
}

/* A hub's state slot; caller holds the lock.  NULL when unknown. */
static SupervisorHub *
supervisor_find_hub(const char *hub)
{
	int			i;

	for (i = 0; i < SUPERVISOR_MAX_HUBS; i++)
		if (supervisor_shared->hubs[i].in_use &&
			strcmp(supervisor_shared->hubs[i].hub, hub) == 0)
			return &supervisor_shared->hubs[i];
	return NULL;
}

/* Is the hub parked (by this node's supervisor)? */
bool
SupervisorHubParked(const char *hub)
{
	SupervisorHub *h;
	bool		parked;

	LWLockAcquire(supervisor_shared->lock, LW_SHARED);
	h = supervisor_find_hub(hub);
	parked = h != NULL && h->parked;
	LWLockRelease(supervisor_shared->lock);
	return parked;
}

/*---- durable files ----*/

/* Hex of a name: file contents and names never hold a user's string raw. */
static char *
supervisor_hex(const char *s)
{
	size_t		len = strlen(s);
	char	   *out = palloc(len * 2 + 1);
	size_t		i;

	for (i = 0; i < len; i++)
		sprintf(out + 2 * i, "%02x", (unsigned char) s[i]);
	out[len * 2] = '\0';
	return out;
}

static bool
supervisor_unhex(const char *hex, char *out, size_t outlen)
{
	size_t		len = strlen(hex);
	size_t		i;

	if (len % 2 != 0 || len / 2 >= outlen)
		return false;
	for (i = 0; i < len / 2; i++)
	{
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return false;
		out[i] = (char) b;
	}
	out[len / 2] = '\0';
	return true;
}

/* Write a file durably beside path's <path>.tmp (WriteFileDurably). */
static bool
supervisor_write_durably(const char *path, const char *data, size_t len,
						 int elevel)
{
	char	   *tmp = psprintf("%s.tmp", path);
	bool		ok = WriteFileDurably(path, tmp, data, len, elevel);

	pfree(tmp);
	return ok;
}

/* Whether this pass has flushed the WAL yet (supervisor_durable) */
static bool pass_durable = false;

/*
 * supervisor_durable
 *		Before anything outside the database records what this pass read
 *		(the evidence file, a manifest copy), make the lists it read
 *		durable: an asynchronous commit (synchronous_commit = off) is
 *		visible before its WAL is flushed, and a crash in between would
 *		leave the evidence ahead of the lists, and the hub parked with its
 *		children down.  A WAL record of its own, flushed (flushing to the
 *		insert position can fail); once per pass.
 */
static void
supervisor_durable(void)
{
	if (pass_durable)
		return;
	XLogFlush(LogLogicalMessage("malachi", "", 0, false));
	pass_durable = true;
}

static char *
supervisor_evidence_path(void)
{
	return psprintf("%s/declared.evidence", SegmentDirectory());
}

/*
 * Write the evidence file: a header line with the installation, one line
 * per hub (hex name, version), a CRC32C line over everything before it.
 */
static void
supervisor_save_evidence(void)
{
	StringInfoData buf;
	pg_crc32c	crc;
	int			i;
	char	   *path = supervisor_evidence_path();

	initStringInfo(&buf);
	appendStringInfo(&buf, "malachi declared evidence 1 %u\n", evidence_installation);
	LWLockAcquire(supervisor_shared->lock, LW_SHARED);
	for (i = 0; i < SUPERVISOR_MAX_HUBS; i++)
	{
		SupervisorHub *h = &supervisor_shared->hubs[i];

		if (h->in_use && h->evidence > 0)
			appendStringInfo(&buf, "%s " INT64_FORMAT "\n",
							 supervisor_hex(h->hub), h->evidence);
	}
	LWLockRelease(supervisor_shared->lock);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf.data, buf.len);
	FIN_CRC32C(crc);
	appendStringInfo(&buf, "crc %08x\n", crc);
	evidence_unsaved = !supervisor_write_durably(path, buf.data, buf.len, WARNING);
}

/* A hub's slot, taken when new; caller holds the lock exclusively. */
static SupervisorHub *
supervisor_hub_slot(const char *hub)
{
	SupervisorHub *h = supervisor_find_hub(hub);
	int			i;

	if (h != NULL)
		return h;
	for (i = 0; i < SUPERVISOR_MAX_HUBS; i++)
	{
		h = &supervisor_shared->hubs[i];
		if (!h->in_use)
		{
			memset(h, 0, sizeof(*h));
			h->in_use = true;
			strlcpy(h->hub, hub, sizeof(h->hub));
			return h;
		}
	}
	return NULL;
}

/* One hub's version, as the evidence file holds it */
typedef struct EvidenceLine
{
	char		hub[SUPERVISOR_NAME_LEN];
	int64		version;
} EvidenceLine;

/*
 * Read the evidence file: its installation and a list of EvidenceLine.
 * False when there is none (*damaged false) or its checksum or first line
 * is wrong (*damaged true).
 */
static bool
supervisor_read_evidence(const char *path, Oid *installation, List **entries,
						 bool *damaged)
{
	FILE	   *f = AllocateFile(path, "r");
	char		line[SUPERVISOR_NAME_LEN * 2 + 64];
	StringInfoData buf;
	pg_crc32c	crc;
	unsigned int stored;
	bool		ok = false;
	List	   *lines = NIL;
	ListCell   *lc;

	*damaged = false;
	*entries = NIL;
	if (f == NULL)
		return false;			/* no evidence yet */
	initStringInfo(&buf);
	while (fgets(line, sizeof(line), f) != NULL)
	{
		if (strncmp(line, "crc ", 4) == 0)
		{
			INIT_CRC32C(crc);
			COMP_CRC32C(crc, buf.data, buf.len);
			FIN_CRC32C(crc);
			ok = sscanf(line, "crc %08x", &stored) == 1 && stored == crc;
			break;
		}
		appendStringInfoString(&buf, line);
		lines = lappend(lines, pstrdup(line));
	}
	FreeFile(f);
	if (!ok || lines == NIL ||
		sscanf(linitial(lines), "malachi declared evidence 1 %u", installation) != 1)
	{
		*damaged = true;
		return false;
	}
	for_each_from(lc, lines, 1)
	{
		char		hex[SUPERVISOR_NAME_LEN * 2 + 1];
		EvidenceLine *e = palloc0(sizeof(EvidenceLine));

		if (sscanf(lfirst(lc), "%512s " INT64_FORMAT, hex, &e->version) == 2 &&
			supervisor_unhex(hex, e->hub, sizeof(e->hub)))
			*entries = lappend(*entries, e);
	}
	return true;
}

/*
 * Load the evidence file into the hub states.  A damaged file is reported
 * and kept (renamed aside): the evidence it held is lost, never invented.
 * Until this has run once since the server started, SupervisorHubEvidence
 * reads the file itself.
 */
static void
supervisor_load_evidence(void)
{
	char	   *path = supervisor_evidence_path();
	Oid			installation = InvalidOid;
	List	   *entries;
	bool		damaged;
	ListCell   *lc;

	if (!supervisor_read_evidence(path, &installation, &entries, &damaged) &&
		damaged)
	{
		char	   *aside = psprintf("%s.damaged", path);

		ereport(WARNING,
				(errmsg("the supervisor's evidence file \"%s\" is damaged; moved to \"%s\"",
						path, aside),
				 errdetail("The highest versions of declared lists seen before are unknown.")));
		(void) durable_rename(path, aside, WARNING);
	}
	if (OidIsValid(installation))
		evidence_installation = installation;
	LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
	foreach(lc, entries)
	{
		EvidenceLine *e = lfirst(lc);
		SupervisorHub *h = supervisor_hub_slot(e->hub);

		if (h != NULL)
			h->evidence = Max(h->evidence, e->version);
	}
	supervisor_shared->evidence_loaded = true;
	LWLockRelease(supervisor_shared->lock);
}

/*
 * The highest version of the hub's list the supervisor has seen (0: none).
 * Before the supervisor has loaded its evidence file after a start, the
 * file is read here too: clear_declared must outbid it from the first
 * moment.
 */
int64
SupervisorHubEvidence(const char *hub)
{
	SupervisorHub *h;
	int64		evidence;
	bool		loaded;

	LWLockAcquire(supervisor_shared->lock, LW_SHARED);
	h = supervisor_find_hub(hub);
	evidence = h != NULL ? h->evidence : 0;
	loaded = supervisor_shared->evidence_loaded;
	LWLockRelease(supervisor_shared->lock);
	if (!loaded)
	{
		Oid			installation;
		List	   *entries;
		bool		damaged;
		ListCell   *lc;

		(void) supervisor_read_evidence(supervisor_evidence_path(),
										&installation, &entries, &damaged);
		foreach(lc, entries)
		{
			EvidenceLine *e = lfirst(lc);

			if (strcmp(e->hub, hub) == 0)
				evidence = Max(evidence, e->version);
		}
	}
	return evidence;
}

/*---- manifests ----*/

/*
 * May a copy at path (or the manifest directory itself, dir) be written
 * or restored from?  A copy names the roles its children run as, and the
 * supervisor restores it as a superuser: only the server's OS user may
 * have written it, as PostgreSQL asks of its data directory.  So the
 * directory and the copy must be owned by that user and writable by no
 * other (a copy must be a file, not a link to one elsewhere).  Else a
 * WARNING says why, unless quiet.  writing: for a write, not a restore.
 */
static bool
supervisor_manifest_trusted(const char *path, bool dir, bool writing, bool quiet)
{
	struct stat st;
	const char *problem = NULL;

	if ((dir ? stat(path, &st) : lstat(path, &st)) != 0)
	{
		if (!quiet)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not stat \"%s\": %m", path)));
		return false;
	}
	if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		problem = dir ? "it is not a directory" : "it is not a regular file";
	else if (st.st_uid != geteuid())
		problem = "it is not owned by the server's operating system user";
	else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
		problem = "operating system users other than the server's may write to it";
	if (problem == NULL)
		return true;
	if (!quiet)
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 writing ?
				 errmsg("did not write manifest copies to \"%s\": %s", path, problem) :
				 errmsg("did not restore declared lists from \"%s\": %s", path, problem),
				 errdetail("A manifest copy names the roles its children run as; only the server's operating system user may write the copies and their directory."),
				 errhint("Give the directory and its copies to the server's user, with mode 0700 or 0750 (0600 or 0640 for the copies)%s.",
						 writing ? "" : ", and restart the server")));
	return false;
}

/* a copy also names the installation it belongs to (restored only into it) */
static SpiQuery q_manifest_text = {
	"SELECT m || jsonb_build_object('installation', $2) FROM (" DECLARED_MANIFEST_SQL ") q(m)",
	2, {TEXTOID, INT8OID}, NULL
};

/* A hub's manifest to write, for SubxactTry. */
typedef struct ManifestOne
{
	const char *hub;
	const char *path;
	Snapshot	lists;			/* the one the plan read the lists in */
} ManifestOne;

static void
supervisor_write_manifest_one(void *arg)
{
	ManifestOne *m = arg;
	Datum		args[2] = {CStringGetTextDatum(m->hub),
	Int64GetDatum((int64) evidence_installation)};
	char	   *text;

	InjectWait(INJECT_MANIFEST_WRITING);
	(void) SpiQueryRun(&q_manifest_text, args, m->lists);
	text = psprintf("%s\n", SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
	(void) supervisor_write_durably(m->path, text, strlen(text), ERROR);
}

/*
 * Write a hub's manifest to malachi.manifest_directory (in a transaction),
 * unless this version was written there already.  A failure (a full disk,
 * a directory that is not writable) is a WARNING: the supervisor goes on
 * running children, and tries again on its next pass.
 */
static void
supervisor_write_manifest(const char *hub, int64 version, Snapshot lists)
{
	ManifestOne m;
	ErrorData  *edata;
	int			i;
	int			free_slot = -1;

	if (strcmp(written_directory, malachi_manifest_directory) != 0)
	{
		memset(written, 0, sizeof(written));
		strlcpy(written_directory, malachi_manifest_directory,
				sizeof(written_directory));
		write_refused = false;
	}
	for (i = 0; i < SUPERVISOR_MAX_HUBS; i++)
	{
		if (written[i].hub[0] == '\0')
		{
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		if (strcmp(written[i].hub, hub) == 0)
		{
			if (written[i].version == version)
				return;
			free_slot = i;
			break;
		}
	}
	/* nothing into a directory a restore would refuse (said once) */
	if (!supervisor_manifest_trusted(malachi_manifest_directory, true, true,
									 write_refused))
	{
		write_refused = true;
		return;
	}
	write_refused = false;
	m.hub = hub;
	m.path = psprintf("%s/hub-%s.json", malachi_manifest_directory, supervisor_hex(hub));
	m.lists = lists;
	supervisor_durable();
	edata = SubxactTry(supervisor_write_manifest_one, &m);
	if (edata != NULL)
	{
		ereport(WARNING,
				(errmsg("could not write the manifest copy of hub \"%s\"", hub),
				 errdetail("%s", edata->message),
				 errhint("Check malachi.manifest_directory; the copy is written again on the next pass.")));
		FreeErrorData(edata);
		return;
	}
	if (free_slot >= 0)
	{
		strlcpy(written[free_slot].hub, hub, sizeof(written[free_slot].hub));
		written[free_slot].version = version;
	}
}

/* A whole (small) file as a string. */
static char *
supervisor_read_file(const char *path)
{
	FILE	   *f = AllocateFile(path, "r");
	StringInfoData buf;
	char		chunk[4096];
	size_t		n;

	if (f == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open \"%s\": %m", path)));
	initStringInfo(&buf);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		appendBinaryStringInfo(&buf, chunk, n);
	if (ferror(f))
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read \"%s\": %m", path)));
	FreeFile(f);
	return buf.data;
}

static SpiQuery q_restore_hub = {
	"INSERT INTO malachi.declared_hubs (hub, version, mutated_by) "
	"SELECT $1, ($2 ->> 'version')::bigint, $2 ->> 'mutated_by' "
	"WHERE $2 ->> 'format' = '1' AND jsonb_typeof($2 -> 'entries') = 'array' "
	"AND ($2 ->> 'version')::bigint >= $3 AND $2 -> 'installation' = to_jsonb($4) "
	"AND NOT EXISTS (SELECT FROM jsonb_array_elements($2 -> 'entries') e "
	"WHERE jsonb_typeof(e -> 'owner') IS DISTINCT FROM 'string') "
	"ON CONFLICT DO NOTHING",
	4, {TEXTOID, JSONBOID, INT8OID, INT8OID}, NULL
};
static SpiQuery q_restore_children = {
	"INSERT INTO malachi.declared_children (hub, child_id, spec, meta, owner) "
	"SELECT $1, e ->> 'child_id', e -> 'spec', coalesce(e -> 'meta', '{}'), "
	"e ->> 'owner' FROM jsonb_array_elements($2 -> 'entries') e",
	2, {TEXTOID, JSONBOID}, NULL
};
static SpiQuery q_hub_exists = {
	"SELECT FROM malachi.declared_hubs WHERE hub = $1", 1, {TEXTOID}, NULL
};

/* A hub supervisor_restore_manifests restores, for SubxactTry. */
typedef struct RestoreOne
{
	const char *hub;
	const char *path;
} RestoreOne;

/* Restore one hub's list from its copy, unless the copy is too old. */
static void
supervisor_restore_one(void *arg)
{
	RestoreOne *r = arg;
	char	   *text = supervisor_read_file(r->path);
	Datum		args[4];
	int64		version;

	args[0] = CStringGetTextDatum(r->hub);
	args[1] = JsonbPGetDatum(DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
																CStringGetDatum(text))));
	version = SupervisorHubEvidence(r->hub);
	args[2] = Int64GetDatum(version);
	args[3] = Int64GetDatum((int64) evidence_installation);
	/* (logged before the pass commits; a failed commit ends the worker) */
	if (SpiQueryRun(&q_restore_hub, args, NULL) > 0)
	{
		(void) SpiQueryRun(&q_restore_children, args, NULL);
		ereport(LOG,
				(errmsg("restored the declared list of hub \"%s\" from \"%s\"",
						r->hub, r->path),
				 errdetail("The highest version seen before was " INT64_FORMAT ".",
						   version)));
	}
	else
		ereport(WARNING,
				(errmsg("did not restore the declared list of hub \"%s\" from \"%s\"",
						r->hub, r->path),
				 errdetail("The copy is not a format 1 manifest of this installation of the extension whose every entry names its owner, or its version is older than version " INT64_FORMAT " seen before; the hub's list stays missing.",
						   version),
				 errhint("A copy written before the extension was created again can be adopted with malachi.adopt_manifest().")));
}

/*
 * At start: give a hub whose list is missing its list back from the
 * manifest directory, when the copy there is not older than the evidence
 * and only the server's OS user can have written it.  In a transaction; a
 * copy that cannot be read is reported and skipped.
 */
static void
supervisor_restore_manifests(void)
{
	DIR		   *dir;
	struct dirent *de;
	int			dir_trusted = -1;	/* not checked yet */

	if (malachi_manifest_directory == NULL || malachi_manifest_directory[0] == '\0')
		return;
	dir = AllocateDir(malachi_manifest_directory);
	if (dir == NULL)
	{
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not open the manifest directory \"%s\": %m",
						malachi_manifest_directory)));
		return;
	}
	while ((de = ReadDirExtended(dir, malachi_manifest_directory, WARNING)) != NULL)
	{
		char		hub[SUPERVISOR_NAME_LEN];
		char		hex[SUPERVISOR_NAME_LEN * 2 + 1];
		Datum		args[1];
		RestoreOne	one;
		ErrorData  *edata;

		if (sscanf(de->d_name, "hub-%512[0-9a-f].json", hex) != 1 ||
			strcmp(de->d_name + strlen(de->d_name) - 5, ".json") != 0 ||
			!supervisor_unhex(hex, hub, sizeof(hub)))
			continue;
		args[0] = CStringGetTextDatum(hub);
		if (SpiQueryRun(&q_hub_exists, args, NULL) > 0)
			continue;
		/* the directory is checked once, when a copy is to be restored */
		if (dir_trusted < 0)
			dir_trusted = supervisor_manifest_trusted(malachi_manifest_directory,
														 true, false, false);
		if (!dir_trusted)
			break;
		one.hub = hub;
		one.path = psprintf("%s/%s", malachi_manifest_directory, de->d_name);
		if (!supervisor_manifest_trusted(one.path, false, false, false))
			continue;
		edata = SubxactTry(supervisor_restore_one, &one);
		if (edata != NULL)
		{
			ereport(WARNING,
					(errmsg("could not restore the declared list of hub \"%s\" from \"%s\": %s",
							hub, one.path, edata->message)));
			FreeErrorData(edata);
		}
	}
	FreeDir(dir);
}

/*---- reconcile ----*/

/* A hub's row and children, as one reconcile read them. */
typedef struct HubRow
{
	char	   *hub;
	int64		version;
	int			format;
	char	   *corrupt;		/* why a child spec does not parse, or NULL */
	bool		seen;			/* matched to a hub state */
} HubRow;

typedef struct ChildRow
{
	char	   *hub;
	char	   *child_id;
	char	   *spec;
	char	   *owner;
} ChildRow;

static SpiQuery q_hubs = {
	"SELECT hub, version, format FROM malachi.declared_hubs ORDER BY hub",
	0, {0}, NULL
};
static SpiQuery q_children = {
	"SELECT hub, child_id, spec::text, owner, spec FROM malachi.declared_children "
	"ORDER BY hub, child_id",
	0, {0}, NULL
};

/* Milliseconds of backoff after n failures */
static long
child_backoff_ms(int failures)
{
	long		ms = CHILD_BACKOFF_MS;

	while (--failures > 0 && ms < CHILD_BACKOFF_MAX_MS)
		ms *= 2;
	return Min(ms, CHILD_BACKOFF_MAX_MS);
}

/* Ask a slot's process to stop; caller holds the lock exclusively. */
static void
supervisor_stop_slot(int i)
{
	SupervisorChild *c = &supervisor_shared->children[i];

	c->state = CHILD_STOPPING;
	if (handles[i] != NULL)
		TerminateBackgroundWorker(handles[i]);
}

/* Set a hub's park state, logging a change; caller holds the lock. */
static void
supervisor_park(SupervisorHub *h, bool parked, const char *reason)
{
	if (parked && (!h->parked || strcmp(h->reason, reason) != 0))
		ereport(WARNING,
				(errmsg("declared list of hub \"%s\" parked: %s", h->hub, reason),
				 errdetail("Its children are neither started nor stopped until the list is repaired."),
				 errhint("Adopt a manifest with a higher version, or override with malachi.clear_declared('%s').",
						 h->hub)));
	else if (!parked && h->parked)
		ereport(LOG,
				(errmsg("declared list of hub \"%s\" is no longer parked", h->hub)));
	h->parked = parked;
	strlcpy(h->reason, parked ? reason : "", sizeof(h->reason));
}

/*
 * Read the lists (one transaction), decide each hub's park state and each
 * slot's fate.  Returns false when the extension is not installed.
 */
static bool
supervisor_read_lists(HubRow **hubs_out, int *nhubs_out,
					  ChildRow **children_out, int *nchildren_out,
					  bool *first_pass)
{
	Oid			installation;
	uint64		n;
	uint64		i;
	HubRow	   *hubs = NULL;
	ChildRow   *children = NULL;
	int			nhubs = 0;
	int			nchildren = 0;
	MemoryContext cxt = CurrentMemoryContext;
	Snapshot	lists;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	installation = get_extension_oid("malachi", true);
	if (!OidIsValid(installation))
	{
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
		*first_pass = false;	/* see below */
		return false;
	}
	if (installation != evidence_installation)
	{
		/* another installation: what was seen before is not its history */
		if (OidIsValid(evidence_installation))
			ereport(LOG,
					(errmsg("malachi was installed again: the supervisor forgets the declared list versions it saw before")));
		LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
		for (i = 0; i < SUPERVISOR_MAX_HUBS; i++)
			supervisor_shared->hubs[i].in_use = false;
		LWLockRelease(supervisor_shared->lock);
		evidence_installation = installation;
		memset(written, 0, sizeof(written));
		supervisor_save_evidence();
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());

	/*
	 * Missing lists come back from their copies only as the supervisor
	 * starts with the extension installed, not when the extension is
	 * created later: a new installation starts a new history (the copies
	 * would bring back hubs of the one dropped), and a pg_restore that
	 * created it would then find its lists' rows taken.
	 */
	if (*first_pass)
		supervisor_restore_manifests();

	/*
	 * Hubs and children as of one snapshot: a hub's row deleted between
	 * two reads would look present with its children gone, and they would
	 * be stopped instead of the hub parked.
	 */
	lists = RegisterSnapshot(GetLatestSnapshot());
	n = SpiQueryRun(&q_hubs, NULL, lists);
	hubs = MemoryContextAllocZero(cxt, sizeof(HubRow) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		hubs[nhubs].hub = MemoryContextStrdup(cxt, SPI_getvalue(SPI_tuptable->vals[i],
																SPI_tuptable->tupdesc, 1));
		hubs[nhubs].version = SpiInt64(i, 2, NULL);
		hubs[nhubs].format = (int) pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[i],
															  SPI_tuptable->tupdesc, 3));
		nhubs++;
	}
	n = SpiQueryRun(&q_children, NULL, lists);
	children = MemoryContextAllocZero(cxt, sizeof(ChildRow) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		ChildRow   *c = &children[nchildren++];
		bool		isnull;
		char	   *problem = NULL;
		ChildSpec	parsed;
		bool		valid;
		int			k;

		c->hub = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 1));
		c->child_id = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 2));
		c->spec = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 3));
		c->owner = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 4));
		valid = ChildSpecCheck(DatumGetJsonbP(SPI_getbinval(tup, desc, 5, &isnull)),
							   &parsed, &problem);
		/* a row written by hand, or restored, may name it otherwise */
		if (valid && !ChildSpecQualified(parsed.function))
		{
			valid = false;
			problem = "its function is not named with its schema";
		}
		if (!valid ||
			strlen(c->spec) >= SUPERVISOR_SPEC_LEN || strlen(c->owner) >= NAMEDATALEN)
		{
			for (k = 0; k < nhubs; k++)
				if (strcmp(hubs[k].hub, c->hub) == 0 && hubs[k].corrupt == NULL)
					hubs[k].corrupt = MemoryContextStrdup(cxt,
														  psprintf("child \"%s\": %s", c->child_id,
																   problem ? problem : "its spec or owner is too long"));
		}
	}

	/*
	 * The off-cluster copy of every version seen, but not of a list the
	 * plan parks (an unknown format, a damaged spec, a version older than
	 * the evidence): that would overwrite the good copy a restore needs.
	 * Each copy is of the lists as read above, the ones checked: a list
	 * changed since (by hand, an older version) is judged next pass.
	 */
	if (malachi_manifest_directory != NULL && malachi_manifest_directory[0] != '\0')
		for (i = 0; i < (uint64) nhubs; i++)
			if (hubs[i].format == DECLARED_FORMAT && hubs[i].corrupt == NULL &&
				hubs[i].version >= SupervisorHubEvidence(hubs[i].hub))
				supervisor_write_manifest(hubs[i].hub, hubs[i].version, lists);
	UnregisterSnapshot(lists);

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	*first_pass = false;		/* restored, if at all, once committed */
	*hubs_out = hubs;
	*nhubs_out = nhubs;
	*children_out = children;
	*nchildren_out = nchildren;
	return true;
}

/* Decide parks and slots from what was read. */
static void
supervisor_plan(HubRow *hubs, int nhubs, ChildRow *children, int nchildren)
{
	bool		evidence_changed = false;
	bool		warned_full = false;
	TimestampTz now = GetCurrentTimestamp();
	int			i;
	int			k;

	LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
	for (k = 0; k < nhubs; k++)
	{
		SupervisorHub *h = supervisor_hub_slot(hubs[k].hub);

		hubs[k].seen = true;
		if (h == NULL)
		{
			ereport(WARNING,
					(errmsg("the supervisor tracks at most %d hubs; hub \"%s\" is ignored",
							SUPERVISOR_MAX_HUBS, hubs[k].hub)));
			continue;
		}
		if (hubs[k].format != DECLARED_FORMAT)
			supervisor_park(h, true, psprintf("its list has the unknown format %d", hubs[k].format));
		else if (hubs[k].version < h->evidence)
			supervisor_park(h, true,
							psprintf("its list is at version " INT64_FORMAT ", older than version " INT64_FORMAT " seen before",
									 hubs[k].version, h->evidence));
		else if (hubs[k].corrupt)
			supervisor_park(h, true, psprintf("its list is corrupt: %s", hubs[k].corrupt));
		else
		{
			supervisor_park(h, false, NULL);
			if (hubs[k].version > h->evidence)
			{
				h->evidence = hubs[k].version;
				evidence_changed = true;
			}
		}
	}
	/* hubs with evidence but no row any more */
	for (i = 0; i < SUPERVISOR_MAX_HUBS; i++)
	{
		SupervisorHub *h = &supervisor_shared->hubs[i];
		bool		found = false;

		if (!h->in_use)
			continue;
		for (k = 0; k < nhubs && !found; k++)
			found = strcmp(hubs[k].hub, h->hub) == 0;
		if (!found && h->evidence > 0)
			supervisor_park(h, true,
							psprintf("its list is missing, while version " INT64_FORMAT " was seen before",
									 h->evidence));
	}

	/* slots whose child is no longer declared (as it runs) stop */
	for (i = 0; i < SUPERVISOR_MAX_CHILDREN; i++)
	{
		SupervisorChild *c = &supervisor_shared->children[i];
		SupervisorHub *h;
		bool		declared = false;

		if (c->state == CHILD_FREE || c->state == CHILD_STOPPING)
			continue;
		h = supervisor_find_hub(c->hub);
		if (h != NULL && h->parked)
			continue;			/* parked: nothing starts or stops */
		for (k = 0; k < nchildren && !declared; k++)
			declared = strcmp(children[k].hub, c->hub) == 0 &&
				strcmp(children[k].child_id, c->child_id) == 0 &&
				strcmp(children[k].spec, c->spec) == 0 &&
				strcmp(children[k].owner, c->owner) == 0;
		if (!declared)
			supervisor_stop_slot(i);
	}
	/* declared children without a slot get one */
	for (k = 0; k < nchildren; k++)
	{
		SupervisorHub *h = supervisor_find_hub(children[k].hub);
		int			free_slot = -1;
		bool		has_slot = false;

		if (h == NULL || h->parked)
			continue;
		for (i = 0; i < SUPERVISOR_MAX_CHILDREN && !has_slot; i++)
		{
			SupervisorChild *c = &supervisor_shared->children[i];

			if (c->state == CHILD_FREE)
			{
				if (free_slot < 0 && handles[i] == NULL)
					free_slot = i;
				continue;
			}
			/* one that is stopping is replaced once it has stopped */
			has_slot = strcmp(c->hub, children[k].hub) == 0 &&
				strcmp(c->child_id, children[k].child_id) == 0;
		}
		if (has_slot)
			continue;
		if (free_slot < 0)
		{
			if (!warned_full)
				ereport(WARNING,
						(errmsg("the supervisor runs at most %d children; child \"%s\" of hub \"%s\" waits",
								SUPERVISOR_MAX_CHILDREN, children[k].child_id, children[k].hub)));
			warned_full = true;
			continue;
		}
		{
			SupervisorChild *c = &supervisor_shared->children[free_slot];
			uint64		generation = c->generation + 1;

			memset(c, 0, sizeof(*c));
			c->generation = generation;
			c->state = CHILD_STARTING;
			strlcpy(c->hub, children[k].hub, sizeof(c->hub));
			strlcpy(c->child_id, children[k].child_id, sizeof(c->child_id));
			strlcpy(c->spec, children[k].spec, sizeof(c->spec));
			strlcpy(c->owner, children[k].owner, sizeof(c->owner));
			/* (bounded: a clock stepped back must not stretch the hold) */
			c->next_start = Max(now, Min(supervisor_shared->hold_until,
										 TimestampTzPlusMilliseconds(now, CHILD_BACKOFF_MAX_MS)));
		}
	}
	LWLockRelease(supervisor_shared->lock);
	if (evidence_changed || evidence_unsaved)
	{
		supervisor_durable();
		supervisor_save_evidence();
	}
}

/*
 * Start, watch and reap the slots' processes.  Returns when the next
 * start is due (or 0 when none is).  *freed says a stopping slot became
 * free: a child declared again while its old process stopped waits for
 * that, so the caller plans again at once.
 */
static TimestampTz
supervisor_run_slots(bool *freed)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = 0;
	int			i;

	for (i = 0; i < SUPERVISOR_MAX_CHILDREN; i++)
	{
		SupervisorChild *c = &supervisor_shared->children[i];
		pid_t		pid = 0;
		BgwHandleStatus status = BGWH_STOPPED;

		if (handles[i] != NULL)
			status = GetBackgroundWorkerPid(handles[i], &pid);
		LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
		if (handles[i] != NULL && status == BGWH_STOPPED)
		{
			/* its process is gone */
			pfree(handles[i]);
			handles[i] = NULL;
			c->pid = 0;
			if (c->state == CHILD_RUNNING || c->state == CHILD_STARTING)
			{
				c->failures++;
				c->state = CHILD_BACKOFF;
				c->next_start = TimestampTzPlusMilliseconds(now, child_backoff_ms(c->failures));
				ereport(LOG,
						(errmsg("child \"%s\" of hub \"%s\" exited; restarting it in %ld ms",
								c->child_id, c->hub, child_backoff_ms(c->failures))));
			}
		}
		else if (handles[i] != NULL && status == BGWH_STARTED &&
				 c->state == CHILD_STARTING)
			c->state = CHILD_RUNNING;
		if (c->state == CHILD_STOPPING && handles[i] == NULL)
		{
			c->state = CHILD_FREE;
			*freed = true;
		}
		if ((c->state == CHILD_STARTING || c->state == CHILD_BACKOFF) &&
			handles[i] == NULL)
		{
			if (c->next_start <= now)
			{
				BackgroundWorker worker;
				MemoryContext old;
				bool		registered;

				memset(&worker, 0, sizeof(worker));
				worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
					BGWORKER_BACKEND_DATABASE_CONNECTION;
				worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
				worker.bgw_restart_time = BGW_NEVER_RESTART;
				strlcpy(worker.bgw_library_name, "malachi", BGW_MAXLEN);
				strlcpy(worker.bgw_function_name, "malachi_child_main", BGW_MAXLEN);
				snprintf(worker.bgw_name, BGW_MAXLEN, "malachi child %s/%s",
						 c->hub, c->child_id);
				strlcpy(worker.bgw_type, "malachi child", BGW_MAXLEN);
				worker.bgw_main_arg = Int32GetDatum(i);
				worker.bgw_extra[0] = '\0';
				memcpy(worker.bgw_extra, &c->generation, sizeof(uint64));
				worker.bgw_notify_pid = MyProcPid;
				/* the handle outlives this pass's memory */
				old = MemoryContextSwitchTo(TopMemoryContext);
				registered = RegisterDynamicBackgroundWorker(&worker, &handles[i]);
				MemoryContextSwitchTo(old);
				if (registered)
				{
					if (c->state == CHILD_BACKOFF)
						c->restarts++;
					c->state = CHILD_STARTING;
				}
				else
				{
					handles[i] = NULL;
					c->state = CHILD_BACKOFF;
					strlcpy(c->last_error,
							"no background worker slot is free (raise max_worker_processes)",
							sizeof(c->last_error));
					c->next_start = TimestampTzPlusMilliseconds(now, CHILD_BACKOFF_MAX_MS / 12);
				}
			}
			/* still to start: backing off, or held after a crash restart */
			if (handles[i] == NULL && (next == 0 || c->next_start < next))
				next = c->next_start;
		}
		LWLockRelease(supervisor_shared->lock);
	}
	return next;
}

/* Stop every child (the extension is gone, or the supervisor starts). */
static void
supervisor_stop_all(void)
{
	int			i;

	LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < SUPERVISOR_MAX_CHILDREN; i++)
	{
		SupervisorChild *c = &supervisor_shared->children[i];

		if (c->state == CHILD_FREE)
			continue;
		supervisor_stop_slot(i);
		if (handles[i] == NULL && c->pid > 0)
			(void) kill(c->pid, SIGTERM);	/* started by an earlier supervisor */
	}
	LWLockRelease(supervisor_shared->lock);
}

/* Wait until no child of an earlier supervisor runs any more. */
static void
supervisor_wait_orphans(void)
{
	for (;;)
	{
		bool		running = false;
		int			i;

		LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
		for (i = 0; i < SUPERVISOR_MAX_CHILDREN; i++)
		{
			SupervisorChild *c = &supervisor_shared->children[i];

			if (c->pid > 0 && kill(c->pid, 0) == 0)
				running = true;
			else
			{
				/* a child registered but not started finds it not its own */
				if (c->state != CHILD_FREE)
					c->generation++;
				c->pid = 0;
				c->state = CHILD_FREE;
			}
		}
		LWLockRelease(supervisor_shared->lock);
		if (!running)
			return;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * malachi_supervisor_main
 *		The supervisor worker: reconcile on every wake-up (a committed
 *		change, a child's start or exit, a due restart) and every
 *		malachi.supervisor_interval, until SIGTERM.
 */
void
malachi_supervisor_main(Datum main_arg)
{
	MemoryContext pass_cxt;
	static bool first_pass = true;	/* static: kept across a caught error */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	WorkerConnect();
	pass_cxt = AllocSetContextCreate(TopMemoryContext, "malachi supervisor pass",
									 ALLOCSET_DEFAULT_SIZES);

	SpinLockAcquire(&supervisor_shared->mutex);
	supervisor_shared->latch = MyLatch;
	SpinLockRelease(&supervisor_shared->mutex);

	/* children an earlier supervisor started are not ours to track */
	supervisor_stop_all();
	supervisor_wait_orphans();
	supervisor_load_evidence();
	pgstat_report_activity(STATE_IDLE, NULL);

	for (;;)
	{
		HubRow	   *hubs;
		ChildRow   *children;
		int			nhubs;
		int			nchildren;
		volatile TimestampTz next = 0;
		bool		freed = false;
		long		timeout = (long) malachi_supervisor_interval * 1000;

		/*
		 * An error in a pass (a cancel, a lock_timeout, a table locked by
		 * VACUUM FULL or an open DROP EXTENSION) is logged, and the next
		 * pass tries again: ending the worker would end its children too,
		 * as its successor stops the children it cannot track.
		 */
		MemoryContextSwitchTo(pass_cxt);
		pass_durable = false;
		PG_TRY();
		{
			CHECK_FOR_INTERRUPTS();
			if (supervisor_read_lists(&hubs, &nhubs, &children, &nchildren,
									  &first_pass))
				supervisor_plan(hubs, nhubs, children, nchildren);
			else
				supervisor_stop_all();
			next = supervisor_run_slots(&freed);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(TopMemoryContext);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			LWLockReleaseAll();
			ereport(LOG,
					(errmsg("malachi supervisor: a pass failed: %s", edata->message),
					 errdetail("The next pass tries again; the children go on running.")));
			FreeErrorData(edata);
		}
		PG_END_TRY();
		pgstat_report_activity(STATE_IDLE, NULL);
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(pass_cxt);
		if (freed)
			SetLatch(MyLatch);	/* a slot came free: plan again now */

		if (next != 0)
			timeout = Min(timeout, Max(1, TimestampDifferenceMilliseconds(GetCurrentTimestamp(), next)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
}

/*---- SQL ----*/

static const char *const child_state_names[] = {
	"free", "starting", "running", "backoff", "stopping"
};

/*
 * Why a slot's child has not started, when the crash hold keeps it back:
 * only the hold gives a new slot a start in the future (NULL otherwise).
 * Caller holds the lock, and read now after taking it.
 */
static char *
supervisor_hold_reason(const SupervisorChild *c, TimestampTz now)
{
	if (c->state != CHILD_STARTING || c->pid != 0 || c->next_start <= now ||
		supervisor_shared->hold_until <= now)
		return NULL;
	return psprintf(CRASH_HOLD_TEXT "at %s", supervisor_shared->crash_streak,
					timestamptz_to_str(c->next_start));
}

/* SQL: children_state(): the declared children this node runs */
Datum
malachi_children_state(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(supervisor_shared->lock, LW_SHARED);
	now = GetCurrentTimestamp();
	for (i = 0; i < SUPERVISOR_MAX_CHILDREN; i++)
	{
		SupervisorChild *c = &supervisor_shared->children[i];
		Datum		values[8];
		bool		nulls[8] = {false, false, false, false, false, false, false, false};
		char	   *hold;

		if (c->state == CHILD_FREE)
			continue;
		values[0] = CStringGetTextDatum(c->hub);
		values[1] = CStringGetTextDatum(c->child_id);
		values[2] = CStringGetTextDatum(malachi_node_name);
		values[3] = Int32GetDatum(c->pid);
		nulls[3] = c->pid == 0;
		values[4] = CStringGetTextDatum(child_state_names[c->state]);
		values[5] = Int32GetDatum(c->restarts);
		values[6] = CStringGetTextDatum(c->last_error);
		nulls[6] = c->last_error[0] == '\0';
		if (nulls[6] && (hold = supervisor_hold_reason(c, now)) != NULL)
		{
			/* held: say why, rather than show no reason */
			values[6] = CStringGetTextDatum(hold);
			nulls[6] = false;
		}
		values[7] = Int64GetDatum(c->processed);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(supervisor_shared->lock);
	return (Datum) 0;
}
