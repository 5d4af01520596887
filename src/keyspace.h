/*-------------------------------------------------------------------------
 *
 * keyspace.h
 *	  Key hashing and the arithmetic of range slices.
 *
 * A topic's keyspace is the set of 32-bit key hashes, [0, 2^32).  A range
 * owns a half-open slice [lo, hi) of it.  Every slice is a node of the
 * binary tree that repeated halving of [0, 2^32) produces: its width is a
 * power of two and lo is a multiple of its width.  Splitting a slice yields
 * its two halves; merging joins a slice with its buddy (the other half of
 * the same parent slice).
 *
 * This file is plain C with no PostgreSQL dependency, so that the unit test
 * binary and the fuzz target link it on its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_KEYSPACE_H
#define MALACHI_KEYSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One past the largest key hash: the keyspace is [0, KEYSPACE_END). */
#define KEYSPACE_END		((uint64_t) 1 << 32)

/* Deepest split: a slice of width 1 cannot be halved. */
#define KEYSPACE_MAX_DEPTH	32

typedef struct KeySlice
{
	uint64_t	lo;				/* first hash in the slice */
	uint64_t	hi;				/* one past the last hash in the slice */
} KeySlice;

extern uint32_t KeyspaceHash(const void *data, size_t len);
extern bool SliceIsValid(KeySlice s);
extern bool SliceContains(KeySlice s, uint64_t hash);
extern int	SliceDepth(KeySlice s);
extern bool SliceSplit(KeySlice s, KeySlice *left, KeySlice *right);
extern bool SliceBuddy(KeySlice s, KeySlice *buddy);
extern bool SliceAreBuddies(KeySlice a, KeySlice b);
extern KeySlice SliceParent(KeySlice s);
extern bool KeyspaceIsPresplitCount(int64_t n);
extern KeySlice KeyspacePresplitSlice(int n, int i);

#endif							/* MALACHI_KEYSPACE_H */
