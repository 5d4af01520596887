/*-------------------------------------------------------------------------
 *
 * route.c
 *	  Key hashing and routing: which active range owns a key.
 *
 * Routing reads the backend's cache of active ranges (metacache.c), not the
 * control plane, so it costs a hash and a binary search while metadata is
 * unchanged.  A NULL key has no owner here: produce spreads NULL keys over
 * ranges itself.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "keyspace.h"
#include "metacache.h"

PG_FUNCTION_INFO_V1(malachi_key_hash);
PG_FUNCTION_INFO_V1(malachi_route);
PG_FUNCTION_INFO_V1(malachi_active_range_ids);

/*
 * RouteKeyHash
 *		The hash of a key's UTF-8 bytes, whatever the database encoding.
 */
static uint32
RouteKeyHash(text *key)
{
	const char *data = VARDATA_ANY(key);
	int			len = VARSIZE_ANY_EXHDR(key);
	char	   *utf8 = pg_server_to_any(data, len, PG_UTF8);
	uint32		hash;

	if (utf8 == data)
		return KeyspaceHash(data, len);
	hash = KeyspaceHash(utf8, strlen(utf8));
	pfree(utf8);
	return hash;
}

/* SQL: key_hash(key) */
Datum
malachi_key_hash(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64((int64) RouteKeyHash(PG_GETARG_TEXT_PP(0)));
}

/* SQL: route(topic, key) */
Datum
malachi_route(PG_FUNCTION_ARGS)
{
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("key must not be null"),
				 errdetail("A NULL key hashes to no range."),
				 errhint("produce places records with NULL keys on a range of its choosing.")));
	PG_RETURN_INT64(MetaCacheRoute(topic, RouteKeyHash(PG_GETARG_TEXT_PP(1))));
}

/* SQL: active_range_ids(topic), ordered by key_lo */
Datum
malachi_active_range_ids(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *topic = CheckNameArg(fcinfo, 0, "topic");
	const RangeRow *ranges;
	int			n;
	int			i;

	n = MetaCacheActiveRanges(topic, &ranges);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	for (i = 0; i < n; i++)
	{
		Datum		value = Int64GetDatum(ranges[i].range_id);
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	return (Datum) 0;
}
