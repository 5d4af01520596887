/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  Server settings (GUCs) and the per-topic / per-policy settings model.
 *
 * A topic's effective value of each setting comes from the first level that
 * sets it: the topic's own overrides, then the policy the topic is bound to,
 * then the server default (a malachi.* GUC, or a constant for settings that
 * have no GUC).  Overrides and policy definitions are stored as jsonb
 * objects holding only the keys they set, every value validated and
 * normalized here (intervals in PostgreSQL's canonical text form).
 *
 * Rules:
 * - An unknown key, a value of the wrong type or out of range is an error
 *   (22023) raised before anything is written; nothing is silently ignored.
 * - "unlimited" is a value of its own for retention and retention_bytes: it
 *   keeps data forever even where a lower level sets a limit.  In effective
 *   settings it reads as JSON null, as SQL-API.md specifies.
 * - A JSON null in a definition means "not set at this level"; in the
 *   changes given to SettingsMerge it removes the override.
 *
 * The GUCs defined here are read by the backend that evaluates settings; the
 * topic defaults are PGC_SIGHUP so every process of a node agrees on them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "settings.h"

#define SETTINGS_UNLIMITED	"unlimited"
#define SETTINGS_TEXT_MAX	63

typedef enum SettingKind
{
	SETTING_INTEGER,			/* JSON integer in [min, max] */
	SETTING_INTERVAL,			/* interval text, positive */
	SETTING_CHOICE,				/* one string of a fixed list */
	SETTING_NAME				/* a non-empty short string */
} SettingKind;

typedef struct SettingDesc
{
	const char *key;
	SettingKind kind;
	int64		min;			/* SETTING_INTEGER bounds */
	int64		max;
	bool		unlimited_ok;	/* accepts "unlimited" */
	const char *const *choices; /* SETTING_CHOICE: NULL-terminated */
} SettingDesc;

/* One value per known key; set[i] says whether this level sets key i. */
typedef struct SettingValues
{
	bool		set[10];
	JsonbValue	value[10];
} SettingValues;

static const char *const compression_choices[] = {"none", "zstd", NULL};
static const char *const placement_choices[] = {"soft", "hard", NULL};

/* The known keys, in the order effective settings list them. */
static const SettingDesc setting_descs[] = {
	{"segment_max_bytes", SETTING_INTEGER, 4096, 1073741824, false, NULL},
	{"segment_max_age", SETTING_INTERVAL, 0, 0, false, NULL},
	{"retention", SETTING_INTERVAL, 0, 0, true, NULL},
	{"retention_bytes", SETTING_INTEGER, 1, PG_INT64_MAX, true, NULL},
	{"compression", SETTING_CHOICE, 0, 0, false, compression_choices},
	{"zstd_level", SETTING_INTEGER, 1, 22, false, NULL},
	{"replication_factor", SETTING_INTEGER, 1, 16, false, NULL},
	{"spread_by", SETTING_NAME, 0, 0, false, NULL},
	{"min_domains", SETTING_INTEGER, 1, 16, false, NULL},
	{"placement", SETTING_CHOICE, 0, 0, false, placement_choices},
};

#define NUM_SETTINGS lengthof(setting_descs)

StaticAssertDecl(NUM_SETTINGS == lengthof(((SettingValues *) 0)->set),
				 "SettingValues must have one slot per known setting");

/* Indexes into setting_descs, for the defaults */
enum
{
	S_SEGMENT_MAX_BYTES,
	S_SEGMENT_MAX_AGE,
	S_RETENTION,
	S_RETENTION_BYTES,
	S_COMPRESSION,
	S_ZSTD_LEVEL,
	S_REPLICATION_FACTOR,
	S_SPREAD_BY,
	S_MIN_DOMAINS,
	S_PLACEMENT
};

static const struct config_enum_entry compression_options[] = {
	{"none", 0, false},
	{"zstd", 1, false},
	{NULL, 0, false}
};

/* GUC variables */
char	   *malachi_database = NULL;
char	   *malachi_data_directory = NULL;
char	   *malachi_node_name = NULL;
int			malachi_segment_max_bytes = 64 * 1024 * 1024;
int			malachi_segment_max_age = 3600;
int			malachi_retention = -1;
int			malachi_retention_bytes = -1;
int			malachi_compression = 0;
int			malachi_zstd_level = 1;
int			malachi_replication_factor = 1;
int			malachi_max_active_segments = 1024;
bool		malachi_fsync = true;
bool		malachi_direct_io = false;
int			malachi_max_record_bytes = 1024 * 1024;
int			malachi_spare_segments = 2;
int			malachi_max_spare_segments = 16;
int			malachi_produce_mode = PRODUCE_TRANSACTIONAL;
int			malachi_max_transaction_bytes = 64 * 1024 * 1024;
int			malachi_sweep_interval = 10;
int			malachi_scrub_rate = 16 * 1024;
int			malachi_orphan_grace = 3600;
char	   *malachi_manifest_directory = NULL;
int			malachi_supervisor_interval = 10;

static const struct config_enum_entry produce_mode_options[] = {
	{"transactional", PRODUCE_TRANSACTIONAL, false},
	{"immediate", PRODUCE_IMMEDIATE, false},
	{NULL, 0, false}
};

static void settings_parse(Jsonb *settings, const char *what, bool keep_nulls,
						   SettingValues *out);
static bool settings_check_limit(int *newval, void **extra, GucSource source);
static Jsonb *settings_to_jsonb(const SettingValues *values, bool effective);

/*---- GUCs ----*/

/*
 * SettingsInit
 *		Define malachi's GUCs and reserve the malachi.* prefix.
 */
void
SettingsInit(void)
{
	DefineCustomStringVariable("malachi.database",
							   "Database that holds malachi on this node.",
							   "CREATE EXTENSION malachi is refused elsewhere; background workers connect to it.",
							   &malachi_database, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("malachi.data_directory",
							   "Directory of segment files, relative to the data directory unless absolute.",
							   NULL,
							   &malachi_data_directory, "malachi",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("malachi.node_name",
							   "Name of this node in segment replica sets.",
							   NULL,
							   &malachi_node_name, "local",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.segment_max_bytes",
							"Default size at which a range's active segment is rolled.",
							NULL,
							&malachi_segment_max_bytes, 64 * 1024 * 1024,
							4096, 1073741824,
							PGC_SIGHUP, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.segment_max_age",
							"Default age at which a range's active segment is rolled.",
							NULL,
							&malachi_segment_max_age, 3600, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.retention",
							"Default age after which sealed segments are deleted; -1 keeps them forever.",
							NULL,
							&malachi_retention, -1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S, settings_check_limit, NULL, NULL);
	DefineCustomIntVariable("malachi.retention_bytes",
							"Default size per range beyond which the oldest sealed segments are deleted; -1 is unlimited.",
							NULL,
							&malachi_retention_bytes, -1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, settings_check_limit, NULL, NULL);
	DefineCustomEnumVariable("malachi.compression",
							 "Default compression of record batches.",
							 NULL,
							 &malachi_compression, 0, compression_options,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.zstd_level",
							"Default zstd compression level.",
							NULL,
							&malachi_zstd_level, 1, 1, 22,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.replication_factor",
							"Default number of replicas of each segment.",
							NULL,
							&malachi_replication_factor, 1, 1, 16,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("malachi.max_active_segments",
							"Segments this node can append to at once (shared memory slots).",
							NULL,
							&malachi_max_active_segments, 1024, 16, 65536,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	/*
	 * Server-wide and fixed at start: a backend with it off marks every
	 * written region of a head synced, other backends' included, so a
	 * backend that had it on would acknowledge unsynced appends.
	 */
	DefineCustomBoolVariable("malachi.fsync",
							 "Acknowledge appends only once they are on disk.",
							 "Turning this off can lose acknowledged records in an operating system crash; for benchmarks and tests only.",
							 &malachi_fsync, true,
							 PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("malachi.direct_io",
							 "Write large batches with direct I/O, bypassing the page cache.",
							 "Batches of 64 kB or more are padded to 4 kB blocks and written with O_DIRECT where the file system allows it; consumers then read them from disk, not from the page cache.",
							 &malachi_direct_io, false,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.max_record_bytes",
							"Largest record (key, value and headers) a produce accepts.",
							NULL,
							&malachi_max_record_bytes, 1024 * 1024, 1024,
							64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);

	DefineCustomIntVariable("malachi.spare_segments",
							"Zero-filled spare segment files the writer worker keeps ready.",
							"New segments take over a spare, so that appends overwrite allocated blocks instead of growing the file.",
							&malachi_spare_segments, 2, 0, 64,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("malachi.max_spare_segments",
							"Most spare segment files kept, counting the recycled files of deleted segments.",
							"A deleted segment's file becomes a spare while there are fewer; 0 removes every deleted segment's file at once.",
							&malachi_max_spare_segments, 16, 0, 1024,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomEnumVariable("malachi.produce_mode",
							 "When produced records become readable: at commit (transactional) or at once (immediate).",
							 "transactional: records are appended at pre-commit and readable if and only if the transaction commits. immediate: appended and durable when the call returns, whatever the transaction does.",
							 &malachi_produce_mode, PRODUCE_TRANSACTIONAL,
							 produce_mode_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.max_transaction_bytes",
							"Most record bytes one transaction may produce in transactional mode.",
							"A transaction that produces more is refused (its records are buffered in memory until commit).",
							&malachi_max_transaction_bytes, 64 * 1024 * 1024,
							1024, 256 * 1024 * 1024,
							PGC_USERSET, GUC_UNIT_BYTE, NULL, NULL, NULL);

	DefineCustomIntVariable("malachi.sweep_interval",
							"Time between two passes of the sweeper worker.",
							NULL,
							&malachi_sweep_interval, 10, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.scrub_rate",
							"Bytes of sealed segments the sweeper verifies per second of sweep interval (0: no scrub).",
							NULL,
							&malachi_scrub_rate, 16 * 1024, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.orphan_grace",
							"Age after which a segment file that no segment row names is removed.",
							NULL,
							&malachi_orphan_grace, 3600, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomStringVariable("malachi.manifest_directory",
							   "Directory the supervisor copies every declared list to, as a manifest (empty: none).",
							   "At start, a list that is missing is restored from its copy there.",
							   &malachi_manifest_directory, "",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("malachi.supervisor_interval",
							"Time between two reconciles of the supervisor when nothing wakes it.",
							NULL,
							&malachi_supervisor_interval, 10, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
}

/* A retention limit is -1 (none) or positive: 0 would delete everything. */
static bool
settings_check_limit(int *newval, void **extra, GucSource source)
{
	if (*newval == 0)
	{
		GUC_check_errdetail("Use -1 to keep data forever, or a positive limit.");
		return false;
	}
	return true;
}

/*---- validation ----*/

/* Raise the one error every invalid setting gets. */
static void
settings_invalid(const char *what, const char *key, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for setting \"%s\" in %s", key, what),
			 errdetail("%s", detail)));
}

/* Find a key's descriptor; -1 when unknown. */
static int
settings_find(const char *key, int len)
{
	int			i;

	for (i = 0; i < (int) NUM_SETTINGS; i++)
		if (strlen(setting_descs[i].key) == (size_t) len &&
			strncmp(setting_descs[i].key, key, len) == 0)
			return i;
	return -1;
}

/* A JSON string value holding a copy of s. */
static JsonbValue
settings_string(const char *s)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = pstrdup(s);
	v.val.string.len = strlen(s);
	return v;
}

/* A JSON number value holding x. */
static JsonbValue
settings_number(int64 x)
{
	JsonbValue	v;

	v.type = jbvNumeric;
	v.val.numeric = int64_to_numeric(x);
	return v;
}

/*
 * A JSON string holding an interval in the "postgres" style, whatever the
 * session's IntervalStyle: stored settings must not depend on who wrote them.
 */
static JsonbValue
settings_interval(Interval *iv)
{
	struct pg_itm itm;
	char		buf[MAXDATELEN + 1];
	Interval   *justified;

	/* whole days as days: a default of 604800 seconds reads "7 days" */
	justified = DatumGetIntervalP(DirectFunctionCall1(interval_justify_hours,
													  IntervalPGetDatum(iv)));
	interval2itm(*justified, &itm);
	EncodeInterval(&itm, INTSTYLE_POSTGRES, buf);
	return settings_string(buf);
}

/* Is a JSON value the string "unlimited"? */
static inline bool
CheckUnlimited(const JsonbValue *v)
{
	return v->type == jbvString &&
		v->val.string.len == strlen(SETTINGS_UNLIMITED) &&
		strncmp(v->val.string.val, SETTINGS_UNLIMITED, v->val.string.len) == 0;
}

/*
 * Validate an integer setting: a JSON number with no fraction, in bounds.
 */
static JsonbValue
settings_check_integer(const SettingDesc *d, const JsonbValue *v,
					   const char *what)
{
	char	   *text;
	char	   *end;
	int64		x;

	if (v->type != jbvNumeric)
		settings_invalid(what, d->key, "The value must be an integer.");
	text = DatumGetCString(DirectFunctionCall1(numeric_out,
											   NumericGetDatum(v->val.numeric)));
	errno = 0;
	x = strtoi64(text, &end, 10);
	if (*end != '\0' || errno != 0)
		settings_invalid(what, d->key,
						 psprintf("The value %s is not an integer in range.", text));
	if (x < d->min || x > d->max)
		settings_invalid(what, d->key,
						 psprintf("The value must be between " INT64_FORMAT " and " INT64_FORMAT ".",
								  d->min, d->max));
	return settings_number(x);
}

/*
 * Parse interval text without letting a syntax error escape with another
 * SQLSTATE: every invalid setting raises 22023.
 */
static Interval *
settings_parse_interval(const char *text, const char *what, const char *key)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	Interval   *result = NULL;
	ErrorData  *edata;

	PG_TRY();
	{
		result = DatumGetIntervalP(DirectFunctionCall3(interval_in,
													   CStringGetDatum(text),
													   ObjectIdGetDatum(InvalidOid),
													   Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		settings_invalid(what, key, psprintf("\"%s\" is not an interval (%s).",
											 text, edata->message));
	}
	PG_END_TRY();
	return result;
}


/*
 * The length of an interval in microseconds, months counted as 30 days,
 * without overflow (the three fields can add up to more than an int64).
 */
static int128
settings_interval_span(const Interval *iv)
{
	return (int128) iv->time +
		(int128) iv->day * USECS_PER_DAY +
		(int128) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
}
/*
 * Validate an interval setting: positive interval text, normalized to
 * PostgreSQL's output form; or "unlimited" where allowed.
 */
static JsonbValue
settings_check_interval(const SettingDesc *d, const JsonbValue *v,
						const char *what)
{
	char	   *text;
	Interval   *iv;
	int128		span;

	if (d->unlimited_ok && CheckUnlimited(v))
		return settings_string(SETTINGS_UNLIMITED);
	if (v->type != jbvString)
		settings_invalid(what, d->key,
						 d->unlimited_ok ?
						 "The value must be interval text or \"unlimited\"." :
						 "The value must be interval text.");
	text = pnstrdup(v->val.string.val, v->val.string.len);
	iv = settings_parse_interval(text, what, d->key);
	span = settings_interval_span(iv);
	if (span <= 0)
		settings_invalid(what, d->key, "The interval must be positive.");
	if (span > PG_INT64_MAX)
		settings_invalid(what, d->key,
						 "The interval must be shorter than 292,000 years (2^63 microseconds).");
	return settings_interval(iv);
}

/* Validate a setting whose value is one of a fixed list of strings. */
static JsonbValue
settings_check_choice(const SettingDesc *d, const JsonbValue *v,
					  const char *what)
{
	const char *const *c;
	StringInfoData allowed;

	if (v->type == jbvString)
		for (c = d->choices; *c; c++)
			if (strlen(*c) == (size_t) v->val.string.len &&
				strncmp(*c, v->val.string.val, v->val.string.len) == 0)
				return settings_string(*c);

	initStringInfo(&allowed);
	for (c = d->choices; *c; c++)
		appendStringInfo(&allowed, "%s\"%s\"", c == d->choices ? "" : ", ", *c);
	settings_invalid(what, d->key,
					 psprintf("The value must be one of %s.", allowed.data));
	pg_unreachable();
}

/* Validate a setting whose value names something (a broker attribute). */
static JsonbValue
settings_check_name(const SettingDesc *d, const JsonbValue *v,
					const char *what)
{
	if (v->type != jbvString || v->val.string.len == 0 ||
		v->val.string.len > SETTINGS_TEXT_MAX)
		settings_invalid(what, d->key,
						 psprintf("The value must be a non-empty string of at most %d bytes.",
								  SETTINGS_TEXT_MAX));
	return settings_string(pnstrdup(v->val.string.val, v->val.string.len));
}

/* Validate and normalize one value of a known setting. */
static JsonbValue
settings_check_value(const SettingDesc *d, const JsonbValue *v,
					 const char *what)
{
	switch (d->kind)
	{
		case SETTING_INTEGER:
			if (d->unlimited_ok && CheckUnlimited(v))
				return settings_string(SETTINGS_UNLIMITED);
			return settings_check_integer(d, v, what);
		case SETTING_INTERVAL:
			return settings_check_interval(d, v, what);
		case SETTING_CHOICE:
			return settings_check_choice(d, v, what);
		case SETTING_NAME:
			return settings_check_name(d, v, what);
	}
	elog(ERROR, "unknown setting kind %d", (int) d->kind);
	pg_unreachable();
}

/*
 * settings_parse
 *		Validate a settings object into one slot per key.
 *
 * With keep_nulls, a JSON null marks its key as set to null (a removal, for
 * SettingsMerge); otherwise a null is the same as an absent key.
 */
static void
settings_parse(Jsonb *settings, const char *what, bool keep_nulls,
			   SettingValues *out)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			key = -1;

	memset(out, 0, sizeof(*out));
	if (settings == NULL)
		return;
	if (!JB_ROOT_IS_OBJECT(settings) || JB_ROOT_IS_SCALAR(settings))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", what)));

	it = JsonbIteratorInit(&settings->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = settings_find(v.val.string.val, v.val.string.len);
			if (key < 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("unknown setting \"%.*s\" in %s",
								v.val.string.len, v.val.string.val, what),
						 errhint("Known settings: segment_max_bytes, segment_max_age, retention, retention_bytes, compression, zstd_level, replication_factor, spread_by, min_domains, placement.")));
		}
		else if (tok == WJB_VALUE)
		{
			Assert(key >= 0);
			if (v.type == jbvNull)
			{
				out->set[key] = keep_nulls;
				out->value[key] = v;
			}
			else
			{
				out->value[key] = settings_check_value(&setting_descs[key],
													   &v, what);
				out->set[key] = true;
			}
		}
	}
}

/*---- building results ----*/

/* The server default of setting i, as a JSON value (null for unlimited). */
static JsonbValue
settings_default(int i)
{
	JsonbValue	v;
	Interval	iv;

	memset(&iv, 0, sizeof(iv));
	v.type = jbvNull;
	switch (i)
	{
		case S_SEGMENT_MAX_BYTES:
			return settings_number(malachi_segment_max_bytes);
		case S_SEGMENT_MAX_AGE:
			iv.time = (int64) malachi_segment_max_age * USECS_PER_SEC;
			return settings_interval(&iv);
		case S_RETENTION:
			if (malachi_retention < 0)
				return v;
			iv.time = (int64) malachi_retention * USECS_PER_SEC;
			return settings_interval(&iv);
		case S_RETENTION_BYTES:
			if (malachi_retention_bytes < 0)
				return v;
			return settings_number((int64) malachi_retention_bytes * 1024 * 1024);
		case S_COMPRESSION:
			return settings_string(compression_options[malachi_compression].name);
		case S_ZSTD_LEVEL:
			return settings_number(malachi_zstd_level);
		case S_REPLICATION_FACTOR:
			return settings_number(malachi_replication_factor);
		case S_SPREAD_BY:
			return v;
		case S_MIN_DOMAINS:
			return settings_number(1);
		case S_PLACEMENT:
			return settings_string("soft");
	}
	elog(ERROR, "unknown setting index %d", i);
	pg_unreachable();
}

/*
 * settings_to_jsonb
 *		Build a jsonb object of the set slots, or of every key when effective
 *		(where "unlimited" reads as null).
 */
static Jsonb *
settings_to_jsonb(const SettingValues *values, bool effective)
{
	JsonbParseState *state = NULL;
	JsonbValue *res;
	int			i;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	for (i = 0; i < (int) NUM_SETTINGS; i++)
	{
		JsonbValue	k = settings_string(setting_descs[i].key);
		JsonbValue	v = values->value[i];

		if (!values->set[i])
			continue;
		if (effective && CheckUnlimited(&v))
			v.type = jbvNull;
		pushJsonbValue(&state, WJB_KEY, &k);
		pushJsonbValue(&state, WJB_VALUE, &v);
	}
	res = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/*---- entry points ----*/

/*
 * SettingsValidate
 *		Check a definition (a policy's, or a topic's overrides) and return it
 *		normalized, without its null keys.  "what" names it in errors.
 */
Jsonb *
SettingsValidate(Jsonb *settings, const char *what)
{
	SettingValues values;

	settings_parse(settings, what, false, &values);
	return settings_to_jsonb(&values, false);
}

/*
 * SettingsMerge
 *		Apply changes to a topic's overrides: a key with a value replaces the
 *		override, a key with null removes it.  Returns the new overrides.
 */
Jsonb *
SettingsMerge(Jsonb *overrides, Jsonb *changes)
{
	SettingValues base;
	SettingValues delta;
	int			i;

	settings_parse(changes, "topic settings", true, &delta);
	settings_parse(overrides, "stored topic settings", false, &base);
	for (i = 0; i < (int) NUM_SETTINGS; i++)
	{
		if (!delta.set[i])
			continue;
		base.set[i] = delta.value[i].type != jbvNull;
		base.value[i] = delta.value[i];
	}
	return settings_to_jsonb(&base, false);
}

/*
 * SettingsEffective
 *		Every setting's value for a topic: its overrides, then its policy's
 *		definition (NULL when unbound), then the server defaults.
 */
Jsonb *
SettingsEffective(Jsonb *topic, Jsonb *policy)
{
	SettingValues t;
	SettingValues p;
	SettingValues eff;
	int			i;

	settings_parse(topic, "stored topic settings", false, &t);
	settings_parse(policy, "stored policy definition", false, &p);
	for (i = 0; i < (int) NUM_SETTINGS; i++)
	{
		eff.set[i] = true;
		if (t.set[i])
			eff.value[i] = t.value[i];
		else if (p.set[i])
			eff.value[i] = p.value[i];
		else
			eff.value[i] = settings_default(i);
	}
	return settings_to_jsonb(&eff, true);
}

/*
 * SettingsReplicationFactor
 *		Overrides that set only replication_factor, validated like any other.
 */
Jsonb *
SettingsReplicationFactor(int replication_factor)
{
	SettingValues values;
	JsonbValue	v = settings_number(replication_factor);

	memset(&values, 0, sizeof(values));
	values.value[S_REPLICATION_FACTOR] =
		settings_check_integer(&setting_descs[S_REPLICATION_FACTOR], &v,
							   "create_topic");
	values.set[S_REPLICATION_FACTOR] = true;
	return settings_to_jsonb(&values, false);
}

/*
 * settings_storage_int
 *		The integer value of a set slot (validated when it was stored).
 */
static int64
settings_storage_int(const JsonbValue *v)
{
	return DatumGetInt64(DirectFunctionCall1(numeric_int8,
											 NumericGetDatum(v->val.numeric)));
}

/*
 * settings_stored
 *		What a topic's overrides and its policy's definition set between
 *		them: the topic's value of a setting, else the policy's.  The values
 *		point into the two Jsonb.
 */
static void
settings_stored(Jsonb *topic, Jsonb *policy, SettingValues *out)
{
	SettingValues p;
	int			i;

	settings_parse(topic, "stored topic settings", false, out);
	settings_parse(policy, "stored policy definition", false, &p);
	for (i = 0; i < (int) NUM_SETTINGS; i++)
	{
		if (!out->set[i] && p.set[i])
		{
			out->set[i] = true;
			out->value[i] = p.value[i];
		}
	}
}

#define SETTINGS_PICK(sv, idx) ((sv).set[idx] ? &(sv).value[idx] : NULL)

/*
 * SettingsStorageOverrides
 *		The storage settings a topic's overrides or its policy set (-1 where
 *		neither does), for producers to cache with the topic's ranges.
 */
void
SettingsStorageOverrides(Jsonb *topic, Jsonb *policy, StorageSettings *out)
{
	SettingValues sv;
	const JsonbValue *v;

	settings_stored(topic, policy, &sv);
	out->segment_max_bytes = -1;
	out->compression = -1;
	out->zstd_level = -1;

	if ((v = SETTINGS_PICK(sv, S_SEGMENT_MAX_BYTES)) != NULL)
		out->segment_max_bytes = settings_storage_int(v);
	if ((v = SETTINGS_PICK(sv, S_ZSTD_LEVEL)) != NULL)
		out->zstd_level = (int) settings_storage_int(v);
	if ((v = SETTINGS_PICK(sv, S_COMPRESSION)) != NULL)
		out->compression = (v->val.string.len == 4 &&
							strncmp(v->val.string.val, "zstd", 4) == 0) ? 1 : 0;
}

/* Fill the inherited (-1) storage settings from the server defaults. */
void
SettingsStorageEffective(const StorageSettings *overrides, StorageSettings *out)
{
	out->segment_max_bytes = overrides->segment_max_bytes >= 0 ?
		overrides->segment_max_bytes : malachi_segment_max_bytes;
	out->compression = overrides->compression >= 0 ?
		overrides->compression : malachi_compression;
	out->zstd_level = overrides->zstd_level >= 0 ?
		overrides->zstd_level : malachi_zstd_level;
}

/* Microseconds of a stored interval setting, or -1 for "unlimited". */
static int64
settings_interval_us(const JsonbValue *v)
{
	char	   *text;
	Interval   *iv;

	if (CheckUnlimited(v))
		return -1;
	text = pnstrdup(v->val.string.val, v->val.string.len);
	iv = settings_parse_interval(text, "stored settings", "interval");
	/* validated to fit; a longer one stored by hand counts as the longest */
	return (int64) Min(settings_interval_span(iv), (int128) PG_INT64_MAX);
}

/*
 * SettingsRetention
 *		A topic's roll age and retention limits: its overrides, then its
 *		policy, then the server defaults (-1: no limit).
 */
void
SettingsRetention(Jsonb *topic, Jsonb *policy, RetentionSettings *out)
{
	SettingValues sv;
	const JsonbValue *v;

	settings_stored(topic, policy, &sv);
	v = SETTINGS_PICK(sv, S_SEGMENT_MAX_AGE);
	out->segment_max_age_us = v ? settings_interval_us(v) :
		(int64) malachi_segment_max_age * USECS_PER_SEC;
	v = SETTINGS_PICK(sv, S_RETENTION);
	out->retention_us = v ? settings_interval_us(v) :
		malachi_retention < 0 ? -1 : (int64) malachi_retention * USECS_PER_SEC;
	v = SETTINGS_PICK(sv, S_RETENTION_BYTES);
	out->retention_bytes = v ? (CheckUnlimited(v) ? -1 : settings_storage_int(v)) :
		malachi_retention_bytes < 0 ? -1 : (int64) malachi_retention_bytes * 1024 * 1024;
}
