"""Sibling child tables that agree: two foreign keys into one parent table (users <- sessions, users <- devices)
keep "has children in A" and "has children in B" jointly distributed as in the data.

Each link is learned on its own, so without this the parents that get B children are drawn independently of
those that have A children (a user with devices and no sessions where the data has none). The joint of the two
flags is fixed by the parents with children in both, c: either declared (``within``: every parent with B
children has A children, public schema knowledge, so c is all of B's parents) or released here (the count of
real parents with children in both, Gaussian, charged to B's links budget as ``links:siblings``), and then
reached by post-processing: whole child sets of B move between synthetic parents (donor to receiver, degrees
kept, so B's children-per-parent distribution and its d_max cap are unchanged), each to the receiver with the
nearest codes (the same codes first: then no cross-table count of B changes).

Sensitivity of c (bounded DP: one record changes with all its links): a child moving takes at most one parent
out of c and puts at most one in (|Δc| ≤ 1). A parent q changing its children: a parent that receives one of q's
old children can only enter c, a parent that gives q a new child can only leave it, and q itself may enter or
leave. c grows by at most (q's old children pushed out) + (q entering): if q enters, it had no children in one of
the links before, so at most max(d_A, d_B) + 1 ≤ d_A + d_B; else at most d_A + d_B. It shrinks symmetrically (q's
new children, q leaving). So Δ = d_A + d_B, reached (checked exhaustively on small graphs in the tests).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.privacy.primitives import gaussian_sigma
from privcube.relational.stages.degree_histograms import truncated_normal_mean

#: ``sibling_share: auto``: the share of the later sibling's links budget that reads c / N with std
#: ``SIBLING_ERROR``, within ``SIBLING_SHARE_RANGE`` (public: d_max of both links, the budget, N parents).
SIBLING_ERROR = 0.03
SIBLING_SHARE_RANGE = (0.05, 0.2)


@dataclass
class Sibling:
    """What a link learns from an earlier sibling (another foreign key into the same parent table, run first):
    which synthetic parents have the anchor's children, the anchor's bound, whether the schema declares
    ``within`` (this link's parents are among the anchor's) and, for a release, the task that counts the real
    parents with children in both (run where the links are; only the count comes back, then gets its noise)."""

    anchor: str  # the anchor link's name (its ``privacy.links`` key)
    anchor_has: np.ndarray  # bool per synthetic parent: has children in the anchor (a DP output)
    d_anchor: int
    within: bool = False
    anchor_flags: Any = None  # the real parents' anchor flags, a task on the cluster (release only)


def sibling_sensitivity(d_anchor: int, d_link: int) -> float:
    """L2 (= L1: one count) sensitivity of the number of parents with children in both links, d_A + d_B (module
    docstring; at least 1, a child moving)."""
    return float(max(d_anchor + d_link, 1))


def sibling_rho(share: Any, d_anchor: int, d_link: int, rho_links: float, n_parents: int | None) -> float:
    """ρ of the sibling release: ``share`` of ``rho_links``, or (``auto``) the ρ that reads c / N with std
    ``SIBLING_ERROR``, within ``SIBLING_SHARE_RANGE`` of the budget (without N, a data-free plan: the upper end)."""
    if share != "auto":
        return float(share) * rho_links
    lo, hi = SIBLING_SHARE_RANGE
    if not n_parents or rho_links <= 0:
        return hi * rho_links
    need = sibling_sensitivity(d_anchor, d_link) ** 2 / (2.0 * SIBLING_ERROR ** 2 * n_parents ** 2)
    return min(max(need / rho_links, lo), hi) * rho_links


def release_both(count: Callable[[], int], d_anchor: int, d_link: int, rho: float, ledger: Any,
                 noise: Any) -> tuple[float, float]:
    """The Gaussian release of the number of parents with children in both links: charged first (ledger label
    ``links:siblings``), then ``count()`` reads the private count; returns (noisy count, σ)."""
    sigma = gaussian_sigma(rho, sibling_sensitivity(d_anchor, d_link))
    ledger.charge("links:siblings", rho=rho, sigma=sigma)
    return float(noise.add_gaussian(("relational", "siblings"), np.array([float(count())]), sigma)[0]), sigma


def both_target(reading: float, sigma: float, n_real: int, n_syn: int, k_link: int, k_anchor: int) -> int:
    """How many synthetic parents should have children in both (post-processing): the real count's reading
    scaled to the synthetic parents, read as the posterior mean under a uniform prior on what the synthetic
    counts allow (between max(0, k_link + k_anchor − n) and min(k_link, k_anchor))."""
    lo, hi = max(0, k_link + k_anchor - n_syn), min(k_link, k_anchor)
    if hi <= lo:
        return int(lo)
    scale = n_syn / max(n_real, 1)
    mean = truncated_normal_mean(reading * scale, max(sigma * scale, 1e-9), lo - 0.5, hi + 0.5)
    return int(min(max(round(mean), lo), hi))


def align_siblings(sj: np.ndarray, n_parents: int, anchor_has: np.ndarray, target: int, codes: np.ndarray,
                   rng: np.random.Generator, max_pairs: int = 20_000_000,
                   within_cap: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Move whole child sets of this link (``sj``: its parent per child) between synthetic parents until
    ``target`` of the parents with its children also have the anchor's (``anchor_has``). A move takes every
    child of a donor to a receiver without children here, so each parent's degree moves with it (the
    children-per-parent distribution and the d_max cap are kept); donors and receivers are paired by the
    fewest differing codes (``codes``: per parent), the same codes first, so the fewest cross-table counts
    change. ``within_cap`` (``within``: none of this link's parents may lie outside the anchor's): children of
    parents still outside once every anchor parent has children here join anchor parents with room below this
    cap (nearest codes first). Post-processing. Returns the new ``sj`` and a report (moves, children moved,
    code distances, children merged)."""
    sj = np.asarray(sj, dtype=np.int64)
    deg = np.bincount(sj, minlength=n_parents)
    has = deg > 0
    both = int(np.count_nonzero(has & anchor_has))
    need = int(target) - both
    rep: dict[str, Any] = {"target_both": int(target), "before_both": both, "moves": 0, "children_moved": 0,
                           "code_distance": {}}
    if need == 0:
        return _merge_outside(sj, n_parents, anchor_has, codes, within_cap, rep)
    if need > 0:  # more overlap: children of parents outside the anchor's to anchor parents without any here
        donors, receivers = np.flatnonzero(has & ~anchor_has), np.flatnonzero(~has & anchor_has)
    else:  # less overlap: children of parents in both to parents with neither
        donors, receivers = np.flatnonzero(has & anchor_has), np.flatnonzero(~has & ~anchor_has)
    k = min(abs(need), donors.size, receivers.size)
    if k == 0:
        return _merge_outside(sj, n_parents, anchor_has, codes, within_cap, rep)
    donors = donors[rng.permutation(donors.size)]
    receivers = receivers[rng.permutation(receivers.size)]
    if donors.size * receivers.size > max_pairs:  # a bounded distance matrix: a random part of each side
        nd = max(k, min(donors.size, max_pairs // max(receivers.size, 1)))
        donors = donors[:nd]
        receivers = receivers[: max(k, max_pairs // max(nd, 1))]
    dist = code_distances(np.asarray(codes), donors, receivers)
    # greedy: donors whose nearest receiver is closest go first; each takes its nearest unused receiver (ties at
    # random), until k moves are made
    jitter = rng.random(receivers.size) * 0.5  # < 1: breaks ties only
    first = np.lexsort((rng.random(donors.size), dist.min(axis=1)))
    taken = np.zeros(receivers.size, dtype=bool)
    pairs: list[tuple[int, int, int]] = []
    for a in first.tolist():
        row = np.where(taken, np.inf, dist[a] + jitter)
        b = int(np.argmin(row))
        if not np.isfinite(row[b]):
            break
        taken[b] = True
        pairs.append((int(donors[a]), int(receivers[b]), int(dist[a, b])))
        if len(pairs) == k:
            break
    move_to = np.arange(n_parents, dtype=np.int64)
    for d, r, _ in pairs:
        move_to[d] = r
    new = move_to[sj]
    dists = np.bincount([p[2] for p in pairs])
    rep.update({"moves": len(pairs), "children_moved": int(np.count_nonzero(new != sj)),
                "code_distance": {str(i): int(c) for i, c in enumerate(dists) if c}})
    return _merge_outside(new, n_parents, anchor_has, codes, within_cap, rep)


def _merge_outside(sj: np.ndarray, n_parents: int, anchor_has: np.ndarray, codes: np.ndarray, cap: int | None,
                   rep: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
    """``within``: children whose parent is still outside the anchor's parents join anchor parents that have
    this link's children and room below ``cap``, the nearest codes first (a donor's children together while
    the room lasts). Leaves ``sj`` as it is when ``cap`` is None or nothing is outside."""
    if cap is None:
        return sj, rep
    outside = np.flatnonzero(~np.asarray(anchor_has, dtype=bool)[sj])
    if not outside.size:
        return sj, rep
    sj = sj.copy()
    deg = np.bincount(sj, minlength=n_parents)
    room = np.where(np.asarray(anchor_has, dtype=bool), cap - deg, 0)
    merged = 0
    for donor in np.unique(sj[outside]).tolist():
        kids = np.flatnonzero(sj == donor)
        while kids.size:
            open_ = np.flatnonzero(room > 0)
            if not open_.size:
                break  # no room anywhere (impossible while children ≤ anchor parents × cap)
            dist = code_distances(np.asarray(codes), np.array([donor]), open_)[0]
            best = open_[np.lexsort((-room[open_], dist))[0]]
            take = kids[: int(room[best])]
            sj[take] = best
            room[best] -= take.size
            merged += int(take.size)
            kids = kids[take.size:]
    rep["children_merged_into_anchor_parents"] = merged
    return sj, rep


def code_distances(codes: np.ndarray, rows: np.ndarray, cols: np.ndarray, chunk: int = 256) -> np.ndarray:
    """How many attributes differ between each record of ``rows`` and each of ``cols`` (Hamming distance of
    their codes), as a (rows, cols) array of small integers, computed a chunk of rows at a time."""
    if codes.ndim != 2 or not codes.shape[1]:
        return np.zeros((rows.size, cols.size), dtype=np.int16)
    out = np.empty((rows.size, cols.size), dtype=np.int16)
    right = codes[cols]
    for s in range(0, rows.size, chunk):
        out[s:s + chunk] = (codes[rows[s:s + chunk]][:, None, :] != right[None, :, :]).sum(axis=2)
    return out


__all__ = ["code_distances", "SIBLING_ERROR", "SIBLING_SHARE_RANGE", "Sibling", "align_siblings", "both_target", "release_both",
           "sibling_rho", "sibling_sensitivity"]
