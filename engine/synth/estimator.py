"""The pluggable estimation step of single-table synthesis: noisy marginals → a model that samples records.

Any object with ``fit(marginals, domain, *, total, variances) -> SamplingModel`` is a
``MarginalEstimator``; a ``SamplingModel`` only needs ``sample(n, rng) -> (n × d) int codes`` in domain
column order. The default ``TreeEstimator`` makes the marginals consistent and fits a Chow–Liu tree.
``MbiEstimator`` plugs in Private-PGM (the optional ``mbi`` package) when it is installed: it fits a
graphical model to the same measurements by maximum likelihood and samples from it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.synth.consistency import make_consistent
from privcube.synth.jt_fit import JunctionTreeEstimator
from privcube.synth.tree_model import TreeModel

Clique = tuple[str, ...]


@runtime_checkable
class SamplingModel(Protocol):
    """A fitted model that draws synthetic records."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records as an (n × d) integer array, columns in domain order."""
        ...


@runtime_checkable
class MarginalEstimator(Protocol):
    """Turns noisy marginal estimates (post-processing only) into a ``SamplingModel``."""

    def fit(self, marginals: Mapping[Clique, np.ndarray], domain: Domain, *, total: float | None = None,
            variances: Mapping[Clique, float] | None = None) -> SamplingModel:
        """Fit a model to ``marginals`` (clique -> counts, clique-shaped or flat C order)."""
        ...


class TreeEstimator:
    """Default estimator: consistency post-processing, then a maximum-spanning-tree model on MI."""

    def __init__(self, rounds: int = 10) -> None:
        """``rounds`` of consistency/non-negativity alternation."""
        self.rounds = int(rounds)

    def fit(self, marginals: Mapping[Clique, np.ndarray], domain: Domain, *, total: float | None = None,
            variances: Mapping[Clique, float] | None = None) -> TreeModel:
        """Consistent non-negative marginals → Chow–Liu tree."""
        cons = make_consistent(marginals, domain, total=total, variances=variances, rounds=self.rounds)
        return TreeModel.fit(cons, domain)


class _MbiModel:
    """Adapter exposing an mbi model (``GraphicalModel`` or ``MarkovRandomField``) through ``sample(n, rng)``."""

    def __init__(self, model: Any, domain: Domain) -> None:
        self.model, self.domain = model, domain

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` records; mbi samples from numpy's global state, seeded here from ``rng`` and restored."""
        if n <= 0:
            return np.zeros((0, len(self.domain)), dtype=np.int64)
        state = np.random.get_state()
        np.random.seed(int(rng.integers(2**32 - 1)))
        try:
            ds = self.model.synthetic_data(rows=n)
        finally:
            np.random.set_state(state)
        cols = ds.to_dict() if hasattr(ds, "to_dict") else ds.df  # mbi >= 1: dict of arrays; older: .df
        return np.column_stack([np.asarray(cols[a]) for a in self.domain.attributes]).astype(np.int64)


class MbiEstimator:
    """Private-PGM (the optional package ``mbi``) as the estimator: a graphical model fitted to the marginals.

    mbi >= 1 (PyPI): ``mbi.estimation.mirror_descent`` on ``LinearMeasurement``s; older releases:
    ``FactoredInference``. Each marginal is an identity measurement with its noise standard deviation.
    """

    def __init__(self, iters: int = 1000) -> None:
        """Fail early with a clear message when mbi is absent."""
        try:
            import mbi  # noqa: F401
        except ImportError:
            raise ConfigError("synth estimator 'mbi' needs the optional package 'mbi' (Private-PGM); "
                              "install it or use estimator 'tree'") from None
        self.iters = int(iters)

    def fit(self, marginals: Mapping[Clique, np.ndarray], domain: Domain, *, total: float | None = None,
            variances: Mapping[Clique, float] | None = None) -> SamplingModel:
        """Identity measurements (y, σ, clique) → mbi's estimator → a model that samples records."""
        import mbi

        meas = []
        for c, y in marginals.items():
            c = tuple(c)
            y = np.asarray(y, dtype=float).reshape(domain.shape_of(c))
            if c != domain.canonical(c):  # mbi orders a clique's axes as its domain does
                cc = domain.canonical(c)
                y, c = np.transpose(y, [c.index(a) for a in cc]), cc
            sd = float(np.sqrt((variances or {}).get(c, 1.0)))
            meas.append((c, y.ravel(), sd))
        dom = mbi.Domain(list(domain.attributes), list(domain.shape))
        if hasattr(mbi, "FactoredInference"):  # legacy API (private-pgm before mbi 1.0)
            from scipy import sparse

            engine = mbi.FactoredInference(dom, iters=self.iters)
            model = engine.estimate([(sparse.eye(y.size), y, sd, c) for c, y, sd in meas], total=total)
        else:
            from mbi import estimation

            lm = [mbi.LinearMeasurement(y, c, stddev=sd) for c, y, sd in meas]
            model = estimation.mirror_descent(dom, lm, known_total=total, iters=self.iters)
        return _MbiModel(model, domain)


ESTIMATORS = ("junction-tree", "tree", "mbi")
DEFAULT_ESTIMATOR = "junction-tree"


def get_estimator(spec: Any, **options: Any) -> MarginalEstimator:
    """An estimator from a name ('junction-tree', 'tree', 'mbi') or an object implementing the protocol.

    ``options`` go to the junction-tree estimator (``max_cells``); the others take none."""
    if spec is None:
        spec = DEFAULT_ESTIMATOR
    if spec == "junction-tree":
        return JunctionTreeEstimator(**options)
    if spec == "tree":
        return TreeEstimator()
    if spec == "mbi":
        return MbiEstimator()
    if isinstance(spec, MarginalEstimator):
        return spec
    raise ConfigError(f"synth: unknown estimator {spec!r}; use 'junction-tree', 'tree', 'mbi' or an object "
                      "with fit(...)")


__all__ = ["SamplingModel", "MarginalEstimator", "TreeEstimator", "MbiEstimator", "JunctionTreeEstimator",
           "get_estimator", "ESTIMATORS", "DEFAULT_ESTIMATOR"]
