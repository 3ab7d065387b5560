"""Degree distributions: a private release of how many records have 0..d_max links, and a repair that gives
the synthetic records those degrees without changing any cross-table count.

Every many-to-many record starts from a balanced degree (⌊m/n⌋ or ⌈m/n⌉), every one-to-many parent from a
uniform draw; learning then moves links between record types, so a type's total follows the releases, but
inside a type the degrees stay nearly equal. The real distribution (how many users rate 0, 1, …, d_max
movies) is released here in equal-width bins (one-to-many: childless parents in a bin of their own) with the
Gaussian mechanism, as many bins as the public sizes say can be informative (none: nothing is released), and
the synthetic links are then re-dealt inside groups of records with identical codes on every
attribute: such records are interchangeable in every marginal, so moving a link's end from one to another
changes no cross-table count, only who holds the link. Each group keeps its total; its records' degrees
follow a distribution with the group's mean, and the groups' distributions together make up the released
one. Release: a charge on the links budget; the rest: post-processing.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import erfcx, ndtr

from privcube.privacy.primitives import gaussian_sigma
from privcube.relational.stages.shrinkage import shrink

#: a side's histogram gets the most equal-width bins B with expected relative noise norm σ·√B/n at most this
#: (none: not released). Picked by simulation (``benchmarks/relational_degree_bins.py``: Poisson degrees,
#: d_max 10 to 50, 6·10^3 to 10^6 records): the bin count it gives is the best one or within 0.035 total
#: variation of it (coarser bins lose the shape, finer ones drown in noise); balanced degrees are 0.79–0.87 off.
BIN_NOISE = 0.12


def degree_sensitivity(d_max: int, self_ref: bool, *, one_to_many: bool = False) -> float:
    """L2 sensitivity of both sides' degree histograms (interval bins over 0..d_max) released together
    (bounded DP: one record changes with its ≤ d_max links).

    A left record's own degree moves it between two bins (√2 on the left histogram). Its old links leave
    ≤ d_max right records one degree lower and its new links put ≤ d_max one degree higher, each crossing at
    most one boundary between adjacent bins; the worst case is all removals from one bin and all additions
    from the same bin (−2·d_max there, +d_max on each neighbour): √6·d_max on the right histogram (checked
    exhaustively in the tests). Together √(6·d_max² + 2); a right record, by symmetry, the same.
    Self-referential links (out- and in-degrees of one table): the record is on both ends, √(12·d_max² + 4).
    One-to-many (``one_to_many``: the parents' children-per-parent histogram alone): a parent changing its
    ≤ d_max children moves ≤ d_max other parents one lower and ≤ d_max one higher, and itself anywhere, all
    in the same histogram: √(6·d_max² + 6·d_max + 2) (exhaustive maximum for d_max 1..3, checked in the tests).
    """
    if one_to_many:
        return math.sqrt(6.0 * d_max * d_max + 6.0 * d_max + 2.0)
    s2 = 6.0 * d_max * d_max + 2.0
    return math.sqrt(2.0 * s2 if self_ref else s2)


def degree_sigma(d_max: int, rho: float, self_ref: bool, *, one_to_many: bool = False) -> float:
    """σ of the degree release with ρ (zCDP: ρ = Δ²/(2σ²))."""
    return gaussian_sigma(rho, degree_sensitivity(d_max, self_ref, one_to_many=one_to_many))


def bin_counts(sizes: tuple[int, int], d_max: int, rho: float, self_ref: bool, *,
               one_to_many: bool = False) -> tuple[int, int]:
    """Each side's number of equal-width degree bins (0: that side is not released), from public inputs:
    the most bins B ≤ d_max + 1 with σ·√B/n ≤ ``BIN_NOISE``, when at least 2 qualify."""
    if rho <= 0:
        return 0, 0
    sigma = degree_sigma(d_max, rho, self_ref, one_to_many=one_to_many)
    out = []
    for n in sizes:
        b = int(math.floor((BIN_NOISE * n / sigma) ** 2)) if n > 0 else 0
        b = min(b, d_max + 1)
        out.append(b if b >= 2 else 0)
    return out[0], out[1]


def bin_edges(b: int, d_max: int, *, zero_bin: bool = False) -> np.ndarray:
    """B + 1 edges of B intervals covering degrees 0..d_max (bin k is [e_k, e_{k+1})): equal widths, or
    (``zero_bin``, one-to-many parents, where "no child" is often most of them) degree 0 alone, then B − 1
    equal-width intervals over 1..d_max. Intervals either way, so a degree moving by one crosses at most one
    boundary (the sensitivity argument of ``degree_sensitivity``)."""
    if zero_bin and b >= 2:
        return np.concatenate([[0], np.unique(np.round(np.linspace(1, d_max + 1, b)).astype(np.int64))])
    return np.unique(np.round(np.linspace(0, d_max + 1, b + 1)).astype(np.int64))


def release_degrees(hists: tuple[np.ndarray, np.ndarray], bins: tuple[int, int], d_max: int, rho: float,
                    self_ref: bool, ledger: Any, noise: Any, *, one_to_many: bool = False) -> np.ndarray:
    """Gaussian release of the chosen sides' binned degree histograms (charged first, ledger label
    ``links:degrees``). Returns a (2, d_max + 1) array: side s's first ``bins[s]`` entries are its noisy bin
    counts, the rest NaN. ``hists[s][d]`` is the number of side-s records with d links (an aggregate, counted
    where the links are). ``one_to_many``: only the parents' side (``bins[0]`` is 0), its own sensitivity."""
    sigma = degree_sigma(d_max, rho, self_ref, one_to_many=one_to_many)
    ledger.charge("links:degrees", rho=rho, sigma=sigma, bins=int(sum(bins)))
    out = np.full((2, d_max + 1), np.nan)
    for s in (0, 1):
        if bins[s]:
            h = np.zeros(d_max + 1)
            src = np.asarray(hists[s], dtype=float)[: d_max + 1]  # degrees are ≤ d_max once checked or truncated
            h[: src.size] = src
            e = bin_edges(bins[s], d_max, zero_bin=one_to_many)
            out[s, : e.size - 1] = noise.add_gaussian(("relational", "degrees", s), np.add.reduceat(h, e[:-1]), sigma)
    return out


def degree_distribution(noisy: np.ndarray, n: int, sigma: float, mean: float, d_max: int,
                        current: np.ndarray | None = None, *, zero_bin: bool = False) -> np.ndarray:
    """A distribution over 0..d_max from a side's noisy binned histogram of ``n`` records (post-processing):
    shrunk toward the ``current`` synthetic degree distribution (the learned links'; without it the balanced
    one with the public mean), on the noise power, so near it when the release is mostly noise; onto the
    simplex; inside each bin wider than one degree, the bin's mass spread along the density interpolated
    linearly between the bins' centres (real degree distributions are smooth; even spreading, tried first,
    gave 0.149 / 0.137 total variation on `relational_scale.py`'s users / movies, this 0.135 / 0.094); then
    tilted to the public mean. ``zero_bin``: the release's bins were ``bin_edges(..., zero_bin=True)``."""
    noisy = np.asarray(noisy, dtype=float)
    noisy = noisy[np.isfinite(noisy)]
    e = bin_edges(noisy.size, d_max, zero_bin=zero_bin)
    if current is None:
        base = np.zeros(d_max + 1)
        lo = min(int(math.floor(mean)), d_max)
        frac = min(max(mean - lo, 0.0), 1.0) if lo < d_max else 0.0
        base[lo] += 1.0 - frac
        if frac > 0:
            base[lo + 1] += frac
    else:
        base = np.zeros(d_max + 1)
        cur = np.asarray(current, dtype=float)[: d_max + 1]
        base[: cur.size] = cur
    prior = np.add.reduceat(base, e[:-1])
    pb = shrink(noisy / max(n, 1), prior / max(prior.sum(), 1e-300), sigma / max(n, 1))
    w = np.diff(e).astype(float)
    dens = np.interp(np.arange(d_max + 1), (e[:-1] + e[1:] - 1) / 2.0, pb / w)  # through the bins' centres
    dens = np.maximum(dens, 1e-12 * max(float(dens.max()), 1e-300))
    p = np.repeat(pb / np.maximum(np.add.reduceat(dens, e[:-1]), 1e-300), np.diff(e)) * dens
    return tilt(p[None, :], np.array([mean]))[0]


def _tail_ratio(al: float, be: float) -> float:
    """(φ(α) − φ(β)) / (Q(α) − Q(β)) for 0 ≤ α < β (Q = 1 − Φ), with the factor e^{−α²/2} cancelled
    (Q(x) = erfcx(x/√2)·e^{−x²/2}/2), so it stays finite far in the tail (→ α)."""
    d = math.exp(-0.5 * (be - al) * (be + al)) if math.isfinite(be) else 0.0
    return (1.0 - d) / math.sqrt(2.0 * math.pi) / (0.5 * float(erfcx(al / math.sqrt(2.0)))
                                                    - (0.5 * float(erfcx(be / math.sqrt(2.0))) * d if d else 0.0))


def truncated_normal_mean(mu: float, s: float, a: float, b: float) -> float:
    """Mean of N(mu, s²) truncated to [a, b] (a < b, s > 0): the posterior mean of a quantity with a uniform
    prior on [a, b] read with Gaussian noise; stable when mu lies far outside the interval."""
    al, be = (a - mu) / s, (b - mu) / s
    if al >= 0:  # the reading at or below the interval
        m = mu + s * _tail_ratio(al, be)
    elif be <= 0:  # at or above it: the mirror image
        m = mu - s * _tail_ratio(-be, -al)
    else:
        num = (math.exp(-0.5 * al * al) - math.exp(-0.5 * be * be)) / math.sqrt(2.0 * math.pi)
        m = mu + s * num / float(ndtr(be) - ndtr(al))
    return float(min(max(m, a), b))


def childless_distribution(noisy: np.ndarray, n_parents: int, n_children: int, d_max: int,
                           n_real_parents: int | None = None, sigma: float | None = None,
                           max_parents: int | None = None) -> np.ndarray:
    """A children-per-parent distribution over 0..d_max from the two-value release (parents without / with
    children, ``synthetic_degrees.release_degree_histogram``; post-processing): the share with children, as a number of
    parents within what the public sizes allow (⌈children / d_max⌉ to min(parents, children)), and on
    1..d_max the maximum-entropy shape with the public mean children / parents-with-children (a truncated
    geometric: the uniform distribution tilted to that mean). The two counts add up to the public number of
    real parents N, so the share is read as (N + with − without) / 2N: both noisy counts inform it, with half
    the noise variance of either (the ratio with / (with + without) has noise in its denominator too). With
    the release's ``sigma`` the share is the posterior mean under a uniform prior on the allowed range (the
    mean of the reading's normal truncated to it), not the reading clipped to it: a reading below the range
    says the share is low, not that it sits on the bound. ``max_parents``: a public (or DP) upper bound on the
    parents with children (a sibling's, under ``within``) narrowing that range."""
    w = np.asarray(noisy, dtype=float)
    n_real = int(n_real_parents if n_real_parents is not None else n_parents)
    lo_k = max(-(-int(n_children) // int(d_max)), 1)  # parents with children: the range the public sizes allow
    hi_k = max(min(n_parents, n_children, *(() if max_parents is None else (max(max_parents, lo_k),))), 1)
    reading = (n_real + w[1] - w[0]) / (2.0 * n_real) if n_real > 0 else 0.5
    share = float(np.clip(reading, 0.0, 1.0))
    if sigma is not None and sigma > 0 and n_real > 0 and n_parents > 0 and hi_k > lo_k:
        s = sigma / (math.sqrt(2.0) * n_real)  # std of the reading: (with − without) / 2 has σ/√2
        share = truncated_normal_mean(reading, s, lo_k / n_parents, hi_k / n_parents)
    k = int(np.clip(round(share * n_parents), lo_k, hi_k))
    p = np.zeros(d_max + 1)
    p[0] = 1.0 - k / max(n_parents, 1)
    ones = np.zeros((1, d_max + 1))
    ones[0, 1:] = 1.0 / d_max
    p[1:] = (1.0 - p[0]) * tilt(ones, np.array([n_children / k]))[0, 1:]
    return p


def tilt(p: np.ndarray, means: np.ndarray, iters: int = 80) -> np.ndarray:
    """Each row of ``p`` (a distribution over 0..K) exponentially tilted, p_k·e^{θk} normalised, to the
    row's mean in ``means`` (θ by bisection on the log scale; the tilted distribution is the one closest to p
    in KL with that mean). Means at 0 or K give the point mass there; a row without support on both sides of
    its mean falls back to the two-point distribution around it."""
    p = np.asarray(p, dtype=float)
    K = p.shape[1] - 1
    ks = np.arange(K + 1, dtype=float)
    mu = np.clip(np.asarray(means, dtype=float), 0.0, float(K))
    lo = np.full(mu.size, -50.0)
    hi = np.full(mu.size, 50.0)
    logp = np.log(np.maximum(p, 1e-300))
    for _ in range(iters):
        th = 0.5 * (lo + hi)
        w = logp + th[:, None] * ks
        w = np.exp(w - w.max(axis=1, keepdims=True)) * (p > 0)
        m = (w * ks).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-300)
        up = m < mu
        lo = np.where(up, th, lo)
        hi = np.where(up, hi, th)
    th = 0.5 * (lo + hi)
    w = logp + th[:, None] * ks
    w = np.exp(w - w.max(axis=1, keepdims=True)) * (p > 0)
    q = w / np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
    bad = np.abs((q * ks).sum(axis=1) - mu) > 1e-6 * max(K, 1)
    for r in np.flatnonzero(bad):  # the mean lies outside p's support: two points around it
        f = int(min(math.floor(mu[r]), K - 1)) if K > 0 else 0
        q[r] = 0.0
        if K == 0:
            q[r, 0] = 1.0
            continue
        q[r, f + 1] = mu[r] - f
        q[r, f] = 1.0 - q[r, f + 1]
    return q


def group_shapes(p: np.ndarray, means: np.ndarray, weights: np.ndarray, iters: int = 30) -> np.ndarray:
    """One distribution per group, each with its group's mean, whose mixture (``weights``: records per group)
    is ``p``: each row is a base distribution tilted to its mean, and the base is rescaled, as in iterative
    proportional fitting, until the mixture matches p. Groups whose means differ carry part of p's spread
    themselves, so each group's own spread is narrower than p's (tilting p itself to every mean would make the
    mixture wider than p). Means equal to 10^-3 share one row (the unit adjustments of ``group_targets``
    then keep each group's exact total)."""
    p = np.asarray(p, dtype=float)
    key, inv = np.unique(np.round(np.asarray(means, dtype=float), 3), return_inverse=True)
    w = np.bincount(inv, weights=np.asarray(weights, dtype=float), minlength=key.size)
    mu = np.bincount(inv, weights=np.asarray(weights, dtype=float) * means, minlength=key.size) / np.maximum(w, 1e-300)
    w = w / max(w.sum(), 1e-300)
    base = p.copy()
    for _ in range(iters):
        q = tilt(np.broadcast_to(base, (key.size, p.size)), mu)
        mix = w @ q
        ratio = np.where(mix > 0, p / np.maximum(mix, 1e-300), 0.0)
        if np.abs(mix - p).sum() < 1e-4:
            break
        base = base * ratio
        base /= max(base.sum(), 1e-300)
    return tilt(np.broadcast_to(base, (key.size, p.size)), mu)[inv]


def group_targets(current: np.ndarray, groups: np.ndarray, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A target degree per record: inside each group (records with identical codes) degrees drawn from the
    group's shape (``group_shapes``: its mean, and together the distribution ``p``), adjusted by single units
    (within 0..d_max; records with links first, so the number with none stays as drawn) so the group's total
    is kept, then matched by rank to the current degrees (the record
    with the most links gets the largest target) so reaching them moves as few links as possible."""
    current = np.asarray(current, dtype=np.int64)
    K = p.size - 1
    g_ids, g = np.unique(groups, return_inverse=True)
    G = g_ids.size
    n_g = np.bincount(g, minlength=G)
    s_g = np.bincount(g, weights=current, minlength=G).astype(np.int64)
    q = group_shapes(p, s_g / np.maximum(n_g, 1), n_g)
    cdf = np.cumsum(q, axis=1)
    cdf[:, -1] = 1.0
    # inverse-CDF draws for all records at once: row g's CDF shifted by g keeps the flattened array sorted
    u = rng.random(current.size)
    flat = (cdf + np.arange(G)[:, None]).ravel()
    t = np.searchsorted(flat, u + g, side="right") - g * (K + 1)
    t = np.clip(t, 0, K).astype(np.int64)
    # unit adjustments toward each group's total, at random records with room
    for _ in range(4 * (K + 1)):
        diff = s_g - np.bincount(g, weights=t, minlength=G).astype(np.int64)
        if not diff.any():
            break
        sign = np.sign(diff)[g]
        room = ((sign > 0) & (t < K)) | ((sign < 0) & (t > 0))
        cand = np.flatnonzero(room)
        # records that stay on their side of zero first (a unit onto a record with links, off one with two or
        # more), so the adjustment does not change how many records have links (one-to-many: childless parents)
        crosses = np.where(sign[cand] > 0, t[cand] == 0, t[cand] == 1)
        order = cand[np.lexsort((rng.random(cand.size), crosses, g[cand]))]
        first = np.searchsorted(g[order], np.arange(G))
        rank = np.arange(order.size) - first[g[order]]
        take = order[rank < np.abs(diff)[g[order]]]
        t[take] += sign[take]
    # match by rank inside each group
    by_cur = np.lexsort((rng.random(current.size), -current, g))
    by_tgt = np.lexsort((-t, g))
    out = np.empty_like(t)
    out[by_cur] = t[by_tgt]
    return out


def move_to_degrees(si: np.ndarray, sj: np.ndarray, side: int, target: np.ndarray, groups: np.ndarray,
                    n_other: int, rng: np.random.Generator, *, no_diagonal: bool = False, passes: int = 8,
                    in_place: bool = False) -> tuple[tuple[np.ndarray, np.ndarray], int, int]:
    """Move links' ``side`` ends (0: si, 1: sj) from records above their target degree to records of the
    same group below it; the other ends stay, so the other side's degrees are unchanged. A move never creates
    a repeated pair (nor a self-loop with ``no_diagonal``); moves that would are retried with other pairings
    for ``passes`` rounds. Returns the new (si, sj), the number of links moved and how many surplus units
    found no partner. ``in_place`` changes the caller's array (one copy of the links less)."""
    ends = (si if side == 0 else sj) if in_place else (si if side == 0 else sj).copy()
    other = sj if side == 0 else si
    n = target.size
    _, g = np.unique(groups, return_inverse=True)
    moved = 0
    for _ in range(passes):
        deg = np.bincount(ends, minlength=n)
        surplus = np.maximum(deg - target, 0)
        if not surplus.any():
            break
        # the movers: ``surplus[r]`` random links of each record r above its target (only those records'
        # links are sorted: shuffled, then stably by record, so each record's links come in random order)
        cand = np.flatnonzero(surplus[ends] > 0)
        cand = cand[rng.permutation(cand.size)]
        cand = cand[np.argsort(ends[cand], kind="stable")]
        rec = ends[cand]
        rank = np.arange(cand.size) - np.searchsorted(rec, rec)
        movers = cand[rank < surplus[rec]]
        del cand, rec, rank
        deficit = np.maximum(target - deg, 0)
        recv = np.repeat(np.arange(n, dtype=np.int64), deficit)
        # pair movers with receivers of the same group, in random order within the group
        movers = movers[np.lexsort((rng.random(movers.size), g[ends[movers]]))]
        recv = recv[np.lexsort((rng.random(recv.size), g[recv]))]
        mg, rg = g[ends[movers]], g[recv]
        # per group, pair the first min(#movers, #receivers) of each
        cm = np.bincount(mg, minlength=int(g.max()) + 1)
        cr = np.bincount(rg, minlength=cm.size)
        k = np.minimum(cm, cr)
        rk_m = np.arange(movers.size) - np.searchsorted(mg, mg)
        rk_r = np.arange(recv.size) - np.searchsorted(rg, rg)
        movers = movers[rk_m < k[mg]]
        recv = recv[rk_r < k[rg]]
        if not movers.size:
            break
        # a move is refused if its new pair exists already (old pairs count, even vacated ones), repeats an
        # earlier move's pair, or is a self-loop
        old = ends.astype(np.int64) * n_other + other if side == 0 else other.astype(np.int64) * n + ends
        old.sort()
        new = recv * n_other + other[movers] if side == 0 else other[movers].astype(np.int64) * n + recv
        o = np.argsort(new)  # sorted queries: the binary searches walk the sorted keys in order (cache)
        pos = np.searchsorted(old, new[o])
        ok = np.empty(new.size, dtype=bool)
        ok[o] = old[np.minimum(pos, old.size - 1)] != new[o]
        del old, pos, o
        _, first_new = np.unique(new, return_index=True)
        once = np.zeros(new.size, dtype=bool)
        once[first_new] = True
        ok &= once
        if no_diagonal:
            ok &= recv != other[movers]
        ends[movers[ok]] = recv[ok]
        moved += int(ok.sum())
    left_over = int(np.maximum(np.bincount(ends, minlength=n) - target, 0).sum())
    return (ends, sj) if side == 0 else (si, ends), moved, left_over


def shape_degrees(si: np.ndarray, sj: np.ndarray, sizes: tuple[int, int], codes: tuple[np.ndarray, np.ndarray],
                  probs: tuple[np.ndarray | None, np.ndarray | None], rng: np.random.Generator, *,
                  no_diagonal: bool = False, in_place: bool = False) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Give each side with a released distribution (``probs[s]``) degrees that follow it, moving links only
    inside groups of identical full codes (``codes[s]``, one key per record), so no cross-table count
    changes. Post-processing. Returns the links and a report (links moved, surplus units without partner);
    ``in_place`` changes the caller's arrays."""
    rep: dict[str, Any] = {}
    for s in (0, 1):
        if probs[s] is None:
            continue
        cur = np.bincount(si if s == 0 else sj, minlength=sizes[s])
        target = group_targets(cur, codes[s], probs[s], rng)
        (si, sj), moved, left = move_to_degrees(si, sj, s, target, codes[s], sizes[1 - s], rng,
                                                no_diagonal=no_diagonal, in_place=in_place)
        rep[("left" if s == 0 else "right")] = {"links_moved": moved, "unplaced_units": left}
    return si, sj, rep


__all__ = ["BIN_NOISE", "degree_sensitivity", "degree_sigma", "bin_counts", "bin_edges", "release_degrees",
           "degree_distribution", "childless_distribution", "truncated_normal_mean", "tilt", "group_shapes",
           "group_targets", "move_to_degrees", "shape_degrees"]
