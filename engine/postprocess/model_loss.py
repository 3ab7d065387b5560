"""The measurements' loss on a junction-tree model, L(μ) = Σ_τ (λ_τ/2)·‖C_τ μ_τ − R_τ‖², its gradient,
and the map from the fit's parameters to the cliques' log-potentials.

Each residual τ is read in the smallest clique that holds it (its home). A clique reads its residuals in
one of two ways, whichever costs less for it:

* ``projected``: each residual's marginal is summed from the smallest larger table already summed
  (:func:`projection_plan`); the parameters are one log-potential table per residual (centred, so a
  residual's potential moves only its own interaction); tables are broadcast back along the same plan.
  Cheap when a large clique holds few residuals.
* ``transformed``: the clique table is taken to an orthonormal basis, one Helmert matrix per axis (first
  row the mean, the rest an orthonormal basis of the centred vectors), where the τ-interaction of every
  τ ⊆ C is one block of coefficients; the loss is a weighted sum of squares over the measured blocks and
  the parameters are the coefficients themselves (one array per clique). Cheap when a clique of small
  attributes holds many residuals (all 3-way residuals of 16 binary attributes: a few axis products
  instead of hundreds of projections).
"""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from privcube.postprocess.measurements import ResidualStats, center
from privcube.synth.factor_ops import expand_idx, project_idx
from privcube.synth.junction_tree import JunctionTree

Idx = tuple[int, ...]
Key = tuple  # a residual (tuple of attribute indices) or ("transform", clique index)

#: cost of one numpy call, in multiply-adds (chooses between the two ways of reading a clique)
CALL_COST = 5_000
#: intermediate tables are planned only for cliques holding at most this many top-level residuals
MAX_GROUPED = 64


def projection_plan(clique: Idx, terms: Sequence[Idx], sizes: Sequence[int]) -> list[tuple[Idx, Idx | None]]:
    """How to sum a clique table down to every term: (table, the table it is summed from or None for the
    clique), larger tables first. A term is summed from the smallest larger term; terms that only the
    clique holds are grouped, smallest union first, into intermediate tables (their unions) while a union
    is at most a quarter of the clique, so the clique itself is read once per group, not once per term."""
    cells = {t: math.prod(sizes[a] for a in t) for t in terms}
    order = sorted(terms, key=lambda t: (-cells[t], t))
    parent: dict[Idx, Idx | None] = {}
    for k, t in enumerate(order):
        sup = [q for q in order[:k] if set(t) < set(q)]
        parent[t] = min(sup, key=lambda q: cells[q]) if sup else None
    limit = math.prod(sizes[a] for a in clique) / 4.0
    tops = [t for t in order if parent[t] is None]
    while 1 < len(tops) <= MAX_GROUPED:
        best = None
        for a, b in itertools.combinations(tops, 2):
            u = tuple(sorted(set(a) | set(b)))
            size = math.prod(sizes[x] for x in u)
            if size <= limit and (best is None or size < best[0]):
                best = (size, a, b, u)
        if best is None:
            break
        size, a, b, u = best
        if u in parent:  # the union is already a table (a term): hang the other under it
            kid = b if u == a else a
            parent[kid] = u
            tops.remove(kid)
            continue
        cells[u] = size
        parent[u], parent[a], parent[b] = None, u, u
        tops = [t for t in tops if t not in (a, b)] + [u]
    rank = {t: k for k, t in enumerate(sorted(parent, key=lambda t: (-cells[t], t)))}
    return sorted(((t, parent[t]) for t in parent), key=lambda tp: rank[tp[0]])


@functools.lru_cache(maxsize=256)
def helmert(n: int) -> np.ndarray:
    """An orthonormal n × n matrix: row 0 is 1/√n, rows 1.. span the centred vectors."""
    h = np.zeros((n, n))
    h[0] = 1.0 / math.sqrt(n)
    for k in range(1, n):
        h[k, :k] = 1.0
        h[k, k] = -float(k)
        h[k] /= math.sqrt(k * (k + 1))
    return h


def transform(x: np.ndarray, inverse: bool = False) -> np.ndarray:
    """(⊗ H_i) x, or its inverse (⊗ H_iᵀ) x, one axis at a time (each axis a batched product with the
    table seen as (before, n, after); a two-valued axis as a sum and a difference)."""
    out = np.asarray(x, dtype=float)
    shape = out.shape
    for ax, n in enumerate(shape):
        view = out.reshape(math.prod(shape[:ax]), n, math.prod(shape[ax + 1:]))
        if n == 2:  # H = H^T = [[1, 1], [1, -1]] / sqrt(2)
            a, b = view[:, 0, :], view[:, 1, :]
            nxt = np.empty_like(view)
            np.add(a, b, out=nxt[:, 0, :])
            np.subtract(a, b, out=nxt[:, 1, :])
            nxt *= _SQRT_HALF
        elif n > 1:
            h = helmert(n)
            nxt = np.matmul(h.T if inverse else h, view)
        else:
            continue
        out = nxt.reshape(shape)
    return out


_SQRT_HALF = math.sqrt(0.5)


class _Transformed:
    """One clique read in the Helmert basis: weights Λ and targets P on the measured blocks, so that the
    clique's part of L is ½·Σ Λ (W − P)² with W the clique table's coefficients (counts)."""

    def __init__(self, clique: Idx, shape: tuple[int, ...], terms: dict[Idx, tuple[np.ndarray, float]]) -> None:
        self.terms = list(terms)
        self.weight = np.zeros(shape)
        self.target = np.zeros(shape)
        for tau, (r, lam) in terms.items():
            block = tuple(slice(1, None) if a in tau else slice(0, 1) for a in clique)
            scale = math.prod(math.sqrt(n) for a, n in zip(clique, shape) if a not in tau)
            rho = r
            for ax, a in enumerate(tau):  # the reading in the basis: H_iᶜ along each of τ's axes
                rho = np.moveaxis(np.tensordot(helmert(shape[clique.index(a)])[1:], rho, axes=([1], [ax])), 0, ax)
            self.weight[block] = lam * scale * scale
            self.target[block] = expand_idx(rho / scale, tau, clique)


class ModelLoss:
    """L(μ), its gradient with respect to the fit's parameters, and the clique log-potentials of given
    parameters (see the module's docstring for the two ways a clique is read)."""

    def __init__(self, stats: ResidualStats, tree: JunctionTree, total: float, reading: str = "auto") -> None:
        """``reading``: ``auto`` (each clique the cheaper way), ``projected`` or ``transformed`` (every clique)."""
        self.total = total
        self.cliques = tree.cliques
        sizes = stats.domain.shape
        self.shapes = [tuple(sizes[a] for a in c) for c in tree.cliques]
        by_home: dict[int, dict[Idx, tuple[np.ndarray, float]]] = {}
        for tau in stats.taus:
            idx = stats.index(tau)
            homes = [i for i, c in enumerate(tree.cliques) if set(idx) <= set(c)]
            if not homes:
                continue
            r = stats.reading(tau)  # expanded only for the residuals inside the model
            home = min(homes, key=lambda i: math.prod(sizes[a] for a in tree.cliques[i]))
            srt = tuple(sorted(idx))
            arr = np.transpose(r, [idx.index(a) for a in srt]) if srt != idx else r
            by_home.setdefault(home, {})[srt] = (np.ascontiguousarray(arr), stats.precision[tau])
        #: projected cliques: (table, its source table or None for the clique, (R_τ, λ_τ) or None for an
        #: intermediate table), larger tables first
        self.plan: dict[int, list[tuple[Idx, Idx | None, tuple[np.ndarray, float] | None]]] = {}
        self.transformed: dict[int, _Transformed] = {}
        for home, terms in by_home.items():
            clique, cells = tree.cliques[home], math.prod(self.shapes[home])
            transformed = 2 * cells * sum(self.shapes[home]) + 6 * cells + 4 * CALL_COST * len(clique)
            if reading == "transformed" or (reading == "auto" and transformed < 6 * CALL_COST * len(terms)):
                self.transformed[home] = _Transformed(clique, self.shapes[home], terms)  # no plan needed
                continue
            rows = [(t, src, terms.get(t)) for t, src in projection_plan(clique, list(terms), sizes)]
            projected = sum(2 * cells for _, src, _ in rows if src is None) + 6 * CALL_COST * len(rows)
            if reading == "auto" and transformed < projected:
                self.transformed[home] = _Transformed(clique, self.shapes[home], terms)
            else:
                self.plan[home] = rows
        self.terms = [(home, tau, r, lam) for home, terms in by_home.items() for tau, (r, lam) in terms.items()]

    def zeros(self) -> dict[Key, np.ndarray]:
        """Parameters of the uniform distribution."""
        out: dict[Key, np.ndarray] = {tau: np.zeros_like(m[0]) for rows in self.plan.values()
                                      for tau, _, m in rows if m is not None}
        out.update({("transform", home): np.zeros(self.shapes[home]) for home in self.transformed})
        return out

    def __call__(self, beliefs: Sequence[np.ndarray]) -> tuple[float, dict[Key, np.ndarray], dict[Key, np.ndarray]]:
        """(L, its gradient per parameter, the model's reading per parameter: τ-marginals in counts, or a
        clique's coefficients; ⟨gradient, reading difference⟩ is the loss's linear change)."""
        loss = 0.0
        grads: dict[Key, np.ndarray] = {}
        reads: dict[Key, np.ndarray] = {}
        for home, rows in self.plan.items():
            c = self.cliques[home]
            for tau, src, meas in rows:
                if src is None:
                    reads[tau] = project_idx(beliefs[home], c, tau) * self.total
                else:
                    reads[tau] = project_idx(reads[src], src, tau)
                if meas is not None:
                    r, lam = meas
                    d = center(reads[tau]) - r
                    loss += 0.5 * lam * float(np.sum(d * d))
                    grads[tau] = lam * d
        for home, t in self.transformed.items():
            key = ("transform", home)
            w = transform(beliefs[home] * self.total)
            d = w - t.target
            g = t.weight * d
            loss += 0.5 * float(np.sum(g * d))
            grads[key], reads[key] = g, w
        return loss, grads, reads

    def parameters_of(self, tables: dict[Idx, np.ndarray]) -> dict[Key, np.ndarray]:
        """Parameters whose clique log-potentials are Σ_τ tables_τ (centred τ-tables of residuals in the
        loss; others are ignored)."""
        out: dict[Key, np.ndarray] = {}
        for home, rows in self.plan.items():
            out.update({tau: tables[tau] for tau, _, meas in rows if meas is not None and tau in tables})
        for home, t in self.transformed.items():
            c = self.cliques[home]
            parts = [expand_idx(tables[tau], tau, c) for tau in t.terms if tau in tables]
            if parts:
                out[("transform", home)] = transform(np.broadcast_to(sum(parts), self.shapes[home]))
        return out

    def fold(self, tables: dict[Key, np.ndarray]) -> list[np.ndarray]:
        """Clique tables of parameters (log-potentials, or gradients in the cliques' own coordinates; absent
        parameters count as zero):
        residual tables broadcast over their clique, summed up the projection plan (each table into its
        source first, so a clique table is written once per table read from it); a transformed clique's
        coefficients taken back from the Helmert basis."""
        out = [np.zeros(self.shapes[i]) for i in range(len(self.cliques))]
        for home, rows in self.plan.items():
            acc = {tau: tables[tau] for tau, _, meas in rows if meas is not None and tau in tables}
            c = self.cliques[home]
            for tau, src, _ in reversed(rows):  # smaller tables first
                if tau not in acc:
                    continue
                if src is not None:
                    add = expand_idx(acc[tau], tau, src)
                    acc[src] = acc[src] + add if src in acc else np.broadcast_to(add, self._shape(src, home)).copy()
                else:
                    out[home] += expand_idx(acc[tau], tau, c)
        for home in self.transformed:
            if ("transform", home) in tables:
                out[home] += transform(tables[("transform", home)], inverse=True)
        return out

    def _shape(self, t: Idx, home: int) -> tuple[int, ...]:
        c = self.cliques[home]
        return tuple(self.shapes[home][c.index(a)] for a in t)


__all__ = ["CALL_COST", "MAX_GROUPED", "ModelLoss", "helmert", "projection_plan", "transform"]
