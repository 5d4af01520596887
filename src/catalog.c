/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  The control plane: topics, ranges and policies in malachi's tables.
 *
 * Every read and write of the control-plane tables goes through this file,
 * by SPI with plans prepared once per backend.  The functions here run in
 * the caller's transaction: user-level changes (create a topic, split a
 * range, bind a policy) commit or roll back with it.
 *
 * Rules:
 * - Queries run with read_only = false, so under READ COMMITTED each sees
 *   the latest committed rows, including a row version it waited for.
 * - A caller that changes a row first locks it (CATALOG_LOCK_UPDATE) and
 *   reads what it needs from that locked version.
 * - Results are copied into the caller's memory context before SPI_finish.
 * - Errors for missing objects carry malachi's SQLSTATEs (errors.h); the
 *   database's own constraints (see malachi--1.0.sql) are the last line of
 *   defence for the invariants, not the first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "errors.h"
#include "util.h"

static SpiQuery q_topic_id = {
	"SELECT topic_id FROM malachi.topic_meta WHERE topic = $1",
	1, {TEXTOID}, NULL
};
static SpiQuery q_topic_id_key_share = {
	"SELECT topic_id FROM malachi.topic_meta WHERE topic = $1 FOR KEY SHARE",
	1, {TEXTOID}, NULL
};
static SpiQuery q_topic_id_no_key_update = {
	"SELECT topic_id FROM malachi.topic_meta WHERE topic = $1 FOR NO KEY UPDATE",
	1, {TEXTOID}, NULL
};
static SpiQuery q_topic_id_update = {
	"SELECT topic_id FROM malachi.topic_meta WHERE topic = $1 FOR UPDATE",
	1, {TEXTOID}, NULL
};
static SpiQuery q_insert_topic = {
	"INSERT INTO malachi.topic_meta (topic, settings) VALUES ($1, $2) "
	"ON CONFLICT (topic) DO NOTHING RETURNING topic_id",
	2, {TEXTOID, JSONBOID}, NULL
};
static SpiQuery q_delete_topic = {
	"DELETE FROM malachi.topic_meta WHERE topic_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_topic_settings = {
	"SELECT settings FROM malachi.topic_meta WHERE topic_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_set_topic_settings = {
	"UPDATE malachi.topic_meta SET settings = $2 WHERE topic_id = $1",
	2, {INT8OID, JSONBOID}, NULL
};
static SpiQuery q_policy = {
	"SELECT definition FROM malachi.policy_meta WHERE policy = $1",
	1, {TEXTOID}, NULL
};
static SpiQuery q_policy_key_share = {
	"SELECT definition FROM malachi.policy_meta WHERE policy = $1 FOR KEY SHARE",
	1, {TEXTOID}, NULL
};
static SpiQuery q_policy_update = {
	"SELECT definition FROM malachi.policy_meta WHERE policy = $1 FOR UPDATE",
	1, {TEXTOID}, NULL
};
static SpiQuery q_insert_policy = {
	"INSERT INTO malachi.policy_meta (policy, definition) VALUES ($1, $2) "
	"ON CONFLICT (policy) DO NOTHING RETURNING policy",
	2, {TEXTOID, JSONBOID}, NULL
};
static SpiQuery q_update_policy = {
	"UPDATE malachi.policy_meta SET definition = $2, updated_at = now() "
	"WHERE policy = $1 RETURNING policy",
	2, {TEXTOID, JSONBOID}, NULL
};
static SpiQuery q_delete_policy = {
	"DELETE FROM malachi.policy_meta WHERE policy = $1",
	1, {TEXTOID}, NULL
};
static SpiQuery q_topic_policy = {
	"SELECT policy FROM malachi.topic_policy WHERE topic_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_bind_policy = {
	"INSERT INTO malachi.topic_policy (topic_id, policy) VALUES ($1, $2) "
	"ON CONFLICT (topic_id) DO UPDATE SET policy = EXCLUDED.policy",
	2, {INT8OID, TEXTOID}, NULL
};
static SpiQuery q_unbind_policy = {
	"DELETE FROM malachi.topic_policy WHERE topic_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_topics_bound_to = {
	"SELECT t.topic FROM malachi.topic_policy b "
	"JOIN malachi.topic_meta t USING (topic_id) "
	"WHERE b.policy = $1 ORDER BY t.topic COLLATE \"C\"",
	1, {TEXTOID}, NULL
};
static SpiQuery q_lock_range_topic = {
	"SELECT topic_id FROM malachi.topic_meta WHERE topic_id = "
	"(SELECT topic_id FROM malachi.range_meta WHERE range_id = $1) FOR KEY SHARE",
	1, {INT8OID}, NULL
};
static SpiQuery q_lock_range = {
	"SELECT range_id, topic_id, key_lo, key_hi, state = 'active' "
	"FROM malachi.range_meta WHERE range_id = $1 FOR NO KEY UPDATE",
	1, {INT8OID}, NULL
};
static SpiQuery q_seal_range = {
	"UPDATE malachi.range_meta SET state = 'sealed', sealed_at = now(), "
	"end_offset = $2 WHERE range_id = $1 AND state = 'active'",
	2, {INT8OID, INT8OID}, NULL
};
static SpiQuery q_insert_range = {
	"INSERT INTO malachi.range_meta "
	"(topic_id, key_lo, key_hi, parents, state, sealed_at, end_offset) "
	"VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN 'active' ELSE 'sealed' END, "
	"CASE WHEN $5 THEN NULL ELSE now() END, CASE WHEN $5 THEN NULL ELSE 0 END) "
	"RETURNING range_id",
	5, {INT8OID, INT8OID, INT8OID, INT8ARRAYOID, BOOLOID}, NULL
};
static SpiQuery q_active_ranges = {
	"SELECT t.topic_id, r.range_id, r.topic_id, r.key_lo, r.key_hi "
	"FROM malachi.topic_meta t LEFT JOIN malachi.range_meta r "
	"ON r.topic_id = t.topic_id AND r.state = 'active' "
	"WHERE t.topic = $1 ORDER BY r.key_lo",
	1, {TEXTOID}, NULL
};

static SpiQuery q_topic_storage = {
	"SELECT t.settings, p.definition FROM malachi.topic_meta t "
	"LEFT JOIN malachi.topic_policy b USING (topic_id) "
	"LEFT JOIN malachi.policy_meta p USING (policy) WHERE t.topic_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_range_head = {
	"SELECT segment_id, base_offset FROM malachi.segment_meta "
	"WHERE range_id = $1 AND state = 'active'",
	1, {INT8OID}, NULL
};
static SpiQuery q_range_last = {
	"SELECT end_offset FROM malachi.segment_meta "
	"WHERE range_id = $1 ORDER BY seq DESC LIMIT 1",
	1, {INT8OID}, NULL
};
static SpiQuery q_head_active = {
	"SELECT 1 FROM malachi.segment_meta WHERE segment_id = $1 AND range_id = $2 "
	"AND base_offset = $3 AND state = 'active'",
	3, {INT8OID, INT8OID, INT8OID}, NULL
};
static SpiQuery q_range_exists = {
	"SELECT 1 FROM malachi.range_meta WHERE range_id = $1",
	1, {INT8OID}, NULL
};
static SpiQuery q_lock_topic_ranges = {
	"SELECT FROM malachi.range_meta WHERE topic_id = $1 FOR UPDATE",
	1, {INT8OID}, NULL
};
static SpiQuery q_topic_segments = {
	"SELECT s.segment_id FROM malachi.segment_meta s "
	"JOIN malachi.range_meta r USING (range_id) WHERE r.topic_id = $1",
	1, {INT8OID}, NULL
};

/*---- SPI plumbing ----*/

/* Open an SPI connection; see catalog_done. */
static void
catalog_begin(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/* Close the SPI connection opened by catalog_begin. */
static void
catalog_done(void)
{
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
}

/* Column col (from 1) of result row as a Datum; isnull reports NULL. */
static inline Datum
catalog_value(uint64 row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 col, isnull);
}

/* Column col of result row as int64 (the column is NOT NULL). */
static inline int64
catalog_int64(uint64 row, int col)
{
	bool		isnull;
	Datum		d = catalog_value(row, col, &isnull);

	Assert(!isnull);
	return DatumGetInt64(d);
}

/* Column col of row 0 as a jsonb copied into cxt, or NULL. */
static Jsonb *
catalog_jsonb_copy(MemoryContext cxt, int col)
{
	bool		isnull;
	Datum		d = catalog_value(0, col, &isnull);
	MemoryContext old;
	Jsonb	   *result;

	if (isnull)
		return NULL;
	old = MemoryContextSwitchTo(cxt);
	result = DatumGetJsonbPCopy(d);
	MemoryContextSwitchTo(old);
	return result;
}

/* Raise no_such_topic for a name. */
static void
catalog_no_such_topic(const char *topic)
{
	ereport(ERROR,
			(errcode(ERRCODE_MALACHI_NO_SUCH_TOPIC),
			 errmsg("topic \"%s\" does not exist", topic)));
}

/* Raise no_such_policy for a name. */
static void
catalog_no_such_policy(const char *policy)
{
	ereport(ERROR,
			(errcode(ERRCODE_MALACHI_NO_SUCH_POLICY),
			 errmsg("policy \"%s\" does not exist", policy)));
}

/*---- topics ----*/

/*
 * CatalogTopicId
 *		A topic's id by name, locking its row as asked; no_such_topic if
 *		there is none.
 */
int64
CatalogTopicId(const char *topic, CatalogLock lock)
{
	Datum		args[1] = {CStringGetTextDatum(topic)};
	SpiQuery *q;
	int64		topic_id;

	q = lock == CATALOG_LOCK_UPDATE ? &q_topic_id_update :
		lock == CATALOG_LOCK_NO_KEY_UPDATE ? &q_topic_id_no_key_update :
		lock == CATALOG_LOCK_KEY_SHARE ? &q_topic_id_key_share : &q_topic_id;
	catalog_begin();
	if (SpiQueryRun(q, args, NULL) == 0)
		catalog_no_such_topic(topic);
	topic_id = catalog_int64(0, 1);
	catalog_done();
	return topic_id;
}

/*
 * CatalogInsertTopic
 *		Create a topic row with its overrides; topic_exists if the name is
 *		taken (also by a concurrent transaction that committed first).
 */
int64
CatalogInsertTopic(const char *topic, Jsonb *settings)
{
	Datum		args[2] = {CStringGetTextDatum(topic), JsonbPGetDatum(settings)};
	int64		topic_id;

	catalog_begin();
	if (SpiQueryRun(&q_insert_topic, args, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_TOPIC_EXISTS),
				 errmsg("topic \"%s\" already exists", topic)));
	topic_id = catalog_int64(0, 1);
	catalog_done();
	return topic_id;
}

/* Delete a topic row; its ranges and binding go with it (ON DELETE CASCADE). */
void
CatalogDeleteTopic(int64 topic_id)
{
	Datum		args[1] = {Int64GetDatum(topic_id)};

	catalog_begin();
	SpiQueryRun(&q_delete_topic, args, NULL);
	catalog_done();
}

/* A topic's stored overrides. */
Jsonb *
CatalogTopicSettings(int64 topic_id)
{
	Datum		args[1] = {Int64GetDatum(topic_id)};
	MemoryContext cxt = CurrentMemoryContext;
	Jsonb	   *settings = NULL;

	catalog_begin();
	if (SpiQueryRun(&q_topic_settings, args, NULL) > 0)
		settings = catalog_jsonb_copy(cxt, 1);
	catalog_done();
	return settings;
}

/*
 * A topic's stored overrides and its policy's definition (NULL for none),
 * read together: separate reads could pair the topic with a binding or a
 * policy that another transaction had changed in between, or fail on a
 * policy dropped right after its binding.
 */
void
CatalogTopicSettingsAndPolicy(int64 topic_id, Jsonb **settings,
							  Jsonb **definition)
{
	Datum		args[1] = {Int64GetDatum(topic_id)};
	MemoryContext cxt = CurrentMemoryContext;

	*settings = *definition = NULL;
	catalog_begin();
	if (SpiQueryRun(&q_topic_storage, args, NULL) > 0)
	{
		*settings = catalog_jsonb_copy(cxt, 1);
		*definition = catalog_jsonb_copy(cxt, 2);
	}
	catalog_done();
}

/* Replace a topic's stored overrides. */
void
CatalogSetTopicSettings(int64 topic_id, Jsonb *settings)
{
	Datum		args[2] = {Int64GetDatum(topic_id), JsonbPGetDatum(settings)};

	catalog_begin();
	SpiQueryRun(&q_set_topic_settings, args, NULL);
	catalog_done();
}

/*---- policies ----*/

/*
 * CatalogPolicyDefinition
 *		A policy's definition, locking its row as asked; no_such_policy if
 *		there is none.
 */
Jsonb *
CatalogPolicyDefinition(const char *policy, CatalogLock lock)
{
	Datum		args[1] = {CStringGetTextDatum(policy)};
	MemoryContext cxt = CurrentMemoryContext;
	SpiQuery *q;
	Jsonb	   *definition;

	Assert(lock != CATALOG_LOCK_NO_KEY_UPDATE);
	q = lock == CATALOG_LOCK_UPDATE ? &q_policy_update :
		lock == CATALOG_LOCK_KEY_SHARE ? &q_policy_key_share : &q_policy;
	catalog_begin();
	if (SpiQueryRun(q, args, NULL) == 0)
		catalog_no_such_policy(policy);
	definition = catalog_jsonb_copy(cxt, 1);
	catalog_done();
	return definition;
}

/* Create a policy; policy_exists if the name is taken. */
void
CatalogInsertPolicy(const char *policy, Jsonb *definition)
{
	Datum		args[2] = {CStringGetTextDatum(policy), JsonbPGetDatum(definition)};

	catalog_begin();
	if (SpiQueryRun(&q_insert_policy, args, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_POLICY_EXISTS),
				 errmsg("policy \"%s\" already exists", policy)));
	catalog_done();
}

/* Replace a policy's definition; no_such_policy if there is none. */
void
CatalogUpdatePolicy(const char *policy, Jsonb *definition)
{
	Datum		args[2] = {CStringGetTextDatum(policy), JsonbPGetDatum(definition)};

	catalog_begin();
	if (SpiQueryRun(&q_update_policy, args, NULL) == 0)
		catalog_no_such_policy(policy);
	catalog_done();
}

/* Delete a policy row (the caller checked that no topic is bound). */
void
CatalogDeletePolicy(const char *policy)
{
	Datum		args[1] = {CStringGetTextDatum(policy)};

	catalog_begin();
	SpiQueryRun(&q_delete_policy, args, NULL);
	catalog_done();
}

/* The policy a topic is bound to, or NULL. */
char *
CatalogTopicPolicy(int64 topic_id)
{
	Datum		args[1] = {Int64GetDatum(topic_id)};
	MemoryContext cxt = CurrentMemoryContext;
	char	   *policy = NULL;

	catalog_begin();
	if (SpiQueryRun(&q_topic_policy, args, NULL) > 0)
	{
		bool		isnull;
		Datum		d = catalog_value(0, 1, &isnull);
		MemoryContext old = MemoryContextSwitchTo(cxt);

		policy = TextDatumGetCString(d);
		MemoryContextSwitchTo(old);
	}
	catalog_done();
	return policy;
}

/* Bind a topic to a policy (replacing its binding), or unbind it (NULL). */
void
CatalogBindPolicy(int64 topic_id, const char *policy)
{
	catalog_begin();
	if (policy == NULL)
	{
		Datum		args[1] = {Int64GetDatum(topic_id)};

		SpiQueryRun(&q_unbind_policy, args, NULL);
	}
	else
	{
		Datum		args[2] = {Int64GetDatum(topic_id), CStringGetTextDatum(policy)};

		SpiQueryRun(&q_bind_policy, args, NULL);
	}
	catalog_done();
}

/* Names of the topics bound to a policy, sorted bytewise. */
List *
CatalogTopicsBoundTo(const char *policy)
{
	Datum		args[1] = {CStringGetTextDatum(policy)};
	MemoryContext cxt = CurrentMemoryContext;
	List	   *topics = NIL;
	uint64		n;
	uint64		i;

	catalog_begin();
	n = SpiQueryRun(&q_topics_bound_to, args, NULL);
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		d = catalog_value(i, 1, &isnull);
		MemoryContext old = MemoryContextSwitchTo(cxt);

		topics = lappend(topics, TextDatumGetCString(d));
		MemoryContextSwitchTo(old);
	}
	catalog_done();
	return topics;
}

/*---- ranges ----*/

/* Fill a RangeRow from columns (range_id, topic_id, key_lo, key_hi) at col. */
static void
catalog_range_row(uint64 row, int col, RangeRow *out)
{
	out->range_id = catalog_int64(row, col);
	out->topic_id = catalog_int64(row, col + 1);
	out->slice.lo = (uint64) catalog_int64(row, col + 2);
	out->slice.hi = (uint64) catalog_int64(row, col + 3);
}

/*
 * CatalogLockRangeTopic
 *		Lock the topic of a range FOR KEY SHARE, so that the topic cannot be
 *		dropped under a change of its ranges; false if there is no such
 *		range.  Take it before CatalogLockRange: drop_topic locks the topic
 *		first and its ranges second, and so must everyone else.
 */
bool
CatalogLockRangeTopic(int64 range_id)
{
	Datum		args[1] = {Int64GetDatum(range_id)};
	bool		found;

	catalog_begin();
	found = SpiQueryRun(&q_lock_range_topic, args, NULL) > 0;
	catalog_done();
	return found;
}

/*
 * CatalogLockRange
 *		Lock a range's row FOR NO KEY UPDATE and return it; false if there
 *		is none.  Splits and merges serialize on this lock, and segment
 *		opens (the writer's FOR SHARE) with them.  Not FOR UPDATE: consumer
 *		groups' position rows hold their range FOR KEY SHARE through their
 *		foreign key, and a consumer's open transaction must not hold up a
 *		split.
 */
bool
CatalogLockRange(int64 range_id, RangeRow *row)
{
	Datum		args[1] = {Int64GetDatum(range_id)};
	bool		found;
	bool		isnull;

	catalog_begin();
	found = SpiQueryRun(&q_lock_range, args, NULL) > 0;
	if (found)
	{
		catalog_range_row(0, 1, row);
		row->active = DatumGetBool(catalog_value(0, 5, &isnull));
	}
	catalog_done();
	return found;
}

/* Mark an active range sealed now, its stream ending at end_offset. */
void
CatalogSealRange(int64 range_id, int64 end_offset)
{
	Datum		args[2] = {Int64GetDatum(range_id), Int64GetDatum(end_offset)};

	catalog_begin();
	if (SpiQueryRun(&q_seal_range, args, NULL) != 1)
		elog(ERROR, "range " INT64_FORMAT " was not active when sealed", range_id);
	catalog_done();
}

/*
 * CatalogInsertRange
 *		Add a range of a topic with its parents; sealed at once unless active
 *		(the intermediate levels of a pre-split topic are born sealed).
 */
int64
CatalogInsertRange(int64 topic_id, KeySlice slice, const int64 *parents,
				   int nparents, bool active)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(nparents, 1));
	ArrayType  *parr;
	Datum		args[5];
	int64		range_id;
	int			i;

	for (i = 0; i < nparents; i++)
		elems[i] = Int64GetDatum(parents[i]);
	parr = construct_array(elems, nparents, INT8OID, sizeof(int64),
						   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	args[0] = Int64GetDatum(topic_id);
	args[1] = Int64GetDatum((int64) slice.lo);
	args[2] = Int64GetDatum((int64) slice.hi);
	args[3] = PointerGetDatum(parr);
	args[4] = BoolGetDatum(active);

	catalog_begin();
	SpiQueryRun(&q_insert_range, args, NULL);
	range_id = catalog_int64(0, 1);
	catalog_done();
	return range_id;
}

/*
 * CatalogActiveRanges
 *		A topic's active ranges, ordered by key_lo, in a palloc'd array; no
 *		such topic is an error.  With latest, read the latest committed
 *		state whatever the transaction's isolation level (for caches that
 *		outlive the transaction).
 */
int
CatalogActiveRanges(const char *topic, bool latest, int64 *topic_id,
					RangeRow **ranges)
{
	Datum		args[1] = {CStringGetTextDatum(topic)};
	MemoryContext cxt = CurrentMemoryContext;
	Snapshot	snap = latest ? GetLatestSnapshot() : NULL;
	uint64		n;
	uint64		i;
	int			count = 0;

	catalog_begin();
	n = SpiQueryRun(&q_active_ranges, args, snap);
	if (n == 0)
		catalog_no_such_topic(topic);
	*topic_id = catalog_int64(0, 1);
	*ranges = MemoryContextAlloc(cxt, sizeof(RangeRow) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(void) catalog_value(i, 2, &isnull);
		if (isnull)
			continue;			/* a topic without active ranges */
		catalog_range_row(i, 2, &(*ranges)[count]);
		(*ranges)[count].active = true;
		count++;
	}
	catalog_done();
	return count;
}

/*
 * CatalogTopicStorage
 *		The storage settings a topic's overrides or its policy set; with
 *		latest, as of the latest committed state.
 */
void
CatalogTopicStorage(int64 topic_id, bool latest, StorageSettings *storage)
{
	Datum		args[1] = {Int64GetDatum(topic_id)};
	MemoryContext cxt = CurrentMemoryContext;
	Snapshot	snap = latest ? GetLatestSnapshot() : NULL;
	Jsonb	   *topic = NULL;
	Jsonb	   *policy = NULL;

	catalog_begin();
	if (SpiQueryRun(&q_topic_storage, args, snap) > 0)
	{
		topic = catalog_jsonb_copy(cxt, 1);
		policy = catalog_jsonb_copy(cxt, 2);
	}
	catalog_done();
	SettingsStorageOverrides(topic, policy, storage);
}

/*
 * A range's active segment, if it has one, as of now (the latest committed
 * state even in a REPEATABLE READ transaction: a head opened after the
 * transaction's snapshot is still a head to seal).
 */
bool
CatalogRangeHead(int64 range_id, int64 *segment_id, int64 *base_offset)
{
	Datum		args[1] = {Int64GetDatum(range_id)};
	bool		found;

	catalog_begin();
	found = SpiQueryRun(&q_range_head, args, GetLatestSnapshot()) > 0;
	if (found)
	{
		*segment_id = catalog_int64(0, 1);
		*base_offset = catalog_int64(0, 2);
	}
	catalog_done();
	return found;
}

/*
 * CatalogRangeLastEnd
 *		The end offset of a range's newest segment as of now (0 when it has
 *		none); false when that segment is still a head.
 */
bool
CatalogRangeLastEnd(int64 range_id, int64 *end_offset)
{
	Datum		args[1] = {Int64GetDatum(range_id)};
	bool		sealed = true;

	*end_offset = 0;
	catalog_begin();
	if (SpiQueryRun(&q_range_last, args, GetLatestSnapshot()) > 0)
	{
		bool		isnull;
		Datum		d = catalog_value(0, 1, &isnull);

		sealed = !isnull;
		if (sealed)
			*end_offset = DatumGetInt64(d);
	}
	catalog_done();
	return sealed;
}

/*
 * Is a segment still the active head of range_id, starting at base_offset,
 * as of now (the latest committed state, even in a REPEATABLE READ
 * transaction)?  All three are checked: ids are used again after DROP
 * EXTENSION and CREATE EXTENSION.
 */
bool
CatalogHeadActive(int64 segment_id, int64 range_id, int64 base_offset)
{
	Datum		args[3] = {Int64GetDatum(segment_id), Int64GetDatum(range_id),
	Int64GetDatum(base_offset)};
	bool		active;

	catalog_begin();
	active = SpiQueryRun(&q_head_active, args, GetLatestSnapshot()) > 0;
	catalog_done();
	return active;
}

/* Does a range exist (in any state)? */
bool
CatalogRangeExists(int64 range_id)
{
	Datum		args[1] = {Int64GetDatum(range_id)};
	bool		found;

	catalog_begin();
	found = SpiQueryRun(&q_range_exists, args, NULL) > 0;
	catalog_done();
	return found;
}

/*
 * CatalogTopicSegments
 *		Ids of every segment of a topic being dropped (a List of int64s).
 *		The topic's ranges are locked FOR UPDATE first, so that the writer
 *		opens no head on them any more (it takes a range FOR SHARE NOWAIT),
 *		and the segments are then read as of now: the list is every
 *		segment the drop's cascade deletes.
 */
List *
CatalogTopicSegments(int64 topic_id)
{
	Datum		args[1] = {Int64GetDatum(topic_id)};
	MemoryContext cxt = CurrentMemoryContext;
	List	   *ids = NIL;
	uint64		n;
	uint64		i;

	catalog_begin();
	(void) SpiQueryRun(&q_lock_topic_ranges, args, NULL);
	n = SpiQueryRun(&q_topic_segments, args, GetLatestSnapshot());
	for (i = 0; i < n; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);
		int64	   *id = palloc(sizeof(int64));

		*id = catalog_int64(i, 1);
		ids = lappend(ids, id);
		MemoryContextSwitchTo(old);
	}
	catalog_done();
	return ids;
}
