/*-------------------------------------------------------------------------
 *
 * produce.h
 *	  Routing records to ranges and appending them, at once or at commit.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_PRODUCE_H
#define MALACHI_PRODUCE_H

extern void ProduceInit(void);

#endif							/* MALACHI_PRODUCE_H */
