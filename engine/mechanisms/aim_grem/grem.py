"""GReM-MLE state (AIM+GReM Alg. 3, Prop. 4.2): residual estimates, precisions, marginal estimates.

For every residual τ in the downward closure W↓ we keep the inverse-variance weighted estimate z_τ
and its precision λ_τ (z_τ has noise covariance V_τ/λ_τ; an unmeasured τ has z_τ = 0, λ_τ = 0). The
marginal estimate of a clique γ is μ̂_γ = Σ_{τ⊆γ} Recon(z_τ, τ, γ). Marginal estimates are kept for a
chosen set of cliques (the workload W and every selection candidate in W↓ \\ {∅}) in a *table*
that also holds the true marginals used by selection scores, so the heavy arrays can live in memory
(:class:`LocalMarginals`) or on dask workers (shards of it, through the run context's ``sharded-marginals`` kernel).
When a residual changes, ``lazy`` adds Recon(z' − z, τ, γ) into each kept γ ⊇ τ; ``full`` rebuilds every
kept γ from all its residuals. Both give the same estimates up to round-off.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from privcube.core.errors import ConfigError, DomainError
from privcube.core.residuals import Sizes, axis_center, recon_add, residual_shape, size_of, subsets, v_coef

Clique = tuple[str, ...]
UPDATES = ("lazy", "full")


def measurable(tau: Sequence[str], sizes: Sizes) -> bool:
    """Whether τ has a non-empty residual (all its attributes have size ≥ 2)."""
    return all(size_of(sizes, a) >= 2 for a in tau)


def residual_subsets(gamma: Sequence[str], sizes: Sizes) -> list[Clique]:
    """Subsets of γ with a non-empty residual, by size then γ order."""
    return [t for t in subsets(tuple(gamma)) if measurable(t, sizes)]


def reconstruct(gamma: Clique, z: Mapping[Clique, np.ndarray], sizes: Sizes) -> np.ndarray:
    """GReM-MLE step 2 for one clique: Σ_{τ⊆γ} Recon(z_τ, τ, γ) (absent τ contribute zero)."""
    out = np.zeros(tuple(size_of(sizes, a) for a in gamma), dtype=float)
    for t in residual_subsets(gamma, sizes):
        zt = z.get(t)
        if zt is not None:
            recon_add(out, zt, t, gamma, sizes)
    return out


def apply_deltas(mu: Mapping[Clique, np.ndarray], deltas: Sequence[tuple[Clique, np.ndarray]], sizes: Sizes) -> None:
    """Lazy update (Prop. 4.2): μ̂_γ += Recon(Δz_τ, τ, γ) for every γ in ``mu`` with τ ⊆ γ, in place."""
    for g, arr in mu.items():
        gs = set(g)
        for t, dz in deltas:
            if gs.issuperset(t):
                recon_add(arr, dz, t, g, sizes)


def l1_errors(truth: Mapping[Clique, np.ndarray], mu: Mapping[Clique, np.ndarray],
              cliques: Sequence[Clique]) -> np.ndarray:
    """‖μ_γ − μ̂_γ‖₁ for each clique (the selection score's data term)."""
    return np.array([float(np.abs(truth[c] - mu[c]).sum()) for c in cliques], dtype=float)


class MarginalTable(Protocol):
    """Holds true marginals and estimates of the kept cliques; answers scores and applies updates."""

    cliques: list[Clique]

    def apply(self, deltas: Sequence[tuple[Clique, np.ndarray]]) -> None:
        """Lazy update with the residual changes of one round."""

    def rebuild(self, z: Mapping[Clique, np.ndarray]) -> None:
        """Full GReM-MLE: recompute every kept estimate from the residual estimates."""

    def get(self, gamma: Clique) -> np.ndarray:
        """A copy of the current estimate of a kept clique."""

    def l1_errors(self, cliques: Sequence[Clique]) -> np.ndarray:
        """‖μ_γ − μ̂_γ‖₁ per clique."""

    def snapshot(self) -> dict[Clique, np.ndarray]:
        """All estimates (for answers and checkpoints)."""

    def noisy(self, requests: Sequence[tuple[Clique, Sequence[Any], float]], noise: Any) -> list[np.ndarray]:
        """Noisy marginals μ_c + N(0, σ²) (noise drawn as ``noise.gaussian(key, shape, σ)``), one per
        request (clique c in the table, noise key, σ), computed where the true marginals are."""

    def load(self, mu: Mapping[Clique, np.ndarray]) -> None:
        """Replace the estimates (resume from a checkpoint)."""

    def close(self) -> None:
        """Release any remote resources."""


class LocalMarginals:
    """In-memory marginal table (numpy, float64 estimates)."""

    STACK_CELLS = 256  # l1_errors: cliques up to this many cells are scored together

    def __init__(self, sizes: Sizes, cliques: Iterable[Clique], truth: Mapping[Clique, np.ndarray] | None) -> None:
        """Zero estimates for ``cliques``; ``truth`` (exact marginals) is needed only for scores."""
        self.sizes = sizes
        self.cliques = list(cliques)
        self.truth = truth
        self.mu = {c: np.zeros(tuple(size_of(sizes, a) for a in c), dtype=float) for c in self.cliques}
        self._index: dict[Clique, list[Clique]] = {}
        for c in self.cliques:
            for t in residual_subsets(c, sizes):
                self._index.setdefault(t, []).append(c)
        self._lift_plans: dict[Clique, list[tuple[Clique, Clique, tuple[Any, ...], float]]] = {}
        self._l1_groups: tuple[Any, list[Clique], list[Any]] | None = None  # (truth, cliques, stacked groups)

    def containing(self, tau: Clique) -> list[Clique]:
        """Kept cliques γ ⊇ τ (the inverted index of the lazy update)."""
        return self._index.get(tuple(tau), [])

    def _lifts(self, tau: Clique) -> list[tuple[Clique, Clique, tuple[Any, ...], float]]:
        """Per kept γ ⊇ τ: (γ, τ in γ's order, the index lifting τ's axes to γ's, 1/∏_{γ∖τ} n) -- what
        ``recon_add`` derives on every call, computed once per τ."""
        plans = self._lift_plans
        got = plans.get(tau)
        if got is None:
            got = []
            for g in self._index.get(tau, ()):
                pos = [i for i, a in enumerate(g) if a in tau]
                shape = [size_of(self.sizes, a) for a in g]
                idx = tuple(slice(None) if i in pos else None for i in range(len(g)))
                got.append((g, tuple(g[i] for i in pos), idx,
                            1.0 / math.prod(n for i, n in enumerate(shape) if i not in pos)))
            plans[tau] = got
        return got

    def apply(self, deltas: Sequence[tuple[Clique, np.ndarray]]) -> None:
        """Lazy update: only the kept cliques that contain a changed residual are touched.

        Each γ gets ``recon_add``'s update, μ̂_γ += Recon(Δz_τ, τ, γ) (the centred Δz lifted to γ's axes
        over ∏_{γ∖τ} n), with the centring done once per τ rather than once per γ: the same arithmetic.
        """
        for t, dz in deltas:
            t = tuple(t)
            centred: dict[Clique, np.ndarray] = {}
            for g, tg, idx, scale in self._lifts(t):
                m = centred.get(tg)
                if m is None:
                    m = np.asarray(dz)
                    if m.shape != residual_shape(tg, self.sizes):
                        recon_add(self.mu[g], dz, t, g, self.sizes)  # raises the shape error
                    for ax in range(m.ndim):
                        m = axis_center(m, ax)
                    centred[tg] = m = np.asarray(m)
                self.mu[g] += m[idx] * scale

    def rebuild(self, z: Mapping[Clique, np.ndarray]) -> None:
        """Full reconstruction of every kept clique."""
        for c in self.cliques:
            self.mu[c] = reconstruct(c, z, self.sizes)

    def get(self, gamma: Clique) -> np.ndarray:
        """Copy of the estimate of ``gamma``."""
        return self.mu[tuple(gamma)].copy()

    def l1_errors(self, cliques: Sequence[Clique]) -> np.ndarray:
        """‖μ_γ − μ̂_γ‖₁ per clique. Small cliques (≤ ``STACK_CELLS`` cells) with the same number of cells are
        rows of one array, each row summed as the clique alone would be: the values of :func:`l1_errors`
        without a dozen numpy calls per clique (their true marginals are stacked once; a few KiB)."""
        if self.truth is None:
            raise ConfigError("marginal table has no true marginals; scores cannot be computed")
        cached = self._l1_groups
        if cached is None or cached[0] is not self.truth or cached[1] != cliques:
            by_size: dict[int, list[int]] = {}
            for i, c in enumerate(cliques):
                n = int(np.asarray(self.truth[c]).size)
                by_size.setdefault(n if n <= self.STACK_CELLS else -1 - i, []).append(i)
            groups = [(np.array(ix), [cliques[i] for i in ix],
                       np.stack([np.asarray(self.truth[cliques[i]]).reshape(-1) for i in ix]) if n >= 0 else None)
                      for n, ix in by_size.items()]
            cached = self._l1_groups = (self.truth, list(cliques), groups)
        out = np.empty(len(cliques))
        for ix, cs, truth in cached[2]:
            if truth is None:
                out[ix] = l1_errors(self.truth, self.mu, cs)
            else:
                out[ix] = np.abs(truth - np.stack([self.mu[c].reshape(-1) for c in cs])).sum(axis=1)
        return out

    def snapshot(self) -> dict[Clique, np.ndarray]:
        """The estimates themselves (not copies)."""
        return self.mu

    def noisy(self, requests: Sequence[tuple[Clique, Sequence[Any], float]], noise: Any) -> list[np.ndarray]:
        """μ_c + Gaussian noise (``noise.add_gaussian(key, μ_c, σ)``) per (c, key, σ): the only release of the
        true marginals."""
        if self.truth is None:
            raise ConfigError("marginal table has no true marginals; nothing can be measured")
        out = []
        for c, key, sigma in requests:
            mu = self.truth[tuple(c)]
            out.append(noise.add_gaussian(key, mu, sigma))  # a discrete source checks μ is integer
        return out

    def load(self, mu: Mapping[Clique, np.ndarray]) -> None:
        """Replace estimates, checking shapes."""
        for c in self.cliques:
            arr = np.asarray(mu[c], dtype=float)
            if arr.shape != self.mu[c].shape:
                raise DomainError(f"estimate of {list(c)} has shape {arr.shape}, expected {self.mu[c].shape}")
            self.mu[c] = arr.copy()

    def close(self) -> None:
        """Nothing to release."""


class GReMState:
    """Residual estimates z_τ and precisions λ_τ over W↓, plus a table of marginal estimates."""

    def __init__(self, sizes: Sizes, residuals: Iterable[Clique], table: MarginalTable, update: str = "lazy") -> None:
        """Zero estimates and precisions for every measurable residual in ``residuals``."""
        if update not in UPDATES:
            raise ConfigError(f"update must be one of {UPDATES}, got {update!r}")
        self.sizes = sizes
        self.update = update
        self.residuals = [tuple(t) for t in residuals if measurable(t, sizes)]
        self.z: dict[Clique, np.ndarray] = {t: np.zeros(residual_shape(t, sizes)) for t in self.residuals}
        self.lam: dict[Clique, float] = {t: 0.0 for t in self.residuals}
        self.table = table
        self.table_cells = sum(math.prod(size_of(sizes, a) for a in c) for c in table.cliques)
        self._kept = set(table.cliques)
        self._pending: list[tuple[Clique, np.ndarray]] = []
        self.journal: list[tuple[Clique, np.ndarray, float]] | None = None  # set to [] to record combines
        self.completion: Any = None  # a completion.LocalCompletion: unmeasured residuals get implied values

    def use_completion(self, completion: Any) -> None:
        """Fill unmeasured residuals with ``completion``'s implied values from now on (before any combine)."""
        self.completion = completion

    def effective(self) -> dict[Clique, np.ndarray]:
        """The residual estimates the marginals are built from: measured z_τ, completed values elsewhere."""
        if self.completion is None:
            return self.z
        return self.completion.effective(self.z, self.lam)

    def recomplete(self) -> None:
        """Recompute every completed value from the current z, λ WITHOUT touching the table (whose
        estimates, restored from a snapshot, already contain them): same values as the run's."""
        if self.completion is not None:
            self.completion.value = {}
            self.completion.update(self.z, self.lam, [], everything=True)

    def set_completed(self, values: Mapping[Clique, np.ndarray]) -> None:
        """Replace the completed values of unmeasured residuals (e.g. by a global fit) and update the table."""
        if self.completion is None:
            raise ConfigError("set_completed needs a completion (completion: zero keeps unmeasured residuals at 0)")
        self.flush()
        deltas = []
        for t, v in values.items():
            if self.lam.get(t, 0.0) > 0:
                continue
            old = self.completion.value.get(t)
            deltas.append((t, v if old is None else v - old))
            self.completion.value[t] = v
        if self.update == "lazy":
            self.table.apply(deltas)
        else:
            self.table.rebuild(self.effective())

    def take_journal(self) -> list[tuple[Clique, np.ndarray, float]]:
        """The (τ, measurement, σ²) combined since the last call, in order (empty unless journaling)."""
        out = self.journal or []
        if self.journal is not None:
            self.journal = []
        return out

    def replay(self, batches: Iterable[Sequence[tuple[Clique, np.ndarray, float]]]) -> None:
        """Re-combine journaled measurements, batch by batch, exactly as the run did.

        Combining the same measurements in the same order reproduces z_τ and λ_τ bit for bit; the lazy
        update adds the same Δz into each kept marginal in the same order (a flush per batch bounds the
        pending memory), and the full update rebuilds once at the end from the same z.
        """
        for batch in batches:
            for tau, z_new, sigma2 in batch:
                self.combine(tau, z_new, sigma2)
            if self.update == "lazy":
                self.flush()
        self.flush()

    def combine(self, tau: Clique, z_new: np.ndarray, sigma2: float) -> np.ndarray:
        """Inverse-variance combine a measurement (variance σ² V_τ) into z_τ; return Δz = z' − z."""
        tau = tuple(tau)
        if tau not in self.z:
            raise DomainError(f"residual {list(tau)} is not in the downward closure being tracked")
        if not (math.isfinite(sigma2) and sigma2 > 0):
            raise ConfigError(f"measurement variance sigma2 must be positive and finite, got {sigma2!r}")
        z_new = np.asarray(z_new, dtype=float)
        if z_new.shape != self.z[tau].shape:
            raise DomainError(f"measurement of {list(tau)} has shape {z_new.shape}, expected {self.z[tau].shape}")
        prec = 1.0 / sigma2
        lam = self.lam[tau]
        z_old = self.z[tau]
        z_upd = (lam * z_old + prec * z_new) / (lam + prec)
        delta = z_upd - z_old
        self.z[tau] = z_upd
        self.lam[tau] = lam + prec
        self._pending.append((tau, delta))
        if self.journal is not None:
            self.journal.append((tau, z_new, float(sigma2)))
        return delta

    def flush(self) -> None:
        """Propagate pending residual changes to the marginal table (lazy or full)."""
        if not self._pending:
            return
        if self.completion is not None:
            changed = list(dict.fromkeys(t for t, _ in self._pending))
            self._pending.extend(self.completion.update(self.z, self.lam, changed))
        if self.update == "lazy":
            self.table.apply(self._pending)
        else:
            self.table.rebuild(self.effective())
        self._pending = []

    def estimate(self, gamma: Clique) -> np.ndarray:
        """Current μ̂_γ: from the table if kept, else reconstructed from the residuals."""
        gamma = tuple(gamma)
        self.flush()
        if gamma in self._kept:
            return self.table.get(gamma)
        return reconstruct(gamma, self.effective(), self.sizes)

    def variance(self, gamma: Clique) -> float:
        """Per-cell noise variance of μ̂_γ: Σ_{measured τ⊆γ} v_τ/λ_τ (unmeasured τ are biased, not noisy)."""
        out = 0.0
        for t in residual_subsets(gamma, self.sizes):
            lam = self.lam.get(t, 0.0)
            if lam > 0:
                out += v_coef(t, gamma, self.sizes) / lam
        return out

    def unmeasured(self, gamma: Clique) -> list[Clique]:
        """Residuals of γ never measured (estimated as zero, or by the completion when one is set)."""
        return [t for t in residual_subsets(gamma, self.sizes) if self.lam.get(t, 0.0) == 0.0]


__all__ = ["GReMState", "LocalMarginals", "MarginalTable", "UPDATES", "apply_deltas", "l1_errors",
           "measurable", "reconstruct", "residual_subsets"]
