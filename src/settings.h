/*-------------------------------------------------------------------------
 *
 * settings.h
 *	  Server settings (GUCs) and the per-topic / per-policy settings model.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_SETTINGS_H
#define MALACHI_SETTINGS_H

#include "utils/jsonb.h"

/* Node settings (postmaster) */
extern char *malachi_database;
extern char *malachi_data_directory;
extern char *malachi_node_name;

/* Defaults for every topic (reloadable) */
extern int	malachi_segment_max_bytes;
extern int	malachi_segment_max_age;
extern int	malachi_retention;
extern int	malachi_retention_bytes;
extern int	malachi_compression;
extern int	malachi_zstd_level;
extern int	malachi_replication_factor;

/* Node limits and switches */
extern int	malachi_max_active_segments;
extern bool malachi_fsync;
extern bool malachi_direct_io;
extern int	malachi_max_record_bytes;
extern int	malachi_spare_segments;
extern int	malachi_max_spare_segments;

/* Produce */
typedef enum ProduceMode
{
	PRODUCE_TRANSACTIONAL,
	PRODUCE_IMMEDIATE
} ProduceMode;

extern int	malachi_produce_mode;
extern int	malachi_max_transaction_bytes;

/* The storage settings a producer needs, -1 where the topic inherits */
typedef struct StorageSettings
{
	int64		segment_max_bytes;
	int			compression;	/* 0 none, 1 zstd */
	int			zstd_level;
} StorageSettings;

extern void SettingsInit(void);
extern Jsonb *SettingsValidate(Jsonb *settings, const char *what);
extern Jsonb *SettingsMerge(Jsonb *overrides, Jsonb *changes);
extern Jsonb *SettingsEffective(Jsonb *topic, Jsonb *policy);
extern Jsonb *SettingsReplicationFactor(int replication_factor);
extern void SettingsStorageOverrides(Jsonb *topic, Jsonb *policy,
									 StorageSettings *out);
extern void SettingsStorageEffective(const StorageSettings *overrides,
									 StorageSettings *out);

/* What the sweeper needs of a topic's settings; -1 means no limit */
typedef struct RetentionSettings
{
	int64		segment_max_age_us; /* roll a head older than this */
	int64		retention_us;	/* delete sealed segments sealed longer ago */
	int64		retention_bytes;	/* keep at most this many bytes per range */
} RetentionSettings;

extern void SettingsRetention(Jsonb *topic, Jsonb *policy,
							  RetentionSettings *out);

/* The sweeper */
extern int	malachi_sweep_interval;
extern int	malachi_scrub_rate;
extern int	malachi_orphan_grace;

/* The supervisor */
extern char *malachi_manifest_directory;
extern int	malachi_supervisor_interval;

#endif							/* MALACHI_SETTINGS_H */
