/*-------------------------------------------------------------------------
 *
 * metacache.c
 *	  The shared metadata epoch and each backend's cache of active ranges.
 *
 * Routing a key must not query the control plane on every call.  Each
 * backend caches, per topic, the active ranges sorted by key_lo.  Every
 * transaction that changes a control-plane table (statement triggers call
 * malachi_note_metadata_change) bumps a shared-memory epoch right after it
 * commits, and a cached view is used only while the epoch it was loaded at
 * is still current.
 *
 * Rules:
 * - MetaCacheShared.epoch is a pg_atomic_uint64: written only by
 *   pg_atomic_fetch_add_u64 in the commit callback, read without a lock.
 *   Atomic increments cannot fail, so nothing that can fail runs after the
 *   commit record (DESIGN.md section 5).
 * - A loader reads the epoch BEFORE it reads the ranges, with the latest
 *   snapshot: a commit that it missed bumped the epoch after the read, so
 *   the next use reloads.  A view never claims to be newer than it is.
 * - A transaction that changed metadata itself reads its own uncommitted
 *   view fresh each time and never installs it in the cache.
 * - Metadata changes cannot be prepared (PREPARE TRANSACTION): the backend
 *   that commits a prepared transaction would not bump the epoch.
 * - The cache lives in CacheMemoryContext and is local to the backend: no
 *   lock protects it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "catalog/namespace.h"
#include "utils/catcache.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "errors.h"
#include "metacache.h"

/* Shared state: see the rules above. */
typedef struct MetaCacheShared
{
	pg_atomic_uint64 epoch;		/* bumped after each metadata commit */
} MetaCacheShared;

/* One topic's cached active ranges (key: the topic name). */
typedef struct TopicCacheEntry
{
	char		topic[CATALOG_NAME_MAX + 1];	/* hash key */
	uint64		epoch;			/* epoch read before loading */
	int64		topic_id;
	int			nranges;
	RangeRow   *ranges;			/* sorted by slice.lo; CacheMemoryContext */
	StorageSettings storage;	/* overrides; -1 where the topic inherits */
} TopicCacheEntry;

static MetaCacheShared *meta_shared = NULL;
static HTAB *topic_cache = NULL;

/* Did the current transaction change a control-plane table? */
static bool xact_changed_metadata = false;
/* the outermost open (sub)transaction that changed it; valid while set */
static SubTransactionId changed_subid = InvalidSubTransactionId;

/*
 * Invalidations this backend saw of malachi.range_meta itself (dropped with
 * the extension, say): DROP EXTENSION fires no trigger, so the epoch alone
 * would not tell; and rollbacks of this backend's own metadata changes.
 * range_meta_oid is the table the cached views came from.
 */
static uint64 local_flushes = 0;
static Oid	range_meta_oid = InvalidOid;
/* local_flushes when MetaCacheResets last looked range_meta_oid up */
static uint64 oid_looked_up_at = PG_UINT64_MAX;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PG_FUNCTION_INFO_V1(malachi_note_metadata_change);

static void metacache_shmem_request(void);
static void metacache_shmem_startup(void);
static void metacache_xact_callback(XactEvent event, void *arg);
static void metacache_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
									   SubTransactionId parentSubid, void *arg);
static void metacache_relcache_callback(Datum arg, Oid relid);

/*---- setup ----*/

/*
 * MetaCacheInit
 *		Ask for shared memory and watch transaction ends.  Called from
 *		_PG_init while shared_preload_libraries are loaded.
 */
void
MetaCacheInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = metacache_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = metacache_shmem_startup;
	RegisterXactCallback(metacache_xact_callback, NULL);
	RegisterSubXactCallback(metacache_subxact_callback, NULL);
	CacheRegisterRelcacheCallback(metacache_relcache_callback, (Datum) 0);
}

/* Forget cached views when the range table itself is invalidated. */
static void
metacache_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || (OidIsValid(range_meta_oid) && relid == range_meta_oid))
		local_flushes++;
}

/* Reserve the shared epoch. */
static void
metacache_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(MetaCacheShared)));
}

/* Find or create the shared epoch. */
static void
metacache_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	meta_shared = ShmemInitStruct("malachi metadata epoch",
								  sizeof(MetaCacheShared), &found);
	if (!found)
		pg_atomic_init_u64(&meta_shared->epoch, 1);
	LWLockRelease(AddinShmemInitLock);
}

/*---- the epoch ----*/

/* The current metadata epoch. */
uint64
MetaCacheEpoch(void)
{
	return pg_atomic_read_u64(&meta_shared->epoch);
}

/*
 * MetaCacheForget
 *		Make this backend's caches of metadata and segment lists reload:
 *		a change they may have read uncommitted was rolled back.
 */
void
MetaCacheForget(void)
{
	local_flushes++;
}

/*
 * MetaCacheResets
 *		Changes whenever this backend's caches had to be forgotten other
 *		than by the shared epoch: the range table invalidated (the
 *		extension dropped or created, a cache reset) or a change of its
 *		own rolled back.  For caches keyed by ids that such a change can
 *		reuse, such as segment ids after the extension is created again.
 */
uint64
MetaCacheResets(void)
{
	/* a backend that only reads must see the range table invalidated too */
	if (!OidIsValid(range_meta_oid) || oid_looked_up_at != local_flushes)
	{
		Oid			nsp = get_namespace_oid("malachi", true);

		if (OidIsValid(nsp))
			range_meta_oid = get_relname_relid("range_meta", nsp);
		oid_looked_up_at = local_flushes;
	}
	return local_flushes;
}

/*
 * MetaCacheGeneration
 *		Changes whenever cached metadata may be stale: the shared epoch moved,
 *		this backend saw the range table invalidated, or it rolled back a
 *		change of its own (its caches may have read it uncommitted).
 */
uint64
MetaCacheGeneration(void)
{
	return MetaCacheEpoch() + (local_flushes << 40);
}

/*
 * malachi_note_metadata_change
 *		Statement trigger on every control-plane table: remember to bump the
 *		epoch when this transaction commits.
 */
Datum
malachi_note_metadata_change(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "malachi_note_metadata_change must be called as a trigger");
	/* changed_subid is an ancestor of (or) the current subtransaction */
	if (!xact_changed_metadata || GetCurrentSubTransactionId() < changed_subid)
		changed_subid = GetCurrentSubTransactionId();
	xact_changed_metadata = true;
	return PointerGetDatum(NULL);
}

/*
 * metacache_subxact_callback
 *		A change made in a subtransaction that rolls back is undone: forget
 *		it.  One that commits belongs to the parent from then on.
 */
static void
metacache_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	if (!xact_changed_metadata)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		/*
		 * Caches filled meanwhile may hold a change this subtransaction
		 * made and undid, even when an outer level changed metadata too.
		 */
		local_flushes++;
		if (changed_subid == mySubid)
			xact_changed_metadata = false;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB && changed_subid == mySubid)
		changed_subid = parentSubid;
}

/*
 * metacache_xact_callback
 *		Bump the epoch after a commit that changed metadata; refuse to
 *		prepare such a transaction.
 */
static void
metacache_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (xact_changed_metadata)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("cannot prepare a transaction that changed malachi metadata"),
						 errhint("Change topics, ranges and policies in a transaction that commits directly.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (xact_changed_metadata && meta_shared != NULL)
				pg_atomic_fetch_add_u64(&meta_shared->epoch, 1);
			xact_changed_metadata = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			/* caches filled meanwhile may hold the undone change */
			if (xact_changed_metadata)
				local_flushes++;
			xact_changed_metadata = false;
			break;
		case XACT_EVENT_PREPARE:
			xact_changed_metadata = false;
			break;
		default:
			break;
	}
}

/*---- the cache ----*/

/* Create the backend's topic cache on first use. */
static void
metacache_ensure(void)
{
	HASHCTL		ctl;

	if (topic_cache != NULL)
		return;
	if (!CacheMemoryContext)
		CreateCacheMemoryContext();
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = CATALOG_NAME_MAX + 1;
	ctl.entrysize = sizeof(TopicCacheEntry);
	ctl.hcxt = CacheMemoryContext;
	topic_cache = hash_create("malachi topic cache", 64, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/*
 * metacache_lookup
 *		A topic's active ranges: from the cache while its epoch is current,
 *		else loaded (and cached, unless this transaction changed metadata).
 *		Raises no_such_topic.
 */
static int
metacache_lookup(const char *topic, const RangeRow **ranges,
				 StorageSettings *storage)
{
	TopicCacheEntry *entry;
	uint64		epoch;
	int64		topic_id;
	RangeRow   *loaded;
	RangeRow   *copy;
	StorageSettings entry_storage;
	int			n;
	bool		found;

	/*
	 * Not cached by a transaction that changed metadata (it must see its
	 * own changes, and they may roll back), nor in recovery: replay runs no
	 * trigger, so the epoch would never tell a standby's caches of the
	 * primary's changes.
	 */
	if (xact_changed_metadata || RecoveryInProgress())
	{
		n = CatalogActiveRanges(topic, false, &topic_id, &loaded);
		if (storage)
			CatalogTopicStorage(topic_id, false, storage);
		*ranges = loaded;
		return n;
	}

	metacache_ensure();
	epoch = MetaCacheGeneration();
	entry = hash_search(topic_cache, topic, HASH_FIND, NULL);
	if (entry != NULL && entry->epoch == epoch)
	{
		*ranges = entry->ranges;
		if (storage)
			*storage = entry->storage;
		return entry->nranges;
	}

	/* Drop a stale entry first: if the topic is gone, the load raises. */
	if (entry != NULL)
	{
		if (entry->ranges)
			pfree(entry->ranges);
		hash_search(topic_cache, topic, HASH_REMOVE, NULL);
	}

	range_meta_oid = get_relname_relid("range_meta",
									   get_namespace_oid("malachi", false));
	n = CatalogActiveRanges(topic, true, &topic_id, &loaded);
	CatalogTopicStorage(topic_id, true, storage ? storage : &entry_storage);
	/* everything that can fail first: an entry is only ever complete */
	copy = MemoryContextAlloc(CacheMemoryContext, sizeof(RangeRow) * Max(n, 1));
	memcpy(copy, loaded, sizeof(RangeRow) * n);
	pfree(loaded);
	entry = hash_search(topic_cache, topic, HASH_ENTER, &found);
	entry->storage = storage ? *storage : entry_storage;
	entry->topic_id = topic_id;
	entry->nranges = n;
	entry->ranges = copy;
	entry->epoch = epoch;
	*ranges = entry->ranges;
	return n;
}

/*
 * MetaCacheActiveRanges
 *		A topic's active ranges sorted by key_lo.  The array belongs to the
 *		cache: valid until the next call.
 */
int
MetaCacheActiveRanges(const char *topic, const RangeRow **ranges)
{
	if (strlen(topic) > CATALOG_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic name is too long"),
				 errdetail("Topic names are at most %d bytes.", CATALOG_NAME_MAX)));
	return metacache_lookup(topic, ranges, NULL);
}

/*
 * MetaCacheTopic
 *		A topic's active ranges (as MetaCacheActiveRanges) and the storage
 *		settings its overrides or policy set.
 */
int
MetaCacheTopic(const char *topic, const RangeRow **ranges,
			   StorageSettings *storage)
{
	if (strlen(topic) > CATALOG_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic name is too long"),
				 errdetail("Topic names are at most %d bytes.", CATALOG_NAME_MAX)));
	return metacache_lookup(topic, ranges, storage);
}

/* Did this transaction change control-plane tables (not yet committed)? */
bool
MetaCacheXactChangedMetadata(void)
{
	return xact_changed_metadata;
}

/*
 * MetaCacheRoute
 *		The active range of a topic that owns a key hash.
 */
int64
MetaCacheRoute(const char *topic, uint32 hash)
{
	const RangeRow *ranges;
	int			n = MetaCacheActiveRanges(topic, &ranges);
	int			lo = 0;
	int			hi = n - 1;

	/* binary search for the last range whose slice starts at or below hash */
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (ranges[mid].slice.lo <= hash)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	if (hi < 0 || !SliceContains(ranges[hi].slice, hash))
		ereport(ERROR,
				(errcode(ERRCODE_MALACHI_NOT_TILED),
				 errmsg("no active range of topic \"%s\" owns key hash %u", topic, hash),
				 errdetail("The topic's active ranges do not tile the keyspace in this transaction.")));
	return ranges[hi].range_id;
}
