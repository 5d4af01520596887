/*-------------------------------------------------------------------------
 *
 * malachi.c
 *	  Module entry point: settings, shared memory and hooks.
 *
 * Malachi must be loaded through shared_preload_libraries: its shared
 * memory (the metadata epoch, and later the append state) and its
 * background workers exist only then.  Loading it any other way fails.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "append.h"
#include "inject.h"
#include "metacache.h"
#include "produce.h"
#include "segfile.h"
#include "settings.h"
#include "supervisor.h"
#include "sweep.h"
#include "writer.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init
 *		Refuse to load outside shared_preload_libraries, then initialise
 *		each subsystem.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("malachi must be loaded via shared_preload_libraries"),
				 errhint("Add malachi to shared_preload_libraries in postgresql.conf and restart the server.")));

	SettingsInit();
	InjectInit();
	/* once every malachi.* setting is defined: the rest are typos */
	MarkGUCPrefixReserved("malachi");
	SegmentFilesInit();			/* first: its commit callback runs last */
	MetaCacheInit();
	AppendInit();
	ProduceInit();
	WriterInit();
	SweepInit();
	SupervisorInit();
}
