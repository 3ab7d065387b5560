"""Degree structure of the synthetic links: starting links with a given degree sequence, and d_max repair.

Learning moves links between records; without a constraint it piles links onto the records whose codes
fit the releases best, which distorts every marginal read over the links (a record's attributes count
once per link). ``degrees: preserve`` fixes each synthetic record's degree on the left side from the
start (the slices and the record types keep row sums; with ``left_degrees: learned`` the record types learn
each type's total up to n_a·d_max and share it evenly, ``type_iteration``) and repairs the right side to d_max
at the end, moving surplus links
to records with the same codes, so the cross-table marginals are unchanged by the repair when such a
record has room. All of this is data-independent given DP inputs (post-processing). The degree
distributions (a release, then links re-dealt within same-code groups) are in ``degree_histograms``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcube.privacy.primitives import gaussian_sigma


def balanced_degrees(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """n degrees summing to m, each ⌊m/n⌋ or ⌈m/n⌉ (which records get the extra link: uniform)."""
    base, extra = divmod(int(m), int(n))
    deg = np.full(n, base, dtype=np.int64)
    deg[rng.choice(n, size=extra, replace=False)] += 1
    return deg


def links_with_degrees(deg1: np.ndarray, deg2: np.ndarray, rng: np.random.Generator, *,
                       no_diagonal: bool = False, passes: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Distinct random pairs with left degrees ``deg1`` and right degrees ``deg2`` (configuration model).

    Stubs are matched at random; repeated pairs (and self-loops with ``no_diagonal``) are repaired by
    swapping right ends with random other pairs, which keeps both degree sequences. Pairs still repeated
    after ``passes`` rounds (only with near-complete graphs) are moved to a random free cell of their row.
    """
    i = np.repeat(np.arange(deg1.size, dtype=np.int64), deg1)
    j = rng.permutation(np.repeat(np.arange(deg2.size, dtype=np.int64), deg2))
    n2 = int(deg2.size)
    for _ in range(passes):
        bad = bad_pairs(i, j, n2, no_diagonal)
        if not bad.size:
            return i, j
        for b, o in zip(bad.tolist(), rng.integers(0, i.size, size=bad.size).tolist()):
            j[b], j[o] = j[o], j[b]  # one swap at a time: the right degree sequence is kept exactly
    bad = bad_pairs(i, j, n2, no_diagonal)
    for b in bad.tolist():  # last resort: a free cell of the same row (right degrees may then shift by one)
        used = set(j[i == i[b]].tolist())
        free = [c for c in rng.permutation(n2).tolist() if c not in used and not (no_diagonal and c == i[b])]
        if free:
            j[b] = free[0]
    return i, j


def bad_pairs(i: np.ndarray, j: np.ndarray, n2: int, no_diagonal: bool, *, with_keys: bool = False,
              chunk: int = 1 << 20) -> Any:
    """Positions of repeated pairs (all but the first) and, with ``no_diagonal``, of self-loops; with
    ``with_keys`` also the sorted pair keys i·n2 + j. Memory: the sorted keys, then the repeated keys' links
    found in chunks (at 10^7 links no further 10^7-long temporaries)."""
    keys = i * np.int64(n2)
    keys += j
    keys.sort()
    rep = np.unique(keys[1:][keys[1:] == keys[:-1]])  # the keys that occur more than once
    dup = np.zeros(keys.size, dtype=bool)
    if rep.size:
        cand = np.concatenate([s + np.flatnonzero(np.isin(i[s:s + chunk] * np.int64(n2) + j[s:s + chunk], rep))
                               for s in range(0, keys.size, chunk)])
        ck = i[cand] * np.int64(n2) + j[cand]
        o = np.argsort(ck, kind="stable")  # a key's links in position order: all but the first are repeats
        later = np.zeros(cand.size, dtype=bool)
        later[1:] = ck[o][1:] == ck[o][:-1]
        dup[cand[o[later]]] = True
    if no_diagonal:
        dup |= i == j
    bad = np.flatnonzero(dup)
    return (bad, keys) if with_keys else bad


def cap_degrees(si: np.ndarray, sj: np.ndarray, n2: int, d_max: int | np.ndarray, keys2: np.ndarray,
                rng: np.random.Generator, *, no_diagonal: bool = False,
                codes2: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Move links off right records above their cap (``d_max``, or one cap per record) to right records
    with room (same code first).

    ``keys2`` is each right record's full code (a moved link keeps its cross-table cells when the new
    record has the same code). A link never moves onto a pair that already exists, nor (``no_diagonal``, a
    self-referential table without self-loops) onto its own left record. Left degrees are kept. With
    ``codes2`` (each right record's codes), a link that finds no record of its own code goes to the one with
    the fewest differing codes (else to any with room, at random): fewer cross-table cells change.
    """
    deg = np.bincount(sj, minlength=n2)
    cap = np.broadcast_to(np.asarray(d_max, dtype=np.int64), (n2,))
    over = np.flatnonzero(deg > cap)
    if not over.size:
        return si, sj  # nothing to move: the caller's arrays, uncopied
    sj = sj.copy()
    existing = set((si * n2 + sj).tolist())
    room = np.maximum(cap - deg, 0)
    by_key: dict[int, list[int]] = {}
    for r in rng.permutation(np.flatnonzero(room > 0)).tolist():
        by_key.setdefault(int(keys2[r]), []).append(r)
    any_room = [r for lst in by_key.values() for r in lst]
    for c in over.tolist():
        pos = rng.permutation(np.flatnonzero(sj == c))[: deg[c] - cap[c]]
        near: list[int] | None = None
        for e in pos.tolist():
            target = _take(by_key.get(int(keys2[c]), []), room, existing, int(si[e]), n2, no_diagonal)
            if target < 0 and codes2 is not None:
                if near is None:  # the records with room, nearest codes first (ties at random), once per record
                    cands = np.flatnonzero(room > 0)
                    dist = (codes2[cands] != codes2[c]).sum(axis=1) if codes2.ndim == 2 else np.zeros(cands.size)
                    near = cands[np.lexsort((rng.random(cands.size), dist))].tolist()
                target = _take(near, room, existing, int(si[e]), n2, no_diagonal)
            if target < 0:
                target = _take(any_room, room, existing, int(si[e]), n2, no_diagonal)
            if target < 0:
                continue  # nowhere to go (all records full): impossible when m ≤ d_max·n2
            existing.discard(int(si[e]) * n2 + c)
            existing.add(int(si[e]) * n2 + target)
            sj[e] = target
            room[target] -= 1
    return si, sj


def degree_bins(d_max: int) -> list[tuple[int, int]]:
    """Public degree bins [lo, hi]: parents without children and parents with 1..d_max children.

    Finer bins cost far more: a parent changing with its ≤ d_max children moves up to 2·d_max + 1 parents
    between bins, so each further bin's count is drowned at the budgets where links are learned."""
    return [(0, 0), (1, d_max)]


def two_value_sigma(d_max: int, rho: float) -> float:
    """σ of ``release_degree_histogram`` with ρ (L2 sensitivity √2·d_max, zCDP: ρ = Δ²/(2σ²))."""
    return gaussian_sigma(rho, math.sqrt(2.0) * d_max)


def release_degree_histogram(degree_histogram: np.ndarray, d_max: int, rho: float, ledger: Any,
                             noise: Any) -> np.ndarray:
    """Gaussian release of how many parents have no child and how many have 1..d_max (charged first).

    Bounded DP (a record changes with all its links): a child moving changes the count of parents with
    children by at most 1; a parent changing its ≤ d_max children can leave ≤ d_max parents childless or
    give ≤ d_max their first child, and these partly cancel with its own change: each count moves by at
    most d_max, the two in opposite directions: L2 sensitivity √2·d_max. ``degree_histogram[d]`` is the
    number of parents with d children (an aggregate, counted where the links are).
    """
    sigma = two_value_sigma(d_max, rho)
    ledger.charge("links:degrees", rho=rho, sigma=sigma, bins=len(degree_bins(d_max)))
    hist = np.asarray(degree_histogram, dtype=np.int64)
    counts = np.array([hist[lo:hi + 1].sum() for lo, hi in degree_bins(d_max)], dtype=float)
    return noise.add_gaussian(("relational", "degrees"), counts, sigma)


def _take(cands: list[int], room: np.ndarray, existing: set, row: int, n2: int, no_diagonal: bool = False) -> int:
    """A candidate with room that ``row`` is not linked to yet (and is not ``row`` itself under
    ``no_diagonal``; full candidates are dropped), or -1."""
    k = 0
    while k < len(cands):
        r = cands[k]
        if room[r] <= 0:
            cands.pop(k)
            continue
        if row * n2 + r not in existing and not (no_diagonal and r == row):
            return r
        k += 1
    return -1


__all__ = ["two_value_sigma", "balanced_degrees", "links_with_degrees", "bad_pairs", "cap_degrees", "degree_bins", "release_degree_histogram"]
