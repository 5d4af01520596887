/*-------------------------------------------------------------------------
 *
 * errors.h
 *	  Malachi's own SQLSTATEs.
 *
 * Class "MA" is ours (implementation-defined classes start with a letter
 * from I to Z).  These codes are part of the public contract, listed in
 * docs/errors.md: never renumber one.  Generic input errors use PostgreSQL's
 * standard codes instead (22004 null_value_not_allowed, 22023
 * invalid_parameter_value, 55000 object_not_in_prerequisite_state, 54000
 * program_limit_exceeded for a record over the size limit, 53100 disk_full,
 * XX001 data_corrupted for a damaged segment file).
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_ERRORS_H
#define MALACHI_ERRORS_H

#include "utils/elog.h"

#define ERRCODE_MALACHI_NO_SUCH_TOPIC		MAKE_SQLSTATE('M','A','0','0','1')
#define ERRCODE_MALACHI_TOPIC_EXISTS		MAKE_SQLSTATE('M','A','0','0','2')
#define ERRCODE_MALACHI_NO_SUCH_RANGE		MAKE_SQLSTATE('M','A','0','0','3')
#define ERRCODE_MALACHI_RANGE_NOT_ACTIVE	MAKE_SQLSTATE('M','A','0','0','4')
#define ERRCODE_MALACHI_NOT_BUDDIES			MAKE_SQLSTATE('M','A','0','0','5')
#define ERRCODE_MALACHI_RANGE_TOO_SMALL		MAKE_SQLSTATE('M','A','0','0','6')
#define ERRCODE_MALACHI_NO_SUCH_POLICY		MAKE_SQLSTATE('M','A','0','0','7')
#define ERRCODE_MALACHI_POLICY_EXISTS		MAKE_SQLSTATE('M','A','0','0','8')
#define ERRCODE_MALACHI_POLICY_IN_USE		MAKE_SQLSTATE('M','A','0','0','9')
#define ERRCODE_MALACHI_NOT_TILED			MAKE_SQLSTATE('M','A','0','1','0')
#define ERRCODE_MALACHI_RANGE_IMMUTABLE		MAKE_SQLSTATE('M','A','0','1','1')
#define ERRCODE_MALACHI_SEGMENT_OVERLAP		MAKE_SQLSTATE('M','A','0','1','2')
#define ERRCODE_MALACHI_NO_SUCH_SEGMENT		MAKE_SQLSTATE('M','A','0','1','3')
#define ERRCODE_MALACHI_SEALED				MAKE_SQLSTATE('M','A','0','1','4')
#define ERRCODE_MALACHI_METADATA_UNAVAILABLE	MAKE_SQLSTATE('M','A','0','1','5')
#define ERRCODE_MALACHI_INVALID_CURSOR		MAKE_SQLSTATE('M','A','0','1','6')

#endif							/* MALACHI_ERRORS_H */
