/*-------------------------------------------------------------------------
 *
 * declared.c
 *	  Declared lists: declare, undeclare, read, export and adopt a hub's list.
 *
 * A hub's declared list is the set of children that shall run on it: a row
 * of malachi.declared_hubs (version, mutated_by, format) and one row of
 * malachi.declared_children per child.  Rules:
 *
 * - Mutations run in the caller's transaction, only on the control-plane
 *   primary (never on a standby), and lock the hub's row first: concurrent
 *   mutations of one hub serialize there, so versions are consecutive and
 *   nothing is lost.  Each writes only its own child's row, never the
 *   whole list.  They share Postgres's group commit: no fsync of their own.
 * - A mutation that changes the list bumps the version by exactly one; one
 *   that changes nothing returns the version unchanged and writes nothing.
 * - adopt_manifest replaces the list wholesale only when the manifest's
 *   version is higher; on an equal version with different content the
 *   lowest mutated_by wins (with a WARNING).  clear_declared empties the
 *   list at a version above every version known, the supervisor's durable
 *   evidence included: the operator's override, which lifts a park.
 * - Triggers on both tables wake the supervisor when a change commits,
 *   whoever made it (see supervisor.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "catalog.h"
#include "settings.h"
#include "supervisor.h"
#include "util.h"

PG_FUNCTION_INFO_V1(malachi_declare_child);
PG_FUNCTION_INFO_V1(malachi_undeclare_child);
PG_FUNCTION_INFO_V1(malachi_declared_children);
PG_FUNCTION_INFO_V1(malachi_declared_child);
PG_FUNCTION_INFO_V1(malachi_declared_manifest);
PG_FUNCTION_INFO_V1(malachi_adopt_manifest);
PG_FUNCTION_INFO_V1(malachi_clear_declared);
PG_FUNCTION_INFO_V1(malachi_declared_parked);
PG_FUNCTION_INFO_V1(malachi_note_declared_change);

static SpiQuery q_hub_create = {
	"INSERT INTO malachi.declared_hubs (hub, mutated_by) VALUES ($1, $2) "
	"ON CONFLICT DO NOTHING",
	2, {TEXTOID, TEXTOID}, NULL
};
static SpiQuery q_hub_drop_unused = {
	"DELETE FROM malachi.declared_hubs h WHERE hub = $1 AND version = 0 "
	"AND NOT EXISTS (SELECT FROM malachi.declared_children c WHERE c.hub = h.hub)",
	1, {TEXTOID}, NULL
};
static SpiQuery q_hub_lock = {
	"SELECT version, mutated_by FROM malachi.declared_hubs WHERE hub = $1 FOR UPDATE",
	1, {TEXTOID}, NULL
};
static SpiQuery q_hub_bump = {
	"UPDATE malachi.declared_hubs SET version = $2, mutated_by = $3, "
	"format = 1, updated_at = now() WHERE hub = $1",
	3, {TEXTOID, INT8OID, TEXTOID}, NULL
};
static SpiQuery q_child_same = {
	"SELECT spec = $3 AND meta = $4 AND owner = current_user "
	"FROM malachi.declared_children WHERE hub = $1 AND child_id = $2",
	4, {TEXTOID, TEXTOID, JSONBOID, JSONBOID}, NULL
};
static SpiQuery q_child_upsert = {
	"INSERT INTO malachi.declared_children (hub, child_id, spec, meta, owner) "
	"VALUES ($1, $2, $3, $4, current_user) ON CONFLICT (hub, child_id) DO UPDATE "
	"SET spec = EXCLUDED.spec, meta = EXCLUDED.meta, owner = EXCLUDED.owner",
	4, {TEXTOID, TEXTOID, JSONBOID, JSONBOID}, NULL
};
static SpiQuery q_child_delete = {
	"DELETE FROM malachi.declared_children WHERE hub = $1 AND child_id = $2",
	2, {TEXTOID, TEXTOID}, NULL
};
static SpiQuery q_children_delete = {
	"DELETE FROM malachi.declared_children WHERE hub = $1",
	1, {TEXTOID}, NULL
};

/* Mutations only on the control-plane primary. */
static void
declared_check_leader(void)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("declared lists can only be changed on the control-plane primary"),
				 errdetail("This server is a standby."),
				 errhint("Connect to the primary.")));
}

/* A child id argument (as CheckNameArg). */
static char *
declared_name_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	return CheckNameArg(fcinfo, argno, what);
}

/*
 * A hub argument: at most DECLARED_HUB_MAX bytes, so that its manifest
 * copy's file name (hub-<hex>.json.tmp) fits in a file name's 255 bytes.
 */
static char *
declared_hub_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *hub;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("hub must not be null")));
	hub = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (hub[0] == '\0' || strlen(hub) > DECLARED_HUB_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid hub name"),
				 errdetail("A hub name is between 1 and %d bytes long (the file name of its manifest copy holds it in hex).",
						   DECLARED_HUB_MAX)));
	return hub;
}

/* A jsonb object argument; NULL and non-objects are errors. */
static Jsonb *
declared_object_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	Jsonb	   *j;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	j = PG_GETARG_JSONB_P(argno);
	if (!JB_ROOT_IS_OBJECT(j) || JB_ROOT_IS_SCALAR(j))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a jsonb object", what)));
	return j;
}

/*
 * Lock a hub's row (creating it at version 0 when create); its version, or
 * -1 when it does not exist.  Between SPI_connect and SPI_finish.
 */
static int64
declared_lock_hub(const char *hub, bool create, char **mutated_by)
{
	Datum		args[2] = {CStringGetTextDatum(hub),
	CStringGetTextDatum(malachi_node_name)};
	bool		isnull;
	Datum		d;

	if (create)
		(void) SpiQueryRun(&q_hub_create, args, NULL);
	if (SpiQueryRun(&q_hub_lock, args, NULL) == 0)
		return -1;
	if (mutated_by)
	{
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
		*mutated_by = isnull ? NULL : TextDatumGetCString(d);
	}
	return SpiInt64(0, 1, NULL);
}

/* Set a hub's version (and mutated_by); between SPI_connect and SPI_finish. */
static void
declared_set_version(const char *hub, int64 version, const char *mutated_by)
{
	Datum		args[3] = {CStringGetTextDatum(hub), Int64GetDatum(version),
	CStringGetTextDatum(mutated_by)};

	(void) SpiQueryRun(&q_hub_bump, args, NULL);
}

/*
 * The spec's function as its child will find it: resolved now, under the
 * declarer's search_path, and named with its schema.  The child looks the
 * name up as its owner under the database's default path, so an
 * unqualified name kept as written could find there another function
 * than the one checked here (one that another role creates later in a
 * schema earlier on that path), and run it with the owner's rights.
 */
static char *
declared_function_name(const char *function)
{
	Oid			fn = ChildSpecFunction(function, false);
	Oid			nsp = get_func_namespace(fn);

	if (isAnyTempNamespace(nsp))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("function %s is a temporary function", function),
				 errdetail("A child runs in a session of its own, without this session's temporary objects.")));
	return quote_qualified_identifier(get_namespace_name(nsp), get_func_name(fn));
}

/* spec with its "function" set to the text function. */
static Jsonb *
declared_spec_with_function(Jsonb *spec, const char *function)
{
	Datum		key = CStringGetTextDatum("function");
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) function;
	v.val.string.len = strlen(function);
	return DatumGetJsonbP(DirectFunctionCall4(jsonb_set, JsonbPGetDatum(spec),
											  PointerGetDatum(construct_array(&key, 1, TEXTOID, -1, false, TYPALIGN_INT)),
											  JsonbPGetDatum(JsonbValueToJsonb(&v)),
											  BoolGetDatum(false)));
}

/* The context of an error in a spec as declare_child stores it. */
static void
declared_stored_spec_context(void *arg)
{
	errcontext("the spec as stored, its function named \"%s\"",
			   (const char *) arg);
}

/*
 * SQL: declare_child(hub, child_id, spec, meta).  The spec is stored with
 * its function schema-qualified (declared_function_name).
 */
Datum
malachi_declare_child(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	char	   *child_id = declared_name_arg(fcinfo, 1, "child");
	Jsonb	   *spec = declared_object_arg(fcinfo, 2, "spec");
	Jsonb	   *meta = declared_object_arg(fcinfo, 3, "meta");
	ChildSpec	parsed;
	char	   *function;
	ErrorContextCallback context;
	Datum		args[4];
	int64		version;
	bool		isnull;

	declared_check_leader();
	ChildSpecParse(spec, &parsed);
	function = declared_function_name(parsed.function);
	spec = declared_spec_with_function(spec, function);
	/* still within the spec's length limit (the name grew) */
	context.callback = declared_stored_spec_context;
	context.arg = function;
	context.previous = error_context_stack;
	error_context_stack = &context;
	ChildSpecParse(spec, &parsed);
	error_context_stack = context.previous;
	(void) CatalogTopicId(parsed.topic, CATALOG_LOCK_NONE);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	version = declared_lock_hub(hub, true, NULL);
	args[0] = CStringGetTextDatum(hub);
	args[1] = CStringGetTextDatum(child_id);
	args[2] = JsonbPGetDatum(spec);
	args[3] = JsonbPGetDatum(meta);
	if (SpiQueryRun(&q_child_same, args, NULL) > 0 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								   1, &isnull)))
	{
		SPI_finish();
		PG_RETURN_INT64(version);	/* nothing changes */
	}
	(void) SpiQueryRun(&q_child_upsert, args, NULL);
	declared_set_version(hub, ++version, malachi_node_name);
	SPI_finish();
	PG_RETURN_INT64(version);
}

/* SQL: undeclare_child(hub, child_id) */
Datum
malachi_undeclare_child(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	char	   *child_id = declared_name_arg(fcinfo, 1, "child");
	Datum		args[2];
	int64		version;

	declared_check_leader();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	version = declared_lock_hub(hub, false, NULL);
	args[0] = CStringGetTextDatum(hub);
	args[1] = CStringGetTextDatum(child_id);
	if (version >= 0 && SpiQueryRun(&q_child_delete, args, NULL) > 0)
		declared_set_version(hub, ++version, malachi_node_name);
	SPI_finish();
	PG_RETURN_INT64(Max(version, 0));
}

static SpiQuery q_entries = {
	"SELECT coalesce(jsonb_agg(jsonb_build_object('child_id', child_id, "
	"'spec', spec, 'meta', meta) ORDER BY child_id), '[]') "
	"FROM malachi.declared_children WHERE hub = $1",
	1, {TEXTOID}, NULL
};
static SpiQuery q_hub = {
	"SELECT version, mutated_by, format FROM malachi.declared_hubs WHERE hub = $1",
	1, {TEXTOID}, NULL
};

/*
 * A hub's entries as a jsonb array by child_id, copied into the memory
 * context that was current at SPI_connect: SPI leaves its own procedure
 * context current after a query, and SPI_finish frees that.
 */
static Jsonb *
declared_entries(const char *hub)
{
	Datum		args[1] = {CStringGetTextDatum(hub)};
	bool		isnull;

	(void) SpiQueryRun(&q_entries, args, NULL);
	return DatumGetJsonbP(SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
														  SPI_tuptable->tupdesc, 1,
														  &isnull),
											false, -1));
}

/* SQL: declared_children(hub): (version, children) */
Datum
malachi_declared_children(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	Datum		args[1] = {CStringGetTextDatum(hub)};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = Int64GetDatum(SpiQueryRun(&q_hub, args, NULL) > 0 ?
							  SpiInt64(0, 1, NULL) : 0);
	values[1] = JsonbPGetDatum(declared_entries(hub));
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

static SpiQuery q_child = {
	"SELECT jsonb_build_object('spec', spec, 'meta', meta) "
	"FROM malachi.declared_children WHERE hub = $1 AND child_id = $2",
	2, {TEXTOID, TEXTOID}, NULL
};

/* SQL: declared_child(hub, child_id): {spec, meta}, NULL if not declared */
Datum
malachi_declared_child(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	char	   *child_id = declared_name_arg(fcinfo, 1, "child");
	Datum		args[2] = {CStringGetTextDatum(hub), CStringGetTextDatum(child_id)};
	Jsonb	   *result = NULL;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SpiQueryRun(&q_child, args, NULL) > 0)
		result = DatumGetJsonbP(SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
																SPI_tuptable->tupdesc, 1, &isnull),
												  false, -1));
	SPI_finish();
	if (result == NULL)
		PG_RETURN_NULL();
	PG_RETURN_JSONB_P(result);
}

static SpiQuery q_manifest = {DECLARED_MANIFEST_SQL, 1, {TEXTOID}, NULL};

/* SQL: declared_manifest(hub): {format, version, mutated_by, entries} */
Datum
malachi_declared_manifest(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	Datum		args[1] = {CStringGetTextDatum(hub)};
	Jsonb	   *result;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	(void) SpiQueryRun(&q_manifest, args, NULL);
	result = DatumGetJsonbP(SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
															SPI_tuptable->tupdesc, 1, &isnull),
											  false, -1));
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

/* Report a manifest that cannot be adopted. */
static void
malformed_manifest(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("malformed manifest"),
			 errdetail("%s", detail),
			 errhint("A manifest is {\"format\": 1, \"version\": N, \"mutated_by\": \"node\", \"entries\": [{\"child_id\": ..., \"spec\": {...}, \"meta\": {...}}, ...]}, as malachi.declared_manifest() returns it.")));
}

static SpiQuery q_manifest_top = {
	"SELECT jsonb_typeof($1), jsonb_typeof($1 -> 'format'), $1 ->> 'format', "
	"jsonb_typeof($1 -> 'version'), $1 ->> 'version', "
	"jsonb_typeof($1 -> 'mutated_by'), $1 ->> 'mutated_by', "
	"jsonb_typeof($1 -> 'entries'), "
	"(SELECT string_agg(k, ', ') FROM jsonb_object_keys(CASE WHEN jsonb_typeof($1) = 'object' "
	"THEN $1 ELSE '{}' END) k WHERE k NOT IN ('format', 'version', 'mutated_by', 'entries', "
	"'installation'))",
	1, {JSONBOID}, NULL
};
static SpiQuery q_manifest_entries = {
	"SELECT jsonb_typeof(e), jsonb_typeof(e -> 'child_id'), e ->> 'child_id', "
	"jsonb_typeof(e -> 'spec'), e -> 'spec', jsonb_typeof(coalesce(e -> 'meta', '{}')), "
	"(SELECT string_agg(k, ', ') FROM jsonb_object_keys(CASE WHEN jsonb_typeof(e) = 'object' "
	"THEN e ELSE '{}' END) k WHERE k NOT IN ('child_id', 'spec', 'meta', 'owner')) "
	"FROM jsonb_array_elements($1 -> 'entries') e",
	1, {JSONBOID}, NULL
};
static SpiQuery q_manifest_dups = {
	"SELECT e ->> 'child_id' FROM jsonb_array_elements($1 -> 'entries') e "
	"GROUP BY 1 HAVING count(*) > 1 LIMIT 1",
	1, {JSONBOID}, NULL
};
static SpiQuery q_manifest_normal = {
	"SELECT coalesce(jsonb_agg(jsonb_build_object('child_id', e ->> 'child_id', "
	"'spec', e -> 'spec', 'meta', coalesce(e -> 'meta', '{}')) ORDER BY e ->> 'child_id'), '[]') "
	"FROM jsonb_array_elements($1 -> 'entries') e",
	1, {JSONBOID}, NULL
};
static SpiQuery q_manifest_insert = {
	"INSERT INTO malachi.declared_children (hub, child_id, spec, meta, owner) "
	"SELECT $1, e ->> 'child_id', e -> 'spec', coalesce(e -> 'meta', '{}'), "
	"current_user FROM jsonb_array_elements($2 -> 'entries') e",
	2, {TEXTOID, JSONBOID}, NULL
};

/* Column col of the last query's row as a C string, NULL for NULL. */
static char *
spi_text(uint64 row, int col)
{
	return SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
}

/*
 * Check a manifest: its shape, format, version, and every entry (child ids
 * unique, specs valid, functions schema-qualified as declare_child stores
 * them).  Returns its version and mutated_by.  Between SPI_connect and
 * SPI_finish.
 */
static int64
declared_check_manifest(Jsonb *manifest, char **mutated_by)
{
	Datum		args[1] = {JsonbPGetDatum(manifest)};
	char	   *s;
	int64		version;
	uint64		n;
	uint64		i;
	Jsonb	  **specs;

	(void) SpiQueryRun(&q_manifest_top, args, NULL);
	s = spi_text(0, 1);
	if (s == NULL || strcmp(s, "object") != 0)
		malformed_manifest("It is not a jsonb object.");
	if ((s = spi_text(0, 9)) != NULL)
		malformed_manifest(psprintf("Unknown keys: %s.", s));
	s = spi_text(0, 2);
	if (s == NULL || strcmp(s, "number") != 0)
		malformed_manifest("\"format\" is missing or not a number.");
	if (strcmp(spi_text(0, 3), "1") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("unknown manifest format %s", spi_text(0, 3)),
				 errdetail("This version of malachi reads format %d.", DECLARED_FORMAT)));
	s = spi_text(0, 4);
	if (s == NULL || strcmp(s, "number") != 0 ||
		strspn(spi_text(0, 5), "0123456789") != strlen(spi_text(0, 5)) ||
		strlen(spi_text(0, 5)) > 18)
		malformed_manifest("\"version\" is missing or not a whole number, 0 or more.");
	version = pg_strtoint64(spi_text(0, 5));
	s = spi_text(0, 6);
	if (s == NULL || strcmp(s, "string") != 0 || spi_text(0, 7)[0] == '\0')
		malformed_manifest("\"mutated_by\" is missing or not a node name.");
	*mutated_by = spi_text(0, 7);
	s = spi_text(0, 8);
	if (s == NULL || strcmp(s, "array") != 0)
		malformed_manifest("\"entries\" is missing or not an array.");

	n = SpiQueryRun(&q_manifest_entries, args, NULL);
	specs = palloc(sizeof(Jsonb *) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		char	   *child_id = spi_text(i, 3);

		if (strcmp(spi_text(i, 1), "object") != 0)
			malformed_manifest(psprintf("Entry %d is not an object.", (int) i + 1));
		if ((s = spi_text(i, 7)) != NULL)
			malformed_manifest(psprintf("Entry %d has unknown keys: %s.", (int) i + 1, s));
		s = spi_text(i, 2);
		if (s == NULL || strcmp(s, "string") != 0 || child_id[0] == '\0' ||
			strlen(child_id) > DECLARED_NAME_MAX)
			malformed_manifest(psprintf("Entry %d has no valid \"child_id\".", (int) i + 1));
		s = spi_text(i, 4);
		if (s == NULL || strcmp(s, "object") != 0)
			malformed_manifest(psprintf("Entry \"%s\" has no \"spec\" object.", child_id));
		if (strcmp(spi_text(i, 6), "object") != 0)
			malformed_manifest(psprintf("Entry \"%s\" has a \"meta\" that is not an object.", child_id));
		specs[i] = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[i],
													SPI_tuptable->tupdesc, 5, &isnull));
	}
	if (SpiQueryRun(&q_manifest_dups, args, NULL) > 0)
		malformed_manifest(psprintf("Child \"%s\" is listed twice.", spi_text(0, 1)));
	for (i = 0; i < n; i++)
	{
		ChildSpec	parsed;

		ChildSpecParse(specs[i], &parsed);
		if (!ChildSpecQualified(parsed.function))
			malformed_manifest(psprintf("Entry %d's function \"%s\" is not schema-qualified.",
										(int) i + 1, parsed.function));
		(void) declared_function_name(parsed.function);
	}
	return version;
}

/*
 * Replace a hub's list by a manifest's, its children running as the
 * current user (an "owner" in the manifest is not trusted); between
 * SPI_connect and SPI_finish.
 */
static void
declared_replace(const char *hub, Jsonb *manifest, int64 version,
				 const char *mutated_by)
{
	Datum		args[2] = {CStringGetTextDatum(hub), JsonbPGetDatum(manifest)};

	(void) SpiQueryRun(&q_children_delete, args, NULL);
	(void) SpiQueryRun(&q_manifest_insert, args, NULL);
	declared_set_version(hub, version, mutated_by);
}

/*
 * SQL: adopt_manifest(hub, manifest): 'adopted' when its version is higher,
 * 'kept' when lower or identical, 'tie_broken' on an equal version with
 * different content (the lowest mutated_by wins; a hub that does not exist
 * yet loses every tie).
 */
Datum
malachi_adopt_manifest(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	Jsonb	   *manifest;
	int64		version;
	int64		current;
	char	   *mutated_by;
	char	   *current_by;
	const char *result;
	bool		isnull;
	Datum		args[1];
	Jsonb	   *theirs;
	Jsonb	   *ours;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("manifest must not be null")));
	manifest = PG_GETARG_JSONB_P(1);
	declared_check_leader();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	version = declared_check_manifest(manifest, &mutated_by);

	/*
	 * Lock the hub's row before deciding, creating it at version 0 when it
	 * is missing: adopts and declarations of a new hub serialize on it, and
	 * each decides on what the one before committed.  Version 0 is a list
	 * nobody changed yet: no mutated_by to break a tie with.
	 */
	current = declared_lock_hub(hub, true, &current_by);
	if (current == 0)
		current_by = NULL;

	args[0] = JsonbPGetDatum(manifest);
	(void) SpiQueryRun(&q_manifest_normal, args, NULL);
	theirs = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
	ours = declared_entries(hub);

	if (version > current)
		result = "adopted";
	else if (version < current ||
			 compareJsonbContainers(&theirs->root, &ours->root) == 0)
		result = "kept";
	else
	{
		bool		theirs_win = current_by == NULL ||
		strcmp(mutated_by, current_by) < 0;

		ereport(WARNING,
				(errmsg("declared list of hub \"%s\": version " INT64_FORMAT " differs between \"%s\" and \"%s\"",
						hub, version, current_by ? current_by : "(none)", mutated_by),
				 errdetail("The list of the lowest mutated_by, \"%s\", wins.",
						   theirs_win ? mutated_by : current_by)));
		result = "tie_broken";
		if (!theirs_win)
		{
			SPI_finish();
			PG_RETURN_TEXT_P(cstring_to_text(result));
		}
	}
	if (strcmp(result, "kept") != 0)
		declared_replace(hub, manifest, version, mutated_by);
	else if (current == 0)
	{
		/* an empty list kept: leave no row behind for a hub nobody uses */
		Datum		hubarg[1] = {CStringGetTextDatum(hub)};

		(void) SpiQueryRun(&q_hub_drop_unused, hubarg, NULL);
	}
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/* SQL: clear_declared(hub): the operator's override */
Datum
malachi_clear_declared(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);
	Datum		args[1] = {CStringGetTextDatum(hub)};
	int64		version;

	declared_check_leader();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	version = declared_lock_hub(hub, true, NULL);
	version = Max(version, SupervisorHubEvidence(hub)) + 1;
	(void) SpiQueryRun(&q_children_delete, args, NULL);
	declared_set_version(hub, version, malachi_node_name);
	SPI_finish();
	PG_RETURN_INT64(version);
}

/* SQL: declared_parked(hub) */
Datum
malachi_declared_parked(PG_FUNCTION_ARGS)
{
	char	   *hub = declared_hub_arg(fcinfo, 0);

	PG_RETURN_BOOL(SupervisorHubParked(hub));
}

/* Trigger: a declared list changed; wake the supervisor at commit. */
Datum
malachi_note_declared_change(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "malachi_note_declared_change: not called as a trigger");
	SupervisorWakeAtCommit();
	return PointerGetDatum(NULL);
}
