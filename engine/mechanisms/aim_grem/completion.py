"""Maximum-entropy completion of unmeasured residuals (no zero-fill), as post-processing of noisy estimates.

GReM-MLE leaves every never-measured residual τ at zero, which biases every marginal containing it
towards an additive "no interaction" model (on nltcs at ε = 0.3 that bias is most of the error). Here
each unmeasured τ instead gets the residual implied by the measured ones:

* ``local`` (every round, incremental): bottom-up in |τ|, τ's completed residual is the top residual of
  the maximum-entropy distribution on τ's cells whose (|τ|−1)-way sub-marginals equal the current
  estimates (clipped at 0 and renormalised to the estimated total): the independence product for a
  pair, iterative proportional fitting (IPF) from uniform above. Only residuals whose sub-marginals
  changed are recomputed. Every τ has ONE value, so all marginals stay consistent (residual basis).
* ``global`` (at release, when the full domain of W↓'s attributes is small): one IPF over the full
  domain fitting the maximal measured cliques (the max-entropy / graphical-model completion); each
  unmeasured τ gets the top residual of the model's τ-marginal. This recovers, e.g., the
  conditional-independence estimate of a-c in a chain a-b, b-c, which the local rule cannot.

Both read only noisy estimates (z_τ and the estimated total): they spend no budget.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from privcube.core.residuals import Sizes, decomp, recon_add, size_of

Clique = tuple[str, ...]
IPF_ITERS = 30
IPF_TOL = 1e-7
GLOBAL_ITERS = 15  # full-domain sweeps at release: on nltcs (eps 3) 15 give the error of 50 at 30% of the time


def _shape(c: Sequence[str], sizes: Sizes) -> tuple[int, ...]:
    return tuple(size_of(sizes, a) for a in c)


def marginal(gamma: Clique, z: Mapping[Clique, np.ndarray], sizes: Sizes) -> np.ndarray:
    """Σ_{τ⊆γ} Recon(z_τ, τ, γ) over the residuals present in ``z`` (effective estimates)."""
    out = np.zeros(_shape(gamma, sizes), dtype=float)
    k = len(gamma)
    for mask in range(1 << k):
        t = tuple(gamma[i] for i in range(k) if mask >> i & 1)
        zt = z.get(t)
        if zt is not None:
            recon_add(out, zt, t, gamma, sizes)
    return out


def clip_total(mu: np.ndarray, total: float) -> np.ndarray:
    """Negative cells set to 0, then rescaled to ``total`` (uniform if nothing positive is left)."""
    m = np.maximum(mu, 0.0)
    s = float(m.sum())
    if s <= 0:
        return np.full(mu.shape, total / max(mu.size, 1))
    return m * (total / s)


class AxesView:
    """Fast marginals of, and scaling along, a subset of axes of one C-order array shape.

    numpy's multi-axis reductions and broadcast multiplies over a 16-axis array spend most of their time
    in iterator overhead (inner loops of length 2). Here runs of adjacent summed-out axes are merged
    into one block: a leading or trailing block is summed by a matrix-vector product with ones, a
    middle block by a batched one; scaling multiplies a view whose inner axis is the trailing ≥ ``INNER``
    cells, with the factor broadcast over them once. Same sums up to float round-off (order differs).
    """

    INNER = 256

    def __init__(self, shape: tuple[int, ...], axes: Sequence[int]) -> None:
        """``axes`` in increasing order: the kept axes (the target's layout)."""
        keep = set(axes)
        self.shape, self.axes = shape, tuple(axes)
        self.kshape = tuple(shape[i] for i in self.axes)
        blocks: list[list[int]] = []  # [size, kept] per merged run
        for i, n in enumerate(shape):
            kept = i in keep
            if blocks and not kept and not blocks[-1][1]:
                blocks[-1][0] *= n
            else:
                blocks.append([n, kept])
        self.blocks = [(n, bool(k)) for n, k in blocks]
        s, inner = len(shape), 1  # scaling: trailing original axes of at least INNER cells form the inner loop
        while s > 0 and inner < self.INNER:
            s -= 1
            inner *= shape[s]
        self.split, self.inner = s, inner
        lead = []
        for i in range(s):
            if i in keep or not lead or lead[-1][1]:
                lead.append([shape[i], i in keep])
            else:
                lead[-1][0] *= shape[i]
        self.lead_view = tuple(n for n, _ in lead) + (inner,)
        self.lead_f = tuple(n if k else 1 for n, k in lead)
        self.fshape = tuple(shape[i] if i in keep else 1 for i in range(len(shape)))

    def marginal(self, q: np.ndarray) -> np.ndarray:
        """Sum of ``q`` over every axis not kept, shaped as the kept axes (increasing order)."""
        view = [n for n, _ in self.blocks]
        kept = [k for _, k in self.blocks]
        w = q.reshape(-1)
        if not kept[0] and view[0] > 1:
            w = np.ones(view[0]) @ w.reshape(view[0], -1)
        if not kept[0]:
            view, kept = view[1:], kept[1:]
        if view and not kept[-1]:
            if view[-1] > 1:
                w = w.reshape(-1, view[-1]) @ np.ones(view[-1])
            view, kept = view[:-1], kept[:-1]
        p = 0
        while p < len(view):  # middle blocks, first to last: the batch (kept cells before) stays small
            if kept[p]:
                p += 1
                continue
            before = math.prod(view[:p])
            w = np.matmul(np.ones(view[p]), w.reshape(before, view[p], -1))
            view, kept = view[:p] + view[p + 1:], kept[:p] + kept[p + 1:]
        return w.reshape(self.kshape)

    def scale(self, q: np.ndarray, f: np.ndarray) -> None:
        """``q`` times ``f`` (shaped as the kept axes) broadcast over the other axes, in place."""
        full = f.reshape(self.fshape)
        g = np.broadcast_to(full, self.fshape[:self.split] + self.shape[self.split:])
        q.reshape(self.lead_view)[...] *= g.reshape(self.lead_f + (self.inner,))


def ipf(shape: tuple[int, ...], targets: Sequence[tuple[tuple[int, ...], np.ndarray]], total: float,
        iters: int = IPF_ITERS, tol: float = IPF_TOL) -> np.ndarray:
    """Max-entropy array of ``shape`` summing to ``total`` whose marginals on the given axes match the
    targets (each target laid out in increasing axis order), by IPF from uniform."""
    q = np.full(shape, total / math.prod(shape))
    views = [(AxesView(shape, axes), np.asarray(tgt, dtype=float).reshape(tuple(shape[i] for i in axes)))
             for axes, tgt in targets]
    for _ in range(iters):
        worst = 0.0
        for view, t in views:
            m = view.marginal(q)
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.where(m > 0, t / m, 0.0)
            view.scale(q, f)
            worst = max(worst, float(np.abs(m - t).max()))
        if worst <= tol * max(total, 1.0):
            break
    return q


def top_residuals(q: np.ndarray) -> np.ndarray:
    """Top residual of each array in the batch ``q`` (B, n_1..n_k): ``sub`` along every non-batch axis."""
    for ax in range(1, q.ndim):
        q = np.take(q, range(1, q.shape[ax]), axis=ax) - np.take(q, [0], axis=ax)
    return q


def batch_ipf(targets: Sequence[np.ndarray], total: float, iters: int = IPF_ITERS, tol: float = IPF_TOL) -> np.ndarray:
    """Max-entropy arrays (B, n_1..n_k) from uniform whose sum over axis i+1 is ``targets[i]`` (B, shape
    without axis i+1), for all B at once: the independence product when k = 2, IPF above."""
    k = len(targets)
    shape = (targets[0].shape[0], targets[1].shape[1]) + tuple(targets[0].shape[1:])  # B, n_1, n_2..n_k
    if k == 2:
        return targets[1][:, :, None] * targets[0][:, None, :] / total
    q = np.full(shape, total / math.prod(shape[1:]))
    tgt = [np.expand_dims(t, i + 1) for i, t in enumerate(targets)]
    for _ in range(iters):
        worst = 0.0
        for i, t in enumerate(tgt):
            m = q.sum(axis=i + 1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                q *= np.where(m > 0, t / m, 0.0)
            worst = max(worst, float(np.abs(m - t).max()))
        if worst <= tol * max(total, 1.0):
            break
    return q


class LocalCompletion:
    """Incremental bottom-up completion of the unmeasured residuals of W↓ (see module docstring)."""

    def __init__(self, sizes: Sizes, residuals: Iterable[Clique]) -> None:
        """``residuals``: the measurable residuals of W↓ (∅ included), any order."""
        self.sizes = sizes
        res = sorted({tuple(t) for t in residuals}, key=lambda t: (len(t), t))  # no set order: seeded runs repeat
        self.order = [t for t in res if len(t) >= 2]
        self.parents: dict[Clique, list[Clique]] = {}
        known = set(res)
        for t in self.order:
            for i in range(len(t)):
                s = tuple(a for j, a in enumerate(t) if j != i)
                if s in known:
                    self.parents.setdefault(s, []).append(t)
        self.value: dict[Clique, np.ndarray] = {}  # current completed ẑ_τ of unmeasured τ

    def dirty_from(self, changed: Iterable[Clique]) -> set[Clique]:
        """Every residual of size ≥ 2 containing a changed one (transitively through the closure)."""
        out: set[Clique] = set()
        stack = [tuple(t) for t in changed]
        while stack:
            s = stack.pop()
            for p in self.parents.get(s, ()):
                if p not in out:
                    out.add(p)
                    stack.append(p)
        return out

    def update(self, z: Mapping[Clique, np.ndarray], lam: Mapping[Clique, float], changed: Iterable[Clique],
               everything: bool = False) -> list[tuple[Clique, np.ndarray]]:
        """Recompute the completions affected by ``changed`` residuals; return (τ, Δ) for the table.

        A residual measured for the first time drops its completed value (Δ = −ẑ_τ; its measurement
        arrives through the normal combine). ``everything`` recomputes all (restore from a snapshot).
        """
        changed = [tuple(t) for t in changed]
        deltas: list[tuple[Clique, np.ndarray]] = []
        for t in changed:
            old = self.value.pop(t, None)
            if old is not None and lam.get(t, 0.0) > 0:
                deltas.append((t, -old))
        dirty = set(self.order) if everything else self.dirty_from(changed)
        if not dirty:
            return deltas
        eff = self.effective(z, lam)
        total = max(float(np.asarray(z.get((), 0.0))), 1.0)
        todo = [t for t in self.order if t in dirty and lam.get(t, 0.0) <= 0]
        memo: dict[Clique, np.ndarray] = {}
        for k in sorted({len(t) for t in todo}):  # a level only needs the levels below it
            groups: dict[tuple[int, ...], list[Clique]] = {}
            for t in todo:
                if len(t) == k:
                    groups.setdefault(_shape(t, self.sizes), []).append(t)
            for batch in groups.values():
                for t, new in zip(batch, self._values(batch, eff, total, memo)):
                    old = self.value.get(t)
                    deltas.append((t, new if old is None else new - old))
                    self.value[t] = new
                    eff[t] = new
        return deltas

    def _values(self, batch: Sequence[Clique], eff: Mapping[Clique, np.ndarray], total: float,
                memo: dict[Clique, np.ndarray]) -> np.ndarray:
        """Completed top residuals of a batch of same-shape residuals (clipped sub-marginals memoised)."""
        def sub(s: Clique) -> np.ndarray:
            if s not in memo:
                memo[s] = clip_total(marginal(s, eff, self.sizes), total)
            return memo[s]

        k = len(batch[0])
        targets = [np.stack([sub(tuple(a for j, a in enumerate(t) if j != i)) for t in batch]) for i in range(k)]
        return top_residuals(batch_ipf(targets, total))

    def effective(self, z: Mapping[Clique, np.ndarray], lam: Mapping[Clique, float]) -> dict[Clique, np.ndarray]:
        """Measured z_τ where λ_τ > 0, the completed value elsewhere (absent: zero)."""
        eff = {t: v for t, v in z.items() if lam.get(t, 0.0) > 0}
        eff.update({t: v for t, v in self.value.items() if lam.get(t, 0.0) <= 0})
        return eff


def measured_cliques(z: Mapping[Clique, np.ndarray], lam: Mapping[Clique, float]) -> list[Clique]:
    """Maximal residuals τ that are measured together with every measurable subset (the model's cliques)."""
    def subsets_measured(t: Clique) -> bool:
        k = len(t)
        for mask in range((1 << k) - 1):
            s = tuple(t[i] for i in range(k) if mask >> i & 1)
            if s in lam and lam[s] <= 0:
                return False
        return True

    down = [t for t in z if t and lam.get(t, 0.0) > 0 and subsets_measured(t)]
    sets = [frozenset(t) for t in down]
    return [t for t, s in zip(down, sets) if not any(s < o for o in sets)]


def global_values(attrs: Sequence[str], z: Mapping[Clique, np.ndarray], lam: Mapping[Clique, float],
                  sizes: Sizes, unmeasured: Sequence[Clique], iters: int = GLOBAL_ITERS) -> dict[Clique, np.ndarray]:
    """Completed residuals of ``unmeasured`` from one max-entropy fit over the full domain of ``attrs``."""
    attrs = list(attrs)
    pos = {a: i for i, a in enumerate(attrs)}
    shape = _shape(tuple(attrs), sizes)
    meas = {t: v for t, v in z.items() if lam.get(t, 0.0) > 0}
    total = max(float(np.asarray(z.get((), 0.0))), 1.0)
    targets = []
    for c in measured_cliques(z, lam):
        c = tuple(sorted(c, key=pos.__getitem__))
        targets.append((tuple(pos[a] for a in c), clip_total(marginal(c, meas, sizes), total)))
    q = ipf(shape, targets, total, iters=iters)
    out = {}
    for t in unmeasured:
        axes = tuple(pos[a] for a in t)
        order = sorted(range(len(t)), key=lambda i: axes[i])
        m = AxesView(shape, sorted(axes)).marginal(q)  # axes in increasing order
        m = np.transpose(m, np.argsort(order))  # back to τ's attribute order
        out[t] = decomp(m, t, t)
    return out


__all__ = ["LocalCompletion", "clip_total", "global_values", "batch_ipf", "ipf", "marginal", "measured_cliques"]
