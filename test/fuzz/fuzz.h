/*-------------------------------------------------------------------------
 *
 * fuzz.h
 *	  What the fuzz targets share: the entry point, CHECK and input reading.
 *
 * Each target (fuzz_*.c) defines LLVMFuzzerTestOneInput and links either
 * with libFuzzer (`make fuzz`) or with the standalone driver, driver.c
 * (`make unit`, `make test`).  A violated invariant aborts through CHECK,
 * which both report as a crash.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_FUZZ_H
#define MALACHI_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort with the failed condition: the fuzzer's signal of a bug. */
#define CHECK(cond) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", \
					__FILE__, __LINE__, #cond); \
			abort(); \
		} \
	} while (0)

/* A little-endian integer of n bytes taken from the input (0 past its end). */
static inline uint64_t
fuzz_take(const uint8_t *data, size_t size, size_t *pos, int n)
{
	uint64_t	v = 0;
	int			i;

	for (i = 0; i < n; i++, (*pos)++)
		if (*pos < size)
			v |= (uint64_t) data[*pos] << (8 * i);
	return v;
}

#endif							/* MALACHI_FUZZ_H */
