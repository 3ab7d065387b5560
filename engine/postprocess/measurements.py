"""What a run measured, as the sufficient statistics of its Gaussian measurements: for every residual τ
measured, its value and precision (AIM+GReM Sec. 3-4; Mullins et al. 2024).

A residual τ measured as ``z_τ = Decomp(μ_τ + N(0, I/λ_τ))`` (ResidualPlanner's σ_τ² = 1/λ_τ; AIM+GReM's
consolidated z_τ with precision λ_τ) has the log-likelihood −(λ_τ/2)·‖C_τ μ_τ − R_τ‖² up to a constant,
where C_τ centres every axis of the τ-marginal and R_τ = Recon(z_τ, τ, τ) = C_τ R_τ. A marginal μ_c
released with i.i.d. noise of variance v per cell holds, for every τ ⊆ c, the independent reading
R_τ = C_τ(y_c summed to τ) with precision 1/(v·∏_{c∖τ} n); several readings of one τ are averaged by
precision (GReM-MLE's consolidation). Everything here reads released values only: no budget.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from privcube.core.domain import Domain
from privcube.postprocess.problem import Clique, measurable_subsets, project
from privcube.core.residuals import recon, residual_gram_norm

Idx = tuple[int, ...]


def center(x: np.ndarray) -> np.ndarray:
    """C_τ x: every axis of a τ-table centred to mean zero (the τ-interaction component)."""
    out = np.asarray(x, dtype=float)
    for ax in range(out.ndim):
        out = out - out.mean(axis=ax, keepdims=True)
    return out


@dataclass
class ResidualStats:
    """Residual readings (canonical τ) with precisions λ_τ, and the total. A reading is kept in the form it
    came in (Decomp form ``z_τ``, or R_τ itself) and R_τ is made on demand (:meth:`reading`): selecting the
    model needs only each residual's energy, so only the readings inside the model are ever expanded."""

    domain: Domain
    precision: dict[Clique, float] = field(default_factory=dict)
    total: float = 0.0
    total_precision: float = 0.0
    _r: dict[Clique, np.ndarray] = field(default_factory=dict, repr=False)
    _z: dict[Clique, np.ndarray] = field(default_factory=dict, repr=False)
    _energy: dict[Clique, float] = field(default_factory=dict, repr=False)

    def add(self, tau: Clique, reading: np.ndarray, precision: float) -> None:
        """Fold one more independent reading R_τ (τ-shaped, centred) into its precision-weighted average."""
        if not (precision > 0 and math.isfinite(precision)):
            return
        if not tau:
            t = self.total_precision + precision
            self.total = (self.total * self.total_precision + float(reading) * precision) / t
            self.total_precision = t
            return
        old = self.precision.get(tau, 0.0)
        lam = old + precision
        r = self.reading(tau) if old else None
        self._r[tau] = reading if r is None else (r * old + reading * precision) / lam
        self._z.pop(tau, None)
        self._energy.pop(tau, None)
        self.precision[tau] = lam

    def add_decomp(self, tau: Clique, z: np.ndarray, precision: float) -> None:
        """A residual's only reading in Decomp form (``z_τ``, axes in τ's canonical order)."""
        if tau in self.precision:
            raise ValueError(f"residual {list(tau)} has a reading already")
        self._z[tau] = np.asarray(z, dtype=float)
        self.precision[tau] = float(precision)

    @property
    def taus(self) -> list[Clique]:
        """The measured residuals (τ ≠ ∅)."""
        return list(self.precision)

    def reading(self, tau: Clique) -> np.ndarray:
        """R_τ = Recon(z_τ, τ, τ): the τ-table whose every axis is centred."""
        r = self._r.get(tau)
        if r is None:
            r = np.asarray(recon(self._z[tau], tau, tau, self.domain))
        return r

    def dof(self, tau: Clique) -> int:
        """Degrees of freedom of residual τ: ∏ (n_i − 1)."""
        return int(math.prod(self.domain[a] - 1 for a in tau))

    def energy(self, tau: Clique) -> float:
        """λ_τ‖R_τ‖² (= λ_τ z_τᵀV_τ⁻¹z_τ): χ² with dof(τ) degrees of freedom when the true τ-interaction is
        zero."""
        e = self._energy.get(tau)
        if e is None:
            if tau in self._z:
                e = float(residual_gram_norm(self._z[tau], tau, self.domain))
            else:
                e = float(np.sum(self._r[tau] ** 2))
            e *= self.precision[tau]
            self._energy[tau] = e
        return e

    def index(self, tau: Clique) -> Idx:
        return tuple(self.domain.index(a) for a in tau)


def from_residuals(domain: Domain, z: Mapping[Clique, np.ndarray], precision: Mapping[Clique, float]) -> ResidualStats:
    """Statistics of residual measurements ``z_τ`` (Decomp form, axes in τ's order) with precisions λ_τ
    (0 or absent: not measured); nothing is expanded here."""
    stats = ResidualStats(domain)
    for tau, lam in precision.items():
        lam = float(lam)
        if not lam > 0:
            continue
        t = tuple(tau)
        cc = domain.canonical(t)
        arr = np.asarray(z[tau], dtype=float)
        if not cc:
            stats.add((), float(arr), lam)
            continue
        if t != cc:
            arr = np.transpose(arr, [t.index(x) for x in cc])
        stats.add_decomp(cc, arr, lam)
    return stats


def from_marginals(domain: Domain, estimates: Mapping[Clique, np.ndarray],
                   variances: Mapping[Clique, float]) -> ResidualStats:
    """Statistics of marginals released with i.i.d. noise (per-cell variance per clique); cliques without a
    positive variance are left out."""
    stats = ResidualStats(domain)
    for c, y in estimates.items():
        v = variances.get(c)
        if v is None or not (v > 0 and math.isfinite(v)):
            continue
        cc = domain.canonical(c)
        arr = np.asarray(y, dtype=float).reshape(domain.shape_of(c))
        if tuple(c) != cc:
            arr = np.transpose(arr, [tuple(c).index(x) for x in cc])
        cells = float(arr.size)
        for tau in measurable_subsets(cc, domain):
            m = project(arr, cc, tau)
            lam = 1.0 / (v * cells / float(max(m.size, 1)))
            stats.add(tau, center(m) if tau else float(m), lam)
    return stats


__all__ = ["ResidualStats", "center", "from_marginals", "from_residuals"]
