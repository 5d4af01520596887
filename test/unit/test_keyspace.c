/*-------------------------------------------------------------------------
 *
 * test_keyspace.c
 *	  Unit tests of src/keyspace.c: the key hash and slice arithmetic.
 *
 * A plain C program (no PostgreSQL) that prints TAP: "ok N - name" or
 * "not ok N - name" per check, then the plan.  `make unit` and `make test`
 * run it under prove.  It exits non-zero when any check failed.
 *
 * The hash values are part of the on-disk and on-wire contract: the
 * published MurmurHash3 x86_32 (seed 0) vectors, plus golden values for
 * every tail length computed with an independent implementation of the
 * reference algorithm.  Never "fix" a golden value to make a test pass.
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "keyspace.h"
#include "tap.h"

/*---- helpers ----*/

/* Build a slice [lo, hi). */
static KeySlice
slice(uint64_t lo, uint64_t hi)
{
	KeySlice	s;

	s.lo = lo;
	s.hi = hi;
	return s;
}

/* Are two slices equal? */
static bool
slice_eq(KeySlice a, KeySlice b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/*---- hashing ----*/

typedef struct HashVector
{
	const char *key;
	size_t		len;
	uint32_t	hash;
} HashVector;

#define VEC(s, h)	{s, sizeof(s) - 1, h}

static const HashVector hash_vectors[] = {
	/* published MurmurHash3 x86_32 seed-0 vectors */
	VEC("", 0x00000000),
	VEC("hello", 0x248bfa47),
	VEC("Hello, world!", 0xc0363e43),
	VEC("The quick brown fox jumps over the lazy dog", 0x2e4ff723),
	/* golden values: one per tail length 1, 2, 3, 0 */
	VEC("a", 0x3c2569b2),
	VEC("ab", 0x9bbfd75f),
	VEC("abc", 0xb3dd93fa),
	VEC("abcd", 0x43ed676a),
	/* keys of the demo, high bytes in the tail, multi-byte UTF-8 */
	VEC("alice", 0x4c518edd),
	VEC("bob", 0xa85b7bf2),
	VEC("carol", 0x25d7ed74),
	VEC("\xff\xff\xff\xff\xff\xff\xff", 0x011d1da7),
	VEC("\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", 0x9a592042),
};

/* Known vectors, every tail length, and independence from alignment. */
static void
test_hash(void)
{
	char		buf[64 + 4];
	size_t		i;
	int			shift;

	for (i = 0; i < sizeof(hash_vectors) / sizeof(hash_vectors[0]); i++)
	{
		const HashVector *v = &hash_vectors[i];
		uint32_t	h = KeyspaceHash(v->key, v->len);

		if (!ok(h == v->hash, "hash of %zu-byte key #%zu is 0x%08" PRIx32,
				v->len, i, v->hash))
			printf("# got 0x%08" PRIx32 "\n", h);
	}

	ok(KeyspaceHash(NULL, 0) == 0, "hash of (NULL, 0) is 0");

	for (shift = 1; shift < 4; shift++)
	{
		const char *key = "The quick brown fox jumps over the lazy dog";
		size_t		len = strlen(key);

		memcpy(buf + shift, key, len);
		ok(KeyspaceHash(buf + shift, len) == 0x2e4ff723,
		   "hash does not depend on alignment (offset %d)", shift);
	}

	/* every length 0..16 over one buffer: deterministic, prefix-sensitive */
	memset(buf, 'x', sizeof(buf));
	{
		bool		stable = true;
		bool		distinct = true;
		size_t		len;

		for (len = 0; len <= 16; len++)
		{
			if (KeyspaceHash(buf, len) != KeyspaceHash(buf, len))
				stable = false;
			if (len > 0 && KeyspaceHash(buf, len) == KeyspaceHash(buf, len - 1))
				distinct = false;
		}
		ok(stable, "hash is deterministic for lengths 0..16");
		ok(distinct, "hash changes with each added byte, lengths 0..16");
	}
}

/*---- single slices ----*/

/* Which slices are nodes of the halving tree. */
static void
test_is_valid(void)
{
	ok(SliceIsValid(slice(0, KEYSPACE_END)), "root is valid");
	ok(SliceIsValid(slice(0, KEYSPACE_END / 2)), "left half is valid");
	ok(SliceIsValid(slice(KEYSPACE_END / 2, KEYSPACE_END)), "right half is valid");
	ok(SliceIsValid(slice(0, 1)), "[0,1) is valid");
	ok(SliceIsValid(slice(KEYSPACE_END - 1, KEYSPACE_END)),
	   "[2^32-1,2^32) is valid");
	ok(SliceIsValid(slice(12, 16)), "[12,16) is valid");
	ok(!SliceIsValid(slice(0, 0)), "empty [0,0) is invalid");
	ok(!SliceIsValid(slice(5, 4)), "reversed [5,4) is invalid");
	ok(!SliceIsValid(slice(0, 3)), "width 3 is invalid");
	ok(!SliceIsValid(slice(2, 6)), "[2,6): width 4 at unaligned lo is invalid");
	ok(!SliceIsValid(slice(1, 3)), "[1,3): width 2 at odd lo is invalid");
	ok(!SliceIsValid(slice(0, KEYSPACE_END + 1)), "past the keyspace is invalid");
	ok(!SliceIsValid(slice(KEYSPACE_END, 2 * KEYSPACE_END)),
	   "[2^32,2^33) is invalid");
	ok(!SliceIsValid(slice(0, 2 * KEYSPACE_END)), "[0,2^33) is invalid");
	ok(!SliceIsValid(slice(UINT64_MAX - 1, UINT64_MAX)),
	   "a slice near UINT64_MAX is invalid");
}

/* Depth counts halvings from the root. */
static void
test_depth(void)
{
	ok(SliceDepth(slice(0, KEYSPACE_END)) == 0, "root has depth 0");
	ok(SliceDepth(slice(KEYSPACE_END / 2, KEYSPACE_END)) == 1, "a half has depth 1");
	ok(SliceDepth(slice(KEYSPACE_END / 4 * 3, KEYSPACE_END)) == 2,
	   "a quarter has depth 2");
	ok(SliceDepth(slice(7, 8)) == KEYSPACE_MAX_DEPTH,
	   "width 1 has depth KEYSPACE_MAX_DEPTH");
	ok(SliceDepth(slice(0, 3)) == -1, "invalid slice has depth -1");
	ok(SliceDepth(slice(0, 0)) == -1, "empty slice has depth -1");
}

/* Halving, and what cannot be halved. */
static void
test_split(void)
{
	KeySlice	l,
				r;

	ok(SliceSplit(slice(0, KEYSPACE_END), &l, &r) &&
	   slice_eq(l, slice(0, KEYSPACE_END / 2)) &&
	   slice_eq(r, slice(KEYSPACE_END / 2, KEYSPACE_END)),
	   "root splits at 2^31");
	ok(SliceSplit(slice(4, 8), &l, &r) &&
	   slice_eq(l, slice(4, 6)) && slice_eq(r, slice(6, 8)),
	   "[4,8) splits into [4,6) and [6,8)");
	ok(SliceSplit(slice(6, 8), &l, &r) &&
	   slice_eq(l, slice(6, 7)) && slice_eq(r, slice(7, 8)),
	   "width 2 splits into width-1 halves");
	ok(!SliceSplit(slice(7, 8), &l, &r), "width 1 cannot split");
	ok(!SliceSplit(slice(KEYSPACE_END - 1, KEYSPACE_END), &l, &r),
	   "last width-1 slice cannot split");
	ok(!SliceSplit(slice(0, 3), &l, &r), "invalid slice cannot split");
	ok(!SliceSplit(slice(0, 0), &l, &r), "empty slice cannot split");
}

/* Buddies and parents. */
static void
test_buddy_parent(void)
{
	KeySlice	b;
	KeySlice	root = slice(0, KEYSPACE_END);
	KeySlice	left = slice(0, KEYSPACE_END / 2);
	KeySlice	right = slice(KEYSPACE_END / 2, KEYSPACE_END);

	ok(!SliceBuddy(root, &b), "root has no buddy");
	ok(SliceBuddy(left, &b) && slice_eq(b, right), "left half's buddy is right half");
	ok(SliceBuddy(right, &b) && slice_eq(b, left), "right half's buddy is left half");
	ok(SliceBuddy(slice(0, 1), &b) && slice_eq(b, slice(1, 2)),
	   "[0,1)'s buddy is [1,2)");
	ok(SliceBuddy(slice(KEYSPACE_END - 1, KEYSPACE_END), &b) &&
	   slice_eq(b, slice(KEYSPACE_END - 2, KEYSPACE_END - 1)),
	   "last width-1 slice's buddy is the one before it");
	ok(!SliceBuddy(slice(2, 6), &b), "invalid slice has no buddy");

	ok(SliceAreBuddies(left, right) && SliceAreBuddies(right, left),
	   "halves are buddies in either order");
	ok(!SliceAreBuddies(left, left), "a slice is not its own buddy");
	ok(!SliceAreBuddies(slice(2, 4), slice(4, 6)),
	   "adjacent same-width slices of different parents are not buddies");
	ok(!SliceAreBuddies(slice(0, 2), slice(2, 3)),
	   "slices of different widths are not buddies");
	ok(!SliceAreBuddies(root, root), "root is not its own buddy");
	ok(!SliceAreBuddies(slice(1, 3), slice(3, 5)), "invalid slices are not buddies");

	ok(slice_eq(SliceParent(left), root) && slice_eq(SliceParent(right), root),
	   "parent of either half is root");
	ok(slice_eq(SliceParent(root), root), "root is its own parent");
	ok(slice_eq(SliceParent(slice(5, 6)), slice(4, 6)), "parent of [5,6) is [4,6)");
	ok(slice_eq(SliceParent(slice(8, 12)), slice(8, 16)), "parent of [8,12) is [8,16)");
}

/* Ownership of a hash: half-open. */
static void
test_contains(void)
{
	KeySlice	s = slice(8, 16);

	ok(SliceContains(s, 8) && SliceContains(s, 15), "slice owns lo and hi-1");
	ok(!SliceContains(s, 7) && !SliceContains(s, 16), "slice owns neither lo-1 nor hi");
	ok(SliceContains(slice(0, KEYSPACE_END), UINT32_MAX), "root owns 2^32-1");
	ok(!SliceContains(slice(0, KEYSPACE_END), KEYSPACE_END), "root does not own 2^32");
}

/*
 * Walk from the root to width 1 following a hash's bits: at every level the
 * halves tile the slice, are buddies, have it as parent, and exactly the one
 * on the path owns the hash.
 */
static void
test_walk(uint32_t hash)
{
	KeySlice	s = slice(0, KEYSPACE_END);
	KeySlice	l,
				r;
	int			depth;
	bool		good = true;

	for (depth = 0; depth < KEYSPACE_MAX_DEPTH; depth++)
	{
		if (!SliceSplit(s, &l, &r) || SliceDepth(s) != depth ||
			l.lo != s.lo || l.hi != r.lo || r.hi != s.hi ||
			!SliceAreBuddies(l, r) ||
			!slice_eq(SliceParent(l), s) || !slice_eq(SliceParent(r), s) ||
			SliceContains(l, hash) == SliceContains(r, hash))
		{
			good = false;
			break;
		}
		s = SliceContains(l, hash) ? l : r;
	}
	ok(good && s.lo == hash && s.hi == (uint64_t) hash + 1 &&
	   SliceDepth(s) == KEYSPACE_MAX_DEPTH && !SliceSplit(s, &l, &r),
	   "walk to hash 0x%08" PRIx32 " stays consistent for 32 levels", hash);
}

/*---- presplit ----*/

/* Which range counts a topic may start with. */
static void
test_presplit_count(void)
{
	ok(KeyspaceIsPresplitCount(1) && KeyspaceIsPresplitCount(2) &&
	   KeyspaceIsPresplitCount(4) && KeyspaceIsPresplitCount(1024),
	   "1, 2, 4 and 1024 are presplit counts");
	ok(!KeyspaceIsPresplitCount(0) && !KeyspaceIsPresplitCount(-1) &&
	   !KeyspaceIsPresplitCount(-4), "0 and negatives are not presplit counts");
	ok(!KeyspaceIsPresplitCount(3) && !KeyspaceIsPresplitCount(6) &&
	   !KeyspaceIsPresplitCount(1023), "non-powers of two are not presplit counts");
	ok(!KeyspaceIsPresplitCount(2048) && !KeyspaceIsPresplitCount(INT64_MAX) &&
	   !KeyspaceIsPresplitCount(INT64_MIN) &&
	   !KeyspaceIsPresplitCount((int64_t) 1 << 32),
	   "counts above 1024 are not presplit counts");
}

/* n presplit slices tile [0, 2^32) exactly, equal and valid. */
static void
test_presplit_tiling(int n)
{
	uint64_t	next = 0;
	int			i;
	int			depth = 0;
	bool		good = true;

	while ((1 << depth) < n)
		depth++;
	for (i = 0; i < n; i++)
	{
		KeySlice	s = KeyspacePresplitSlice(n, i);

		if (s.lo != next || !SliceIsValid(s) || SliceDepth(s) != depth ||
			s.hi - s.lo != KEYSPACE_END / (uint64_t) n)
		{
			good = false;
			break;
		}
		next = s.hi;
	}
	ok(good && next == KEYSPACE_END,
	   "%d presplit slices tile [0,2^32) at depth %d", n, depth);
}

int
main(void)
{
	static const uint32_t walk_hashes[] = {
		0, 1, 0x7fffffff, 0x80000000, 0xdeadbeef, UINT32_MAX
	};
	size_t		i;

	test_hash();
	test_is_valid();
	test_depth();
	test_split();
	test_buddy_parent();
	test_contains();
	for (i = 0; i < sizeof(walk_hashes) / sizeof(walk_hashes[0]); i++)
		test_walk(walk_hashes[i]);
	test_presplit_count();
	test_presplit_tiling(1);
	test_presplit_tiling(2);
	test_presplit_tiling(4);
	test_presplit_tiling(1024);

	return tap_done();
}
