"""Records within types: integer type-pair link counts → concrete links (i, j), vectorised.

Rounding (``round_type_counts``): every row of the relaxed L keeps its integer total (one parent per child,
kept left degrees) or the grand total m is kept; the fractional parts are rounded by UBS (Alg. 3), so
E[L_int] = L and every count stays within [0, U_ab].

Assignment (``assign_links``): each left record contributes ``deg_i`` stubs; the stubs of a left type get
the right-type labels of its row of L_int in random order; inside a right type the stubs (those of one left
record adjacent) are dealt round-robin over the type's records in random order, so right degrees inside a
type differ by at most one (≤ d_max whenever the type's total allows it) and a record never meets the same
right record twice while it has at most n_b links into type b. Leftover repeated pairs and self-loops are
swapped with links into the same right type (types and degrees kept), else moved to a free right record.
All of it is post-processing.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privcube.core.errors import DataError
from privcube.relational.solvers.projection import project_box_sum
from privcube.relational.solvers.ubs import ubs
from privcube.relational.stages.record_types import SideTypes
from privcube.relational.stages.synthetic_degrees import bad_pairs


def round_type_counts(L: np.ndarray, U: np.ndarray, rows: np.ndarray | None, total: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Integer L with the row totals ``rows`` (or the grand ``total``) exactly, 0 ≤ L ≤ U, E[L_int] = L."""
    L = np.clip(np.asarray(L, dtype=float), 0.0, U)
    base = np.floor(L)
    frac = L - base
    out = base.astype(np.int64)
    if rows is None:
        k = int(total - out.sum())
        out.ravel()[ubs(_exact(frac.ravel(), k), k, rng)] += 1
        return out
    for a in range(L.shape[0]):
        k = int(rows[a] - out[a].sum())
        if k:
            out[a, ubs(_exact(frac[a], k), k, rng)] += 1
    return out


def _exact(f: np.ndarray, k: int) -> np.ndarray:
    """Fractional parts summing to the integer k exactly (a projection removes float drift)."""
    if k < 0 or k > f.size:
        raise DataError("internal: type rounding lost its row total")
    return f if abs(float(f.sum()) - k) <= 1e-9 * max(1.0, k) else project_box_sum(f, float(k))


def balanced_within_types(t: SideTypes, totals: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per record a degree so that each type's records share ``totals[type]`` evenly (±1, extra at random)."""
    n = t.of.size
    order = np.lexsort((rng.random(n), t.of))
    rank = np.empty(n, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(t.count)[:-1]])
    rank[order] = np.arange(n) - start[t.of[order]]
    totals = np.asarray(totals, dtype=np.int64)
    return totals[t.of] // t.count[t.of] + (rank < totals[t.of] % t.count[t.of])


def assign_links(t1: SideTypes, t2: SideTypes, Lint: np.ndarray, deg1: np.ndarray, rng: np.random.Generator,
                 *, no_diagonal: bool = False, cap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Links (i, j) with left degrees ``deg1`` and type-pair counts ``Lint`` (row a sums to Σ_{i∈a} deg1_i)."""
    A, B = Lint.shape
    if not np.array_equal(np.bincount(t1.of, weights=deg1, minlength=A).astype(np.int64), Lint.sum(axis=1)):
        raise DataError("internal: left degrees do not match the type-pair counts")
    # left stubs, type-major (a record's stubs adjacent, records in random order inside a type)
    rec_order = np.lexsort((rng.random(t1.of.size), t1.of))
    recs = np.repeat(rec_order, deg1[rec_order])
    labels = _row_labels(Lint, rng, np.int32)  # right type of each stub: row a of Lint in random order
    # inside each right type: stubs in record order (a record's stubs adjacent), dealt round-robin over the
    # type's records in random order
    order = np.argsort(labels, kind="stable")
    del labels
    si = recs[order]
    del recs, order
    per_b = np.bincount(t2.of, minlength=B)  # right records per type
    got_b = Lint.sum(axis=0)  # stubs per right type
    q = _round_robin(np.repeat(np.arange(B, dtype=np.int32), got_b), got_b, per_b)
    rights = np.lexsort((rng.random(t2.of.size), t2.of))  # right records, type-major, random inside
    sj = rights[q].astype(np.int64)
    del q
    used = got_b > 0
    if not no_diagonal and (not used.any() or int(deg1.max(initial=0)) <= int(per_b[used].min())):
        return si, sj  # a record's ≤ deg_i stubs into a type with ≥ deg_i records meet distinct records
    return repair_pairs(si, sj, t2, rng, no_diagonal=no_diagonal, cap=cap, copy=False)


def _round_robin(b_sorted: np.ndarray, got_b: np.ndarray, per_b: np.ndarray) -> np.ndarray:
    """For stubs sorted by right type (``b_sorted``; ``got_b`` of them per type), their positions in the
    type-major list of right records (``per_b`` per type): dealt round-robin over each type's records."""
    q = np.arange(b_sorted.size, dtype=np.int64)
    q -= np.repeat(np.concatenate([[0], np.cumsum(got_b)[:-1]]), got_b)
    q %= np.maximum(per_b, 1)[b_sorted]
    q += np.concatenate([[0], np.cumsum(per_b)[:-1]])[b_sorted]
    return q


def _row_labels(counts: np.ndarray, rng: np.random.Generator, dtype: Any) -> np.ndarray:
    """Column labels of an (A × B) count matrix, row by row, each row's labels in random order."""
    A, B = counts.shape
    labels = np.empty(int(counts.sum()), dtype=dtype)
    pos = 0
    for a in range(A):
        lab = np.repeat(np.arange(B, dtype=dtype), counts[a])
        rng.shuffle(lab)
        labels[pos:pos + lab.size] = lab
        pos += lab.size
    return labels


def assign_incremental(t1: SideTypes, t2: SideTypes, Lint: np.ndarray, si: np.ndarray, sj: np.ndarray,
                       rng: np.random.Generator, *, no_diagonal: bool = False,
                       cap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Links with type-pair counts ``Lint`` that keep as many current links (si, sj) as possible: per type
    pair min(current, new) random current links stay; the freed left stubs (row totals of ``Lint`` equal the
    current ones) take the missing right types in random order and go to the least-linked records of that
    type (round-robin). Left degrees are kept; a record's links stay distinct (``repair_pairs``)."""
    A, B = Lint.shape
    kt = np.int32 if A * B < 2**31 else np.int64  # type-pair keys: half the memory at 10^7 links
    key = t1.of.astype(kt)[si]
    key *= kt(B)
    key += t2.of.astype(kt)[sj]
    if not np.array_equal(np.bincount(key, minlength=A * B).reshape(A, B).sum(axis=1), Lint.sum(axis=1)):
        raise DataError("internal: the type rows changed their totals")
    perm = np.lexsort((rng.random(key.size), key))
    starts = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=A * B))[:-1]])
    # a link stays iff its rank inside its type pair (in random order) is below the new count: rank < Lint ⟺
    # position < start + Lint (one temporary instead of ranks)
    nt = np.int32 if key.size < 2**31 else np.int64
    limit = (starts + Lint.ravel()).astype(nt)[key[perm]]
    keep = np.empty(key.size, dtype=bool)
    keep[perm] = limit > np.arange(key.size, dtype=nt)
    del perm, limit
    cur = np.bincount(key[keep], minlength=A * B).reshape(A, B)
    del key
    deficit = Lint - cur
    free = np.flatnonzero(~keep)
    free = free[np.lexsort((si[free], t1.of[si[free]]))]  # type-major, a record's stubs adjacent
    labels = _row_labels(deficit, rng, np.int32 if B < 2**31 else np.int64)
    order = np.argsort(labels, kind="stable")
    new_i = si[free[order]]
    del free
    b_sorted = labels[order]
    del labels, order
    got_b = np.bincount(b_sorted, minlength=B)
    deg_keep = np.bincount(sj[keep], minlength=t2.of.size)
    rights = np.lexsort((rng.random(t2.of.size), deg_keep, t2.of))  # type-major, least linked first
    q = _round_robin(b_sorted, got_b, np.bincount(t2.of, minlength=B))
    del b_sorted
    ni = np.concatenate([si[keep], new_i])
    del new_i
    nj = np.concatenate([sj[keep], rights[q]]).astype(np.int64)
    del q, keep
    return repair_pairs(ni, nj, t2, rng, no_diagonal=no_diagonal, cap=cap, copy=False)


def repair_pairs(si: np.ndarray, sj: np.ndarray, t2: SideTypes, rng: np.random.Generator, *,
                 no_diagonal: bool = False, cap: int | None = None, tries: int = 30,
                 copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Repeated pairs and (``no_diagonal``) self-loops: swap the right end with a link into the same right
    type (degrees and type counts kept), else move it to a free right record (below ``cap`` if given).
    ``copy: False`` repairs ``sj`` in place (a caller's own fresh array: one 10^7-long copy less)."""
    n2 = t2.of.size
    bad, keys = bad_pairs(si, sj, n2, no_diagonal, with_keys=True)  # keys: the sorted pair keys
    if not bad.size:
        return si, sj
    if copy:
        sj = sj.copy()
    delta: dict[int, int] = {}  # changes of each pair's multiplicity since ``keys``

    def exists(k: int) -> bool:
        lo, hi = np.searchsorted(keys, [k, k + 1])
        return int(hi - lo) + delta.get(k, 0) > 0

    def move(k_old: int, k_new: int) -> None:
        delta[k_old] = delta.get(k_old, 0) - 1
        delta[k_new] = delta.get(k_new, 0) + 1

    by_type, tstart = _links_by_type(t2.of, sj, t2.size)
    deg2 = np.bincount(sj, minlength=n2)
    for e in bad.tolist():
        i, j = int(si[e]), int(sj[e])
        b = int(t2.of[j])
        done = False
        for f in by_type[rng.integers(tstart[b], tstart[b + 1], size=tries)].tolist():
            i2, j2 = int(si[f]), int(sj[f])
            ok = (i2 != i and j2 != j and not exists(i * n2 + j2) and not exists(i2 * n2 + j)
                  and not (no_diagonal and (i == j2 or i2 == j)))
            if ok:
                move(i * n2 + j, i * n2 + j2)
                move(i2 * n2 + j2, i2 * n2 + j)
                sj[e], sj[f] = j2, j
                done = True
                break
        if not done:
            for j2 in rng.integers(0, n2, size=10 * tries).tolist():
                if (cap is None or deg2[j2] < cap) and not exists(i * n2 + j2) and not (no_diagonal and j2 == i):
                    move(i * n2 + j, i * n2 + j2)
                    deg2[j] -= 1
                    deg2[j2] += 1
                    sj[e] = j2
                    break
    keys = by_type = None  # freed before the final check (the closures above are done with them)
    if bad_pairs(si, sj, n2, no_diagonal).size:
        raise DataError("internal: repeated links or self-loops remain after the type assignment")
    return si, sj


def _links_by_type(of: np.ndarray, sj: np.ndarray, n_types: int, chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
    """``argsort(of[sj], kind="stable")`` (as int32 when it fits) and each right type's start in it: a counting
    sort in chunks (no 10^7-long int64 temporaries)."""
    B = max(int(n_types), int(of.max(initial=-1)) + 1)
    counts = np.zeros(B, dtype=np.int64)
    for s in range(0, sj.size, chunk):
        counts += np.bincount(of[sj[s:s + chunk]], minlength=B)
    tstart = np.concatenate([[0], np.cumsum(counts)])
    out = np.empty(sj.size, dtype=np.int32 if sj.size < 2**31 else np.int64)
    fill = tstart[:-1].copy()
    for s in range(0, sj.size, chunk):
        tc = of[sj[s:s + chunk]]
        o = np.argsort(tc, kind="stable")
        tb = tc[o]
        c = np.bincount(tc, minlength=B)
        rank = np.arange(tc.size) - np.concatenate([[0], np.cumsum(c)[:-1]])[tb]
        out[fill[tb] + rank] = s + o
        fill += c
    return out, tstart


__all__ = ["round_type_counts", "balanced_within_types", "assign_links", "assign_incremental", "repair_pairs"]
