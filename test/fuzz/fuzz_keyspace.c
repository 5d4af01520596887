/*-------------------------------------------------------------------------
 *
 * fuzz_keyspace.c
 *	  Fuzz target for src/keyspace.c: invariants that must hold for any input.
 *
 * The input's bytes are hashed as a key and read as slices: one arbitrary
 * [lo, hi) pair (mostly invalid), one valid slice (a depth and a position)
 * and one presplit (a count and an index).  Every violated invariant aborts,
 * which libFuzzer (`make fuzz`) and the standalone driver (driver.c, run by
 * `make test`) both report as a crash.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "fuzz.h"
#include "keyspace.h"

static bool
fuzz_eq(KeySlice a, KeySlice b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* The definition of a valid slice, written independently of keyspace.c. */
static bool
fuzz_valid(KeySlice s)
{
	uint64_t	w = s.hi - s.lo;

	return s.lo < s.hi && s.hi <= KEYSPACE_END &&
		(w & (w - 1)) == 0 && (s.lo & (w - 1)) == 0;
}

/* Hashing is a pure function of the bytes, whatever their address. */
static void
fuzz_hash(const uint8_t *data, size_t size, uint32_t *hash)
{
	uint8_t    *copy = malloc(size + 1);

	CHECK(copy != NULL);
	*hash = KeyspaceHash(data, size);
	CHECK(KeyspaceHash(data, size) == *hash);
	if (size > 0)
		memcpy(copy + 1, data, size);
	CHECK(KeyspaceHash(copy + 1, size) == *hash);
	free(copy);
}

/* Every function agrees with the validity predicate on any [lo, hi). */
static void
fuzz_any_slice(KeySlice s)
{
	KeySlice	l,
				r,
				b;
	bool		valid = fuzz_valid(s);

	CHECK(SliceIsValid(s) == valid);
	if (!valid)
	{
		CHECK(SliceDepth(s) == -1);
		CHECK(!SliceSplit(s, &l, &r));
		CHECK(!SliceBuddy(s, &b));
	}
}

/*
 * A valid slice: its halves tile it and are buddies, each half's parent is
 * it, exactly one half owns any hash it owns; its buddy is symmetric and
 * shares its parent.
 */
static void
fuzz_valid_slice(KeySlice s, uint32_t hash)
{
	KeySlice	l,
				r,
				b,
				bb,
				p;
	int			depth = SliceDepth(s);

	CHECK(SliceIsValid(s));
	CHECK(depth >= 0 && depth <= KEYSPACE_MAX_DEPTH);
	CHECK((s.hi - s.lo) << depth == KEYSPACE_END);

	if (SliceSplit(s, &l, &r))
	{
		CHECK(depth < KEYSPACE_MAX_DEPTH);
		CHECK(l.lo == s.lo && l.hi == r.lo && r.hi == s.hi);
		CHECK(l.hi - l.lo == r.hi - r.lo);
		CHECK(SliceDepth(l) == depth + 1 && SliceDepth(r) == depth + 1);
		CHECK(fuzz_eq(SliceParent(l), s) && fuzz_eq(SliceParent(r), s));
		CHECK(SliceAreBuddies(l, r) && SliceAreBuddies(r, l));
		CHECK(SliceBuddy(l, &b) && fuzz_eq(b, r));
		CHECK(SliceContains(s, hash) ==
			  (SliceContains(l, hash) || SliceContains(r, hash)));
		CHECK(!(SliceContains(l, hash) && SliceContains(r, hash)));
	}
	else
		CHECK(depth == KEYSPACE_MAX_DEPTH);

	if (SliceBuddy(s, &b))
	{
		CHECK(depth > 0);
		CHECK(SliceIsValid(b) && !fuzz_eq(b, s));
		CHECK(SliceBuddy(b, &bb) && fuzz_eq(bb, s));
		CHECK(SliceAreBuddies(s, b) && SliceAreBuddies(b, s));
		CHECK(b.hi == s.lo || s.hi == b.lo);
		p = SliceParent(s);
		CHECK(fuzz_eq(p, SliceParent(b)));
		CHECK(SliceDepth(p) == depth - 1);
		CHECK(p.lo == (s.lo < b.lo ? s.lo : b.lo));
		CHECK(p.hi == (s.hi > b.hi ? s.hi : b.hi));
	}
	else
	{
		CHECK(depth == 0);
		CHECK(fuzz_eq(SliceParent(s), s));
	}
}

/* The i-th of n presplit slices is valid, equal-width and owns its share. */
static void
fuzz_presplit(int n, int i, uint32_t hash)
{
	KeySlice	s = KeyspacePresplitSlice(n, i);
	uint64_t	width = KEYSPACE_END / (uint64_t) n;
	KeySlice	owner = KeyspacePresplitSlice(n, (int) (hash / width));

	CHECK(KeyspaceIsPresplitCount(n));
	CHECK(SliceIsValid(s) && s.hi - s.lo == width && s.lo == width * i);
	CHECK(SliceContains(owner, hash));
	CHECK(i == 0 || KeyspacePresplitSlice(n, i - 1).hi == s.lo);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t		pos = 0;
	uint32_t	hash;
	KeySlice	s;
	int			depth;
	int			n;
	int64_t		count;

	fuzz_hash(data, size, &hash);

	/* 16 bytes: an arbitrary pair, with lo and hi folded near the keyspace */
	s.lo = fuzz_take(data, size, &pos, 8);
	s.hi = fuzz_take(data, size, &pos, 8);
	fuzz_any_slice(s);
	s.lo &= 0x1ffffffffULL;
	s.hi &= 0x1ffffffffULL;
	fuzz_any_slice(s);
	if (SliceIsValid(s))
		fuzz_valid_slice(s, hash);

	/* 5 bytes: a valid slice at depth 0..32 around a position */
	depth = (int) (fuzz_take(data, size, &pos, 1) % (KEYSPACE_MAX_DEPTH + 1));
	s.lo = fuzz_take(data, size, &pos, 4);
	s.lo &= ~((KEYSPACE_END >> depth) - 1);
	s.hi = s.lo + (KEYSPACE_END >> depth);
	fuzz_valid_slice(s, hash);
	fuzz_valid_slice(s, (uint32_t) s.lo);

	/* 3 bytes: a presplit count 1..1024 and an index under it */
	n = 1 << (fuzz_take(data, size, &pos, 1) % 11);
	fuzz_presplit(n, (int) (fuzz_take(data, size, &pos, 2) % n), hash);

	/* 8 bytes: any count is a presplit count iff it is a power of 2 <= 1024 */
	count = (int64_t) fuzz_take(data, size, &pos, 8);
	CHECK(KeyspaceIsPresplitCount(count) ==
		  (count >= 1 && count <= 1024 && (count & (count - 1)) == 0));
	CHECK(KeyspaceIsPresplitCount(count & 0xfff) ==
		  ((count & 0xfff) >= 1 && (count & 0xfff) <= 1024 &&
		   (count & 0xfff & ((count & 0xfff) - 1)) == 0));
	return 0;
}
