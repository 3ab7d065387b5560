"""The consistency operator of :mod:`privcube.postprocess.consistency` on one flat vector of all cells.

Every clique's cells are concatenated into one vector; every τ of the closure gets a block of a second
vector holding its full τ-marginal. Two sparse matrices, built once, replace the per-clique Python loops:
``down`` sums each clique's cells into its τ-marginals (weighted by a_cτ), ``up`` broadcasts each τ's
centred component back into the cliques holding it (÷ ∏_{c∖τ} n). Centring (Recon∘Decomp = subtract the
mean along every axis of τ) runs once per group of τ of one shape. One weighted least-squares projection
onto consistent marginals is then two sparse products: cheap enough to iterate (ADMM in :mod:`lnn`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp

from privcube.postprocess.problem import Clique, MarginalProblem


class FlatOperator:
    """Index maps of a :class:`MarginalProblem` for vectorised projections (see module docstring)."""

    def __init__(self, prob: MarginalProblem) -> None:
        self.prob = prob
        self.cliques = list(prob.cliques)
        self.c_off = np.cumsum([0] + [prob.y[c].size for c in self.cliques])
        # τ blocks ordered by shape, so that each shape group is one contiguous slice (centred as a view)
        self.closure = sorted(prob.closure, key=lambda t: (len(t), tuple(prob.domain.shape_of(t))))
        sizes = [math.prod(prob.domain.shape_of(t)) for t in self.closure]
        self.t_off = dict(zip(self.closure, np.cumsum([0] + sizes).tolist()))
        self.n_tau = int(sum(sizes))
        cols, pairs, counts = [], [], []
        self.pairs: list[tuple[Clique, Clique]] = []
        for c in self.cliques:  # CSR of `up` built row by row (cell-major): no sort of the 8·cells entries
            shape = prob.domain.shape_of(c)
            coords = np.indices(shape).reshape(len(shape), math.prod(shape))
            block = np.empty((coords.shape[1], len(prob.subs[c])), dtype=np.int64)
            for j, t in enumerate(prob.subs[c]):
                block[:, j] = self.t_off[t] + (np.ravel_multi_index(tuple(coords[[c.index(a) for a in t]]),
                                                                    prob.domain.shape_of(t)) if t else 0)
            cols.append(block.reshape(-1))
            pairs.append(np.tile(np.arange(len(self.pairs), len(self.pairs) + block.shape[1]), block.shape[0]))
            counts.append(np.full(block.shape[0], block.shape[1], dtype=np.int64))
            self.pairs.extend((c, t) for t in prob.subs[c])
        n_cells = int(self.c_off[-1])
        self._indices = np.concatenate(cols)
        self._indptr = np.concatenate([[0], np.cumsum(np.concatenate(counts))])
        self._pid = np.concatenate(pairs)
        self._shape = (n_cells, self.n_tau)
        inv_ratio = np.array([1.0 / prob.ratio[k] for k in self.pairs])
        self.up = sp.csr_matrix((inv_ratio[self._pid], self._indices, self._indptr), shape=self._shape)
        self._groups = self._shape_groups()
        self.cell_weight = np.concatenate([np.full(prob.y[c].size, prob.weight[c]) for c in self.cliques])

    def _shape_groups(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """(start, stop, (k, *shape)) per shape of the non-empty τ: contiguous slices of the τ vector."""
        by: dict[tuple[int, ...], list[int]] = {}
        for t in self.closure:
            if t:
                by.setdefault(tuple(self.prob.domain.shape_of(t)), []).append(int(self.t_off[t]))
        out = []
        for s, offs in by.items():
            n = math.prod(s)
            assert offs == list(range(offs[0], offs[0] + n * len(offs), n))  # contiguous by construction
            out.append((offs[0], offs[0] + n * len(offs), (len(offs),) + s))
        return out

    def down(self, coef: Mapping[tuple[Clique, Clique], float]) -> sp.csr_matrix:
        """The matrix x ↦ Σ_c a_cτ·(x_c summed to τ), stacked over τ."""
        a = np.array([coef[k] for k in self.pairs])
        return sp.csr_matrix((a[self._pid], self._indices, self._indptr), shape=self._shape).T  # CSC

    def mass(self, coef: Mapping[tuple[Clique, Clique], float]) -> np.ndarray:
        """Σ_c a_cτ per τ, repeated over τ's cells (positive where τ is held by some clique)."""
        m: dict[Clique, float] = {}
        for k in self.pairs:
            m[k[1]] = m.get(k[1], 0.0) + coef[k]
        out = np.ones(self.n_tau)
        for t in self.closure:
            out[self.t_off[t]:self.t_off[t] + math.prod(self.prob.domain.shape_of(t))] = m[t]
        return out

    def center(self, v: np.ndarray, total: float | None = None, copy: bool = True) -> np.ndarray:
        """Each τ block minus its means along every axis (the τ-component); the total block is kept or
        set to ``total``; ``copy=False`` overwrites ``v``."""
        out = v.copy() if copy else v
        for start, stop, shape in self._groups:
            blk = out[start:stop].reshape(shape)
            for ax in range(1, blk.ndim):
                blk -= blk.mean(axis=ax, keepdims=True)
        if total is not None:
            out[self.t_off[()]] = float(total)
        return out

    def pack(self, arrays: Mapping[Clique, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(arrays[c], dtype=float).reshape(-1) for c in self.cliques])

    def unpack(self, x: np.ndarray) -> dict[Clique, np.ndarray]:
        return {c: x[self.c_off[i]:self.c_off[i + 1]].reshape(self.prob.domain.shape_of(c)).copy()
                for i, c in enumerate(self.cliques)}


__all__ = ["FlatOperator"]
