/*-------------------------------------------------------------------------
 *
 * keyspace.c
 *	  Key hashing and the arithmetic of range slices.
 *
 * The key hash is MurmurHash3 x86_32 with seed 0 over the key's UTF-8
 * bytes.  It is part of the on-disk and on-wire contract: a record's range
 * is chosen by it, so it must never change.  Golden values are pinned in
 * test/unit/test_keyspace.c and sql/keyspace.sql.
 *
 * Slice rules (see keyspace.h): every valid slice is a node of the halving
 * tree of [0, 2^32).  All functions here are pure and total: invalid input
 * is reported through the return value, never by aborting.
 *
 *-------------------------------------------------------------------------
 */
#include "keyspace.h"

#define MURMUR_C1	0xcc9e2d51u
#define MURMUR_C2	0x1b873593u

/*---- hashing ----*/

/* Rotate a 32-bit word left by r bits (0 < r < 32). */
static inline uint32_t
keyspace_rotl(uint32_t x, int r)
{
	return (x << r) | (x >> (32 - r));
}

/* Scramble one 32-bit block before it is mixed into the state. */
static inline uint32_t
keyspace_scramble(uint32_t k)
{
	k *= MURMUR_C1;
	k = keyspace_rotl(k, 15);
	k *= MURMUR_C2;
	return k;
}

/*
 * KeyspaceHash
 *		The stable 32-bit hash of a key's bytes (MurmurHash3 x86_32, seed 0).
 *
 * Blocks are read little-endian byte by byte, so the result does not depend
 * on the host's byte order or alignment.
 */
uint32_t
KeyspaceHash(const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t		nblocks = len / 4;
	uint32_t	h = 0;
	uint32_t	k;
	size_t		i;

	for (i = 0; i < nblocks; i++)
	{
		const unsigned char *b = p + i * 4;

		k = (uint32_t) b[0] | ((uint32_t) b[1] << 8) |
			((uint32_t) b[2] << 16) | ((uint32_t) b[3] << 24);
		h ^= keyspace_scramble(k);
		h = keyspace_rotl(h, 13);
		h = h * 5 + 0xe6546b64u;
	}

	k = 0;
	switch (len & 3)
	{
		case 3:
			k ^= (uint32_t) p[nblocks * 4 + 2] << 16;
			/* FALLTHROUGH */
		case 2:
			k ^= (uint32_t) p[nblocks * 4 + 1] << 8;
			/* FALLTHROUGH */
		case 1:
			k ^= (uint32_t) p[nblocks * 4];
			h ^= keyspace_scramble(k);
	}

	/* finalization: avalanche the length and the state */
	h ^= (uint32_t) len;
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/*---- slices ----*/

/* True when x is a power of two (x > 0). */
static inline bool
keyspace_is_pow2(uint64_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

/*
 * SliceIsValid
 *		Is s a node of the halving tree of [0, 2^32)?
 */
bool
SliceIsValid(KeySlice s)
{
	uint64_t	width;

	if (s.lo >= s.hi || s.hi > KEYSPACE_END)
		return false;
	width = s.hi - s.lo;
	return keyspace_is_pow2(width) && s.lo % width == 0;
}

/* Does slice s own the key hash? */
bool
SliceContains(KeySlice s, uint64_t hash)
{
	return hash >= s.lo && hash < s.hi;
}

/*
 * SliceDepth
 *		Number of halvings from the root to s; -1 when s is not valid.
 */
int
SliceDepth(KeySlice s)
{
	uint64_t	width;
	int			depth = 0;

	if (!SliceIsValid(s))
		return -1;
	for (width = s.hi - s.lo; width < KEYSPACE_END; width <<= 1)
		depth++;
	return depth;
}

/*
 * SliceSplit
 *		The two halves of s.  False when s is invalid or has width 1.
 */
bool
SliceSplit(KeySlice s, KeySlice *left, KeySlice *right)
{
	uint64_t	mid;

	if (!SliceIsValid(s) || s.hi - s.lo < 2)
		return false;
	mid = s.lo + (s.hi - s.lo) / 2;
	left->lo = s.lo;
	left->hi = mid;
	right->lo = mid;
	right->hi = s.hi;
	return true;
}

/*
 * SliceBuddy
 *		The other half of s's parent.  False for the root or an invalid s.
 */
bool
SliceBuddy(KeySlice s, KeySlice *buddy)
{
	uint64_t	width;

	if (!SliceIsValid(s) || (s.lo == 0 && s.hi == KEYSPACE_END))
		return false;
	width = s.hi - s.lo;
	if (s.lo % (2 * width) == 0)
		buddy->lo = s.lo + width;	/* s is a left half */
	else
		buddy->lo = s.lo - width;	/* s is a right half */
	buddy->hi = buddy->lo + width;
	return true;
}

/* Are a and b the two halves of one parent slice (in either order)? */
bool
SliceAreBuddies(KeySlice a, KeySlice b)
{
	KeySlice	buddy;

	return SliceBuddy(a, &buddy) && buddy.lo == b.lo && buddy.hi == b.hi;
}

/*
 * SliceParent
 *		The slice s is a half of.  The root is its own parent; callers check
 *		SliceIsValid first.
 */
KeySlice
SliceParent(KeySlice s)
{
	KeySlice	buddy;
	KeySlice	parent = s;

	if (SliceBuddy(s, &buddy))
	{
		parent.lo = s.lo < buddy.lo ? s.lo : buddy.lo;
		parent.hi = s.hi > buddy.hi ? s.hi : buddy.hi;
	}
	return parent;
}

/*
 * KeyspaceIsPresplitCount
 *		Can a new topic start with n ranges?  Buddy splits tile the keyspace
 *		evenly only into a power of two, and we cap it at 1024.
 */
bool
KeyspaceIsPresplitCount(int64_t n)
{
	return n >= 1 && n <= 1024 && keyspace_is_pow2((uint64_t) n);
}

/*
 * KeyspacePresplitSlice
 *		The i-th (from 0, by key) of n equal slices; n must pass
 *		KeyspaceIsPresplitCount and 0 <= i < n.
 */
KeySlice
KeyspacePresplitSlice(int n, int i)
{
	KeySlice	s;
	uint64_t	width = KEYSPACE_END / (uint64_t) n;

	s.lo = width * (uint64_t) i;
	s.hi = s.lo + width;
	return s;
}
