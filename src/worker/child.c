/*-------------------------------------------------------------------------
 *
 * child.c
 *	  A declared child: a consumer-group worker calling a user function.
 *
 * Spec: {"kind": "consumer", "topic": ..., "group": ..., "function": ...,
 * "batch": 100, "wait": "1s"} (batch and wait optional).  The child loops:
 * in one transaction, as the role that declared it, consume up to batch
 * records with a long poll of wait, and when there are some call the
 * function with them as malachi.record[]; commit.  The group's position
 * commits with whatever the function did: exactly once inside Postgres.
 * An error rolls both back (the batch is delivered again), is recorded in
 * the child's slot (malachi.children.last_error) and the batch is retried
 * after a backoff (1 s doubling up to 30 s; reset by a committed batch).
 *
 * The supervisor (supervisor.c) starts children as dynamic background
 * workers, one per slot; a child works only while its slot still holds the
 * generation it was started for and is neither free nor stopping (checked
 * before it starts and before every batch), and clears its pid when it
 * exits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "parser/parse_func.h"
#include "parser/parse_type.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/varlena.h"
#include "utils/wait_event.h"

#include "inject.h"
#include "settings.h"
#include "supervisor.h"
#include "supervisor_shm.h"

/* Records per transaction: default and limit */
#define CHILD_BATCH_DEFAULT		100
#define CHILD_BATCH_MAX			100000

/* Backoff after an error: 1 s doubling up to 30 s */
#define CHILD_ERROR_BACKOFF_MS		1000
#define CHILD_ERROR_BACKOFF_MAX_MS	30000

void		malachi_child_main(Datum main_arg);

/*---- the spec ----*/

/* A string member of a spec; NULL when absent, problem when not a string. */
static char *
spec_string(Jsonb *spec, const char *key, char **problem)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&spec->root, key, strlen(key), NULL);

	if (v == NULL)
		return NULL;
	if (v->type != jbvString || v->val.string.len == 0)
	{
		*problem = psprintf("\"%s\" must be a non-empty string", key);
		return NULL;
	}
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * Is a wait an interval from 0 to 1 hour?  Parsed as interval_in parses,
 * but without raising: the supervisor checks specs it reads from tables.
 */
static bool
spec_wait_ok(const char *text)
{
	char		workbuf[MAXDATELEN + MAXDATEFIELDS];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	char	   *copy = pstrdup(text);
	struct pg_itm_in itm;
	Interval	iv;
	int			nf;
	int			dtype = 0;
	int			dterr;

	memset(&itm, 0, sizeof(itm));
	dterr = ParseDateTime(copy, workbuf, sizeof(workbuf), field, ftype,
						  MAXDATEFIELDS, &nf);
	if (dterr == 0)
		dterr = DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE, &dtype, &itm);
	if (dterr == DTERR_BAD_FORMAT)
	{
		memset(&itm, 0, sizeof(itm));
		dterr = DecodeISO8601Interval(copy, &dtype, &itm);
	}
	if (dterr != 0 || dtype != DTK_DELTA || itmin2interval(&itm, &iv) != 0)
		return false;
	return iv.month == 0 && iv.day == 0 && iv.time >= 0 &&
		iv.time <= (int64) 3600 * USECS_PER_SEC;
}

/* Is a jsonb key exactly this name? */
static bool
spec_key_is(const JsonbValue *key, const char *name)
{
	return key->val.string.len == (int) strlen(name) &&
		memcmp(key->val.string.val, name, key->val.string.len) == 0;
}

/*
 * ChildSpecCheck
 *		Parse a child spec without raising: false with *problem set when it
 *		is not a valid consumer spec (unknown kind or key, a field missing or
 *		of the wrong type).  The catalog is not consulted.
 */
bool
ChildSpecCheck(Jsonb *spec, ChildSpec *out, char **problem)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	JsonbValue *batch;
	char	   *kind;

	*problem = NULL;
	memset(out, 0, sizeof(*out));
	if (!JB_ROOT_IS_OBJECT(spec) || JB_ROOT_IS_SCALAR(spec))
	{
		*problem = "a spec is a jsonb object";
		return false;
	}
	it = JsonbIteratorInit(&spec->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		if (!spec_key_is(&v, "kind") && !spec_key_is(&v, "topic") &&
			!spec_key_is(&v, "group") && !spec_key_is(&v, "function") &&
			!spec_key_is(&v, "batch") && !spec_key_is(&v, "wait"))
		{
			*problem = psprintf("unknown key \"%.*s\"", v.val.string.len, v.val.string.val);
			return false;
		}
	}
	kind = spec_string(spec, "kind", problem);
	if (*problem)
		return false;
	if (kind == NULL || strcmp(kind, "consumer") != 0)
	{
		*problem = kind ? psprintf("unknown kind \"%s\"", kind) : "\"kind\" is missing";
		return false;
	}
	out->topic = spec_string(spec, "topic", problem);
	if (!*problem)
		out->group = spec_string(spec, "group", problem);
	if (!*problem)
		out->function = spec_string(spec, "function", problem);
	if (!*problem)
		out->wait = spec_string(spec, "wait", problem);
	if (*problem)
		return false;
	if (out->topic == NULL || out->group == NULL || out->function == NULL)
	{
		*problem = psprintf("\"%s\" is missing",
							out->topic == NULL ? "topic" : out->group == NULL ? "group" : "function");
		return false;
	}
	if (strlen(out->topic) > DECLARED_NAME_MAX || strlen(out->group) > DECLARED_NAME_MAX)
	{
		*problem = psprintf("topic and group names are at most %d bytes", DECLARED_NAME_MAX);
		return false;
	}
	if (out->wait == NULL)
		out->wait = "1s";
	else if (!spec_wait_ok(out->wait))
	{
		*problem = "\"wait\" must be an interval between 0 and 1 hour";
		return false;
	}
	out->batch = CHILD_BATCH_DEFAULT;
	batch = getKeyJsonValueFromContainer(&spec->root, "batch", 5, NULL);
	if (batch != NULL)
	{
		char	   *s;

		if (batch->type != jbvNumeric)
		{
			*problem = "\"batch\" must be a number";
			return false;
		}
		s = DatumGetCString(DirectFunctionCall1(numeric_out,
												NumericGetDatum(batch->val.numeric)));
		if (strspn(s, "0123456789") != strlen(s) || strlen(s) > 6 ||
			atoi(s) < 1 || atoi(s) > CHILD_BATCH_MAX)
		{
			*problem = psprintf("\"batch\" must be a whole number from 1 to %d", CHILD_BATCH_MAX);
			return false;
		}
		out->batch = atoi(s);
	}
	return true;
}

/*
 * ChildSpecParse
 *		ChildSpecCheck, raising invalid_parameter_value for a bad spec (or
 *		one whose text the supervisor cannot keep).
 */
void
ChildSpecParse(Jsonb *spec, ChildSpec *out)
{
	char	   *problem;

	if (!ChildSpecCheck(spec, out, &problem))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid child spec: %s", problem),
				 errhint("A consumer child is {\"kind\": \"consumer\", \"topic\": ..., \"group\": ..., \"function\": ..., \"batch\": 100, \"wait\": \"1s\"}.")));
	/* the supervisor keeps the spec's text in shared memory */
	if (strlen(JsonbToCString(NULL, &spec->root, VARSIZE(spec))) >= SUPERVISOR_SPEC_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid child spec: its text is longer than %d bytes",
						SUPERVISOR_SPEC_LEN - 1)));
}

/*
 * ChildSpecQualified
 *		Is a spec's function named with its schema?  declare_child stores it
 *		so, and the supervisor parks a hub whose spec names it otherwise (a
 *		row written by hand): the child would look the name up under the
 *		database's search_path.  Never raises an error.
 */
bool
ChildSpecQualified(const char *function)
{
	char	   *copy = pstrdup(function);
	List	   *names = NIL;
	bool		qualified;

	qualified = SplitIdentifierString(copy, '.', &names) && list_length(names) >= 2;
	list_free(names);
	pfree(copy);
	return qualified;
}

/*
 * ChildSpecFunction
 *		The function a consumer child calls: name(malachi.record[]).
 *		undefined_function when there is none (unless missing_ok).
 */
Oid
ChildSpecFunction(const char *function, bool missing_ok)
{
	Oid			argtypes[1];
	Oid			fn;

	argtypes[0] = typenameTypeId(NULL, typeStringToTypeName("malachi.record[]"));
	fn = LookupFuncName(stringToQualifiedNameList(function), 1, argtypes, true);
	if (!OidIsValid(fn) && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function %s(malachi.record[]) does not exist", function),
				 errhint("A consumer child's function takes its batch as one malachi.record[] argument.")));
	return fn;
}

/*---- the worker ----*/

static int	child_slot = -1;
static uint64 child_generation = 0;

/* Is the slot still ours?  Caller holds the lock. */
static inline bool
child_slot_ours(void)
{
	return supervisor_shared->children[child_slot].generation == child_generation;
}

/*
 * Is the slot still ours, and still meant to run?  A child registered by a
 * supervisor that exited before it started finds its slot freed or given
 * away by the next supervisor.  Caller holds the lock.
 */
static inline bool
child_slot_live(void)
{
	ChildState	state = supervisor_shared->children[child_slot].state;

	return child_slot_ours() && state != CHILD_FREE && state != CHILD_STOPPING;
}

/* At exit: the slot no longer has a process. */
static void
child_exit(int code, Datum arg)
{
	LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
	if (child_slot_ours())
		supervisor_shared->children[child_slot].pid = 0;
	LWLockRelease(supervisor_shared->lock);
}

/* Record a batch's outcome in the slot. */
static void
child_report(int64 processed, const char *error)
{
	LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
	if (child_slot_ours())
	{
		SupervisorChild *c = &supervisor_shared->children[child_slot];

		c->processed += processed;
		if (error)
		{
			strlcpy(c->last_error, error, sizeof(c->last_error));
			c->failures++;
		}
		else if (processed > 0)
			c->failures = 0;
	}
	LWLockRelease(supervisor_shared->lock);
}

/*
 * One batch, in one transaction, as the owner: consume, call the function,
 * commit.  Returns the records processed.
 *
 * The child connects as the bootstrap superuser (a declaring role need not
 * be able to log in), so everything the owner's code can set off runs as
 * the owner, the commit included: deferred triggers and WITH HOLD cursors
 * run at pre-commit, and a commit as the superuser would run them with its
 * rights.  An error restores the superuser (AbortTransaction does).
 */
static int64
child_batch(const ChildSpec *spec, const char *owner)
{
	Oid			save_user;
	int			save_sec;
	Oid			fn;
	Oid			owner_id;
	int64		n = 0;
	Datum		args[4];
	Oid			argtypes[4] = {TEXTOID, TEXTOID, INT4OID, TEXTOID};
	bool		isnull;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	owner_id = get_role_oid(owner, false);
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(owner_id, save_sec | SECURITY_LOCAL_USERID_CHANGE);

	fn = ChildSpecFunction(spec->function, false);
	args[0] = CStringGetTextDatum(spec->topic);
	args[1] = CStringGetTextDatum(spec->group);
	args[2] = Int32GetDatum(spec->batch);
	args[3] = CStringGetTextDatum(spec->wait);
	pgstat_report_activity(STATE_RUNNING, "malachi child: consume");

	/*
	 * Every name qualified: the child runs as the owner under the
	 * database's search_path (the owner's function is named by it), and an
	 * aggregate array_agg(malachi.record) another role created in a schema
	 * on that path would be an exact match, chosen over pg_catalog's
	 * polymorphic one, and run with the owner's rights.
	 */
	if (SPI_execute_with_args("SELECT pg_catalog.array_agg(r), pg_catalog.count(*) "
							  "FROM malachi.consume($1, $2, $3, $4::pg_catalog.interval) r",
							  4, argtypes, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "consume failed");
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (n > 0)
	{
		Datum		batch = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										  1, &isnull);
		Oid			batch_type = SPI_gettypeid(SPI_tuptable->tupdesc, 1);
		char	   *call = psprintf("SELECT %s($1)",
									quote_qualified_identifier(get_namespace_name(get_func_namespace(fn)),
															   get_func_name(fn)));

		pgstat_report_activity(STATE_RUNNING, "malachi child: function");
		if (SPI_execute_with_args(call, 1, &batch_type, &batch, NULL, false, 0) < 0)
			elog(ERROR, "the child's function failed");
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	SetUserIdAndSecContext(save_user, save_sec);
	pgstat_report_activity(STATE_IDLE, NULL);
	return n;
}

/*
 * malachi_child_main
 *		A consumer child; main_arg is its slot, bgw_extra its generation.
 */
void
malachi_child_main(Datum main_arg)
{
	char		hub[SUPERVISOR_NAME_LEN];
	char		child_id[SUPERVISOR_NAME_LEN];
	char		spec_text[SUPERVISOR_SPEC_LEN];
	char		owner[NAMEDATALEN];
	ChildSpec	spec;
	MemoryContext batch_cxt;
	volatile long backoff_ms = CHILD_ERROR_BACKOFF_MS;
	bool		ours;

	child_slot = DatumGetInt32(main_arg);
	memcpy(&child_generation, MyBgworkerEntry->bgw_extra, sizeof(uint64));
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	if (child_slot < 0 || child_slot >= SUPERVISOR_MAX_CHILDREN)
		proc_exit(0);

	BackgroundWorkerInitializeConnection(malachi_database, NULL, 0);
	/* tests hold a child here, before it claims its slot */
	StartTransactionCommand();
	InjectWait(INJECT_CHILD_STARTING);
	CommitTransactionCommand();

	LWLockAcquire(supervisor_shared->lock, LW_EXCLUSIVE);
	ours = child_slot_live();
	if (ours)
	{
		SupervisorChild *c = &supervisor_shared->children[child_slot];

		strlcpy(hub, c->hub, sizeof(hub));
		strlcpy(child_id, c->child_id, sizeof(child_id));
		strlcpy(spec_text, c->spec, sizeof(spec_text));
		strlcpy(owner, c->owner, sizeof(owner));
		c->pid = MyProcPid;
	}
	LWLockRelease(supervisor_shared->lock);
	if (!ours)
	{
		ereport(LOG,
				(errmsg("a child in slot %d stops before it started: its slot is no longer its own",
						child_slot)));
		proc_exit(0);
	}
	before_shmem_exit(child_exit, (Datum) 0);

	batch_cxt = AllocSetContextCreate(TopMemoryContext, "malachi child batch",
									  ALLOCSET_DEFAULT_SIZES);
	StartTransactionCommand();
	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		Jsonb	   *j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(spec_text)));

		ChildSpecParse(j, &spec);
		MemoryContextSwitchTo(old);
	}
	PG_CATCH();
	{
		/* show why in malachi.children before the error ends the child */
		ErrorData  *edata;

		MemoryContextSwitchTo(batch_cxt);
		edata = CopyErrorData();
		child_report(0, edata->message);
		PG_RE_THROW();
	}
	PG_END_TRY();
	CommitTransactionCommand();
	ereport(LOG,
			(errmsg("child \"%s\" of hub \"%s\" consumes topic \"%s\" as group \"%s\" into %s()",
					child_id, hub, spec.topic, spec.group, spec.function)));

	for (;;)
	{
		MemoryContext old;

		CHECK_FOR_INTERRUPTS();
		/* the owner's code runs with the settings as reloaded */
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		LWLockAcquire(supervisor_shared->lock, LW_SHARED);
		ours = child_slot_live();
		LWLockRelease(supervisor_shared->lock);
		if (!ours)
		{
			ereport(LOG,
					(errmsg("child \"%s\" of hub \"%s\" stops: its slot is no longer its own",
							child_id, hub)));
			proc_exit(0);
		}
		old = MemoryContextSwitchTo(batch_cxt);
		PG_TRY();
		{
			int64		n = child_batch(&spec, owner);

			child_report(n, NULL);
			backoff_ms = CHILD_ERROR_BACKOFF_MS;
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(batch_cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			ereport(LOG,
					(errmsg("child \"%s\" of hub \"%s\": %s; retrying in %ld ms",
							child_id, hub, edata->message, backoff_ms)));
			child_report(0, edata->message);
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 backoff_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			backoff_ms = Min(backoff_ms * 2, CHILD_ERROR_BACKOFF_MAX_MS);
		}
		PG_END_TRY();
		MemoryContextSwitchTo(old);
		MemoryContextReset(batch_cxt);
	}
}
