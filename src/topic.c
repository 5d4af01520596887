/*-------------------------------------------------------------------------
 *
 * topic.c
 *	  Topics and policies: create, drop, alter, bind, and their settings.
 *
 * Everything here is a user-level change: it runs in the caller's
 * transaction and takes effect when that commits.  The SQL-callable
 * functions only unpack arguments; the Topic* and Policy* functions below
 * them hold the logic.
 *
 * Rules:
 * - A change to a topic locks the topic's row first (FOR NO KEY UPDATE),
 *   so two concurrent changes of one topic serialize and the second one
 *   reads the first one's result; splits and merges of its ranges (which
 *   hold it FOR KEY SHARE) are not held up.  drop_topic takes FOR UPDATE:
 *   it waits for every change in flight.
 * - Binding takes KEY SHARE on the policy row (by the foreign key), and
 *   drop_policy takes FOR UPDATE on it, so a policy cannot be dropped while
 *   a concurrent transaction binds a topic to it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "access/xact.h"
#include "utils/memutils.h"

#include "append.h"
#include "catalog.h"
#include "errors.h"
#include "read.h"
#include "segfile.h"
#include "keyspace.h"
#include "settings.h"
#include "sweep.h"

PG_FUNCTION_INFO_V1(malachi_create_topic);
PG_FUNCTION_INFO_V1(malachi_drop_topic);
PG_FUNCTION_INFO_V1(malachi_alter_topic);
PG_FUNCTION_INFO_V1(malachi_topic_settings);
PG_FUNCTION_INFO_V1(malachi_create_policy);
PG_FUNCTION_INFO_V1(malachi_alter_policy);
PG_FUNCTION_INFO_V1(malachi_drop_policy);
PG_FUNCTION_INFO_V1(malachi_bind_topic_policy);
PG_FUNCTION_INFO_V1(malachi_topic_policy_name);
PG_FUNCTION_INFO_V1(malachi_topics_bound_to);
PG_FUNCTION_INFO_V1(malachi_settings_valid);

/*---- argument checks ----*/

/* Refuse a NULL argument that the function needs. */
static inline void
CheckNotNull(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/*---- topics ----*/

/*
 * TopicCreate
 *		Create a topic whose keyspace is pre-split into nranges equal ranges
 *		(a power of two) by buddy splits; returns the root range id.
 *
 * The root and every intermediate level exist as sealed ranges, so the
 * ranges' parents describe the same tree that later splits extend.
 */
static int64
TopicCreate(const char *topic, int nranges, Jsonb *overrides,
			const char *policy)
{
	int64		topic_id;
	int64	   *level;
	int64	   *next;
	int			depth;
	int			width;
	int			i;
	int64		root;

	if (!KeyspaceIsPresplitCount(nranges))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a topic cannot start with %d ranges", nranges),
				 errdetail("The keyspace is pre-split evenly by halving, so the count is a power of two from 1 to 1024."),
				 errhint("Use 1, 2, 4, ... or 1024 ranges, and split or merge ranges later.")));
	if (policy != NULL)
		(void) CatalogPolicyDefinition(policy, CATALOG_LOCK_KEY_SHARE);

	topic_id = CatalogInsertTopic(topic, overrides);
	root = CatalogInsertRange(topic_id, KeyspacePresplitSlice(1, 0), NULL, 0,
							  nranges == 1);

	/* one level of halving at a time, each range the parent of two */
	level = palloc(sizeof(int64) * nranges);
	next = palloc(sizeof(int64) * nranges);
	level[0] = root;
	for (depth = 1, width = 2; width <= nranges; depth++, width *= 2)
	{
		for (i = 0; i < width; i++)
			next[i] = CatalogInsertRange(topic_id,
										 KeyspacePresplitSlice(width, i),
										 &level[i / 2], 1,
										 width == nranges);
		memcpy(level, next, sizeof(int64) * width);
	}

	if (policy != NULL)
		CatalogBindPolicy(topic_id, policy);
	return root;
}

/* SQL: create_topic(topic, ranges, replication_factor, policy) */
Datum
malachi_create_topic(PG_FUNCTION_ARGS)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	Jsonb	   *overrides = NULL;
	char	   *policy = NULL;

	CheckNotNull(fcinfo, 1, "ranges");
	if (!PG_ARGISNULL(2))
		overrides = SettingsReplicationFactor(PG_GETARG_INT32(2));
	else
		overrides = SettingsValidate(NULL, "topic settings");
	if (!PG_ARGISNULL(3))
		policy = CheckNameArg(fcinfo, 3, "policy");

	PG_RETURN_INT64(TopicCreate(topic, PG_GETARG_INT32(1), overrides, policy));
}

/*
 * TopicDrop
 *		Drop a topic: its metadata now, its segment files after commit.
 */
static void
TopicDrop(const char *topic)
{
	int64		topic_id = CatalogTopicId(topic, CATALOG_LOCK_UPDATE);
	List	   *segments = CatalogTopicSegments(topic_id);
	ListCell   *lc;

	CatalogDeleteTopic(topic_id);
	foreach(lc, segments)
		SweepDropAtCommit(*(int64 *) lfirst(lc));
}

/* SQL: drop_topic(topic) */
Datum
malachi_drop_topic(PG_FUNCTION_ARGS)
{
	TopicDrop(CheckNameArg(fcinfo, 0, "topic"));
	PG_RETURN_VOID();
}

/*
 * TopicEffectiveSettings
 *		A topic's settings: its overrides, then its policy, then defaults.
 */
static Jsonb *
TopicEffectiveSettings(int64 topic_id)
{
	Jsonb	   *settings;
	Jsonb	   *definition;

	CatalogTopicSettingsAndPolicy(topic_id, &settings, &definition);
	return SettingsEffective(settings, definition);
}

/*
 * TopicAlter
 *		Merge changes into a topic's overrides; returns effective settings.
 */
static Jsonb *
TopicAlter(const char *topic, Jsonb *changes)
{
	int64		topic_id = CatalogTopicId(topic, CATALOG_LOCK_NO_KEY_UPDATE);

	CatalogSetTopicSettings(topic_id,
							SettingsMerge(CatalogTopicSettings(topic_id),
										  changes));
	return TopicEffectiveSettings(topic_id);
}

/* SQL: alter_topic(topic, settings) */
Datum
malachi_alter_topic(PG_FUNCTION_ARGS)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");

	CheckNotNull(fcinfo, 1, "settings");
	PG_RETURN_JSONB_P(TopicAlter(topic, PG_GETARG_JSONB_P(1)));
}

/* SQL: topic_settings(topic) */
Datum
malachi_topic_settings(PG_FUNCTION_ARGS)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");

	PG_RETURN_JSONB_P(TopicEffectiveSettings(CatalogTopicId(topic,
															CATALOG_LOCK_NONE)));
}

/*---- policies ----*/

/* SQL: settings_valid(settings, what), the check constraint of stored settings */
Datum
malachi_settings_valid(PG_FUNCTION_ARGS)
{
	(void) SettingsValidate(PG_GETARG_JSONB_P(0), text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_BOOL(true);
}

/* SQL: create_policy(policy, definition) */
Datum
malachi_create_policy(PG_FUNCTION_ARGS)
{
	char	   *policy = CheckNameArg(fcinfo, 0, "policy");

	CheckNotNull(fcinfo, 1, "definition");
	CatalogInsertPolicy(policy,
						SettingsValidate(PG_GETARG_JSONB_P(1), "policy definition"));
	PG_RETURN_VOID();
}

/* SQL: alter_policy(policy, definition) */
Datum
malachi_alter_policy(PG_FUNCTION_ARGS)
{
	char	   *policy = CheckNameArg(fcinfo, 0, "policy");

	CheckNotNull(fcinfo, 1, "definition");
	CatalogUpdatePolicy(policy,
						SettingsValidate(PG_GETARG_JSONB_P(1), "policy definition"));
	PG_RETURN_VOID();
}

/*
 * PolicyDrop
 *		Drop a policy, refused while any topic is bound to it.
 */
static void
PolicyDrop(const char *policy)
{
	List	   *bound;
	StringInfoData names;
	ListCell   *lc;

	(void) CatalogPolicyDefinition(policy, CATALOG_LOCK_UPDATE);
	bound = CatalogTopicsBoundTo(policy);
	if (bound != NIL)
	{
		initStringInfo(&names);
		foreach(lc, bound)
			appendStringInfo(&names, "%s\"%s\"",
							 lc == list_head(bound) ? "" : ", ",
							 (char *) lfirst(lc));
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_POLICY_IN_USE),
				 errmsg("policy \"%s\" is still bound to %d topic(s)",
						policy, list_length(bound)),
				 errdetail("Bound topics: %s.", names.data),
				 errhint("Detach them with malachi.bind_topic_policy(topic, NULL) first.")));
	}
	CatalogDeletePolicy(policy);
}

/* SQL: drop_policy(policy) */
Datum
malachi_drop_policy(PG_FUNCTION_ARGS)
{
	PolicyDrop(CheckNameArg(fcinfo, 0, "policy"));
	PG_RETURN_VOID();
}

/* SQL: bind_topic_policy(topic, policy); a NULL policy detaches */
Datum
malachi_bind_topic_policy(PG_FUNCTION_ARGS)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	char	   *policy = NULL;
	int64		topic_id;

	if (!PG_ARGISNULL(1))
		policy = CheckNameArg(fcinfo, 1, "policy");
	topic_id = CatalogTopicId(topic, CATALOG_LOCK_NO_KEY_UPDATE);
	if (policy != NULL)
		(void) CatalogPolicyDefinition(policy, CATALOG_LOCK_KEY_SHARE);
	CatalogBindPolicy(topic_id, policy);
	PG_RETURN_VOID();
}

/* SQL: topic_policy_name(topic) */
Datum
malachi_topic_policy_name(PG_FUNCTION_ARGS)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	char	   *policy = CatalogTopicPolicy(CatalogTopicId(topic, CATALOG_LOCK_NONE));

	if (policy == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(policy));
}

/* SQL: topics_bound_to(policy), sorted */
Datum
malachi_topics_bound_to(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *policy = CheckNameArg(fcinfo, 0, "policy");
	List	   *topics;
	ListCell   *lc;

	(void) CatalogPolicyDefinition(policy, CATALOG_LOCK_NONE);
	topics = CatalogTopicsBoundTo(policy);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	foreach(lc, topics)
	{
		Datum		value = CStringGetTextDatum((char *) lfirst(lc));
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	return (Datum) 0;
}
