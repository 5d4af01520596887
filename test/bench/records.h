/*-------------------------------------------------------------------------
 *
 * records.h
 *	  The bench's generated records, shared by loadgen.c and limits.c so
 *	  that every system and every limit sees exactly the same payload:
 *	  JSON-like text values of a given size, keys from 1,000 distinct ones.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BENCH_RECORDS_H
#define BENCH_RECORDS_H

#include <stdio.h>
#include <stdlib.h>

#define BENCH_DISTINCT_KEYS 1000

/* The key of record i of a client, one of BENCH_DISTINCT_KEYS. */
static inline void
make_key(char *buf, size_t size, int client, int i)
{
	snprintf(buf, size, "key-%d", (client * 7919 + i) % BENCH_DISTINCT_KEYS);
}

/* A JSON-like text value of exactly bytes bytes (malloc'd). */
static inline char *
make_value(int client, long seq, int i, int bytes)
{
	char	   *v = malloc(bytes + 1);
	int			n = snprintf(v, bytes + 1,
							 "{\"client\": %d, \"seq\": %ld, \"i\": %d, \"pad\": \"",
							 client, seq, i);

	while (n < bytes - 2)
	{
		v[n] = 'a' + (n % 26);
		n++;
	}
	if (n < bytes)
		v[n++] = '"';
	if (n < bytes)
		v[n++] = '}';
	v[bytes] = '\0';
	return v;
}

#endif							/* BENCH_RECORDS_H */
