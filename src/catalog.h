/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  The control plane: topics, ranges and policies in malachi's tables.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_CATALOG_H
#define MALACHI_CATALOG_H

#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "keyspace.h"
#include "settings.h"

/* Longest topic or policy name, in bytes */
#define CATALOG_NAME_MAX	249

/*
 * A topic or policy name argument: not NULL (22004), 1 to CATALOG_NAME_MAX
 * bytes (22023).  Names are only ever compared, never interpreted.
 */
static inline char *
CheckNameArg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	char	   *name;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (name[0] == '\0' || strlen(name) > CATALOG_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid %s name", what),
				 errdetail("A %s name is between 1 and %d bytes long.",
						   what, CATALOG_NAME_MAX)));
	return name;
}

/* How a lookup locks the row it finds */
typedef enum CatalogLock
{
	CATALOG_LOCK_NONE,
	CATALOG_LOCK_KEY_SHARE,		/* keeps the row from being deleted */
	CATALOG_LOCK_NO_KEY_UPDATE, /* serializes changes of the row's columns */
	CATALOG_LOCK_UPDATE			/* excludes all of the above: for deletes */
} CatalogLock;

/* One row of malachi.range_meta */
typedef struct RangeRow
{
	int64		range_id;
	int64		topic_id;
	KeySlice	slice;
	bool		active;
} RangeRow;

/* topics */
extern int64 CatalogTopicId(const char *topic, CatalogLock lock);
extern int64 CatalogInsertTopic(const char *topic, Jsonb *settings);
extern void CatalogDeleteTopic(int64 topic_id);
extern Jsonb *CatalogTopicSettings(int64 topic_id);
extern void CatalogSetTopicSettings(int64 topic_id, Jsonb *settings);
extern void CatalogTopicSettingsAndPolicy(int64 topic_id, Jsonb **settings,
										  Jsonb **definition);

/* policies */
extern Jsonb *CatalogPolicyDefinition(const char *policy, CatalogLock lock);
extern void CatalogInsertPolicy(const char *policy, Jsonb *definition);
extern void CatalogUpdatePolicy(const char *policy, Jsonb *definition);
extern void CatalogDeletePolicy(const char *policy);
extern char *CatalogTopicPolicy(int64 topic_id);
extern void CatalogBindPolicy(int64 topic_id, const char *policy);
extern List *CatalogTopicsBoundTo(const char *policy);

/* ranges */
extern bool CatalogLockRange(int64 range_id, RangeRow *row);
extern bool CatalogLockRangeTopic(int64 range_id);
extern void CatalogSealRange(int64 range_id, int64 end_offset);
extern bool CatalogRangeLastEnd(int64 range_id, int64 *end_offset);
extern int64 CatalogInsertRange(int64 topic_id, KeySlice slice,
								const int64 *parents, int nparents,
								bool active);
extern void CatalogTopicStorage(int64 topic_id, bool latest,
								StorageSettings *storage);
extern bool CatalogRangeHead(int64 range_id, int64 *segment_id,
							 int64 *base_offset);
extern bool CatalogHeadActive(int64 segment_id, int64 range_id,
							  int64 base_offset);
extern bool CatalogRangeExists(int64 range_id);
extern List *CatalogTopicSegments(int64 topic_id);
extern int	CatalogActiveRanges(const char *topic, bool latest,
								int64 *topic_id, RangeRow **ranges);

#endif							/* MALACHI_CATALOG_H */
