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

/* Defaults for every topic (reloadable) */
extern int	malachi_segment_max_bytes;
extern int	malachi_segment_max_age;
extern int	malachi_retention;
extern int	malachi_retention_bytes;
extern int	malachi_compression;
extern int	malachi_zstd_level;
extern int	malachi_replication_factor;

extern void SettingsInit(void);
extern Jsonb *SettingsValidate(Jsonb *settings, const char *what);
extern Jsonb *SettingsMerge(Jsonb *overrides, Jsonb *changes);
extern Jsonb *SettingsEffective(Jsonb *topic, Jsonb *policy);
extern Jsonb *SettingsReplicationFactor(int replication_factor);

#endif							/* MALACHI_SETTINGS_H */
