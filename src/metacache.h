/*-------------------------------------------------------------------------
 *
 * metacache.h
 *	  The shared metadata epoch and each backend's cache of active ranges.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_METACACHE_H
#define MALACHI_METACACHE_H

#include "catalog.h"
#include "settings.h"

extern void MetaCacheInit(void);
extern uint64 MetaCacheEpoch(void);
extern uint64 MetaCacheGeneration(void);
extern uint64 MetaCacheResets(void);
extern void MetaCacheForget(void);
extern int64 MetaCacheRoute(const char *topic, uint32 hash);
extern int	MetaCacheActiveRanges(const char *topic, const RangeRow **ranges);
extern int	MetaCacheTopic(const char *topic, const RangeRow **ranges,
						   StorageSettings *storage);
extern bool MetaCacheXactChangedMetadata(void);

#endif							/* MALACHI_METACACHE_H */
