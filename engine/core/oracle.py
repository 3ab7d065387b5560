"""Marginal oracles: the one interface through which mechanisms read the private data.

A mechanism asks for exact marginals of attribute sets (cliques, in domain order) and adds noise
itself. ``ArrayOracle`` answers from in-memory records (tests, small data); the Parquet/Dask oracle
lives in ``privcube.graphs.marginals``. Optional abilities (measuring next to the data, futures on the
cluster, lazy chunked marginals) are declared as Protocols here; mechanisms use them through
:func:`measure`, :func:`marginal_futures` and :func:`lazy_marginal`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DataError

Clique = tuple[str, ...]


@runtime_checkable
class MarginalOracle(Protocol):
    """Source of EXACT (non-private) marginals; only mechanisms should call it, then add noise."""

    domain: Domain

    def marginals(self, cliques: Sequence[Clique]) -> dict[Clique, np.ndarray]:
        """Exact count arrays, one per clique, axes in the clique's order, dtype int64."""
        ...


# ------------------------------------------------------------------------------ optional abilities
# An oracle declares what more than ``marginals`` it can do by having these methods (checked with
# isinstance against the runtime-checkable Protocols below; an oracle may also subclass them to say so
# explicitly). Mechanisms ask through the functions further down, which fall back to ``marginals``.
@runtime_checkable
class MeasuringOracle(Protocol):
    """Applies a measurement next to the data: only the (noisy) outputs reach the caller."""

    def measure(self, cliques: Sequence[Clique], fn: Callable[[Clique, np.ndarray], Any]) -> dict[Clique, Any]:
        """``{c: fn(c, exact marginal of c)}``, ``fn`` run where the counts are (picklable, keyed noise)."""
        ...


@runtime_checkable
class ClusterMarginalsOracle(Protocol):
    """Leaves exact marginals on the cluster as futures, for tasks that run next to them."""

    def marginal_futures(self, cliques: Sequence[Clique]) -> dict[Clique, Any] | None:
        """``{c: future of the exact marginal}``, or None when this oracle has no cluster for them."""
        ...


@runtime_checkable
class LazyMarginalOracle(Protocol):
    """Hands one (large) exact marginal as a lazy chunked array, counted where the data is."""

    def marginal_dask(self, clique: Clique) -> Any:
        """The exact marginal of ``clique`` as a lazy chunked (dask) array, axes in the clique's order."""
        ...


def measure(oracle: MarginalOracle, cliques: Sequence[Clique],
            fn: Callable[[Clique, np.ndarray], Any]) -> dict[Clique, Any]:
    """``{c: fn(c, exact marginal)}``: where the oracle is a :class:`MeasuringOracle` (``DataOracle`` with a
    client), ``fn`` runs next to the data and only its (noisy) outputs come back to this process."""
    cliques = [tuple(c) for c in cliques]
    if isinstance(oracle, MeasuringOracle):
        return oracle.measure(cliques, fn)
    mus = oracle.marginals(cliques)
    return {c: fn(c, mus[c]) for c in cliques}


def marginal_futures(oracle: MarginalOracle, cliques: Sequence[Clique]) -> dict[Clique, Any] | None:
    """``{c: future of the exact marginal}`` left on the cluster, where the oracle is a
    :class:`ClusterMarginalsOracle` able to (a ``DataOracle`` over a dask frame with a client), else None. The
    futures are for tasks that run next to them (scores, noisy releases); never gather them to this process."""
    if not isinstance(oracle, ClusterMarginalsOracle):
        return None
    return oracle.marginal_futures([tuple(c) for c in cliques])


def lazy_marginal(oracle: MarginalOracle, clique: Clique) -> Any | None:
    """The exact marginal of ``clique`` as a lazy chunked array where the oracle is a
    :class:`LazyMarginalOracle`, else None (the caller then measures through :func:`measure`)."""
    if not isinstance(oracle, LazyMarginalOracle):
        return None
    return oracle.marginal_dask(tuple(clique))


class ArrayOracle:
    """Exact marginals of an in-memory (N × d) integer record array, columns in domain order."""

    def __init__(self, domain: Domain, records: np.ndarray) -> None:
        records = np.asarray(records)
        if records.ndim != 2 or records.shape[1] != len(domain):
            raise DataError(f"records must have shape (N, {len(domain)}), got {records.shape}")
        for j, a in enumerate(domain.attributes):
            col = records[:, j]
            bad = (col < 0) | (col >= domain.shape[j])
            if bad.any():
                raise DataError(f"column {a!r} has a value outside the domain [0, {domain.shape[j]})")
        self.domain = domain
        self.records = records.astype(np.int64, copy=False)

    @classmethod
    def from_frame(cls, domain: Domain, frame) -> ArrayOracle:  # noqa: ANN001 - pandas DataFrame
        missing = [a for a in domain.attributes if a not in frame.columns]
        if missing:
            raise DataError(f"data is missing column(s) {missing}")
        return cls(domain, frame[list(domain.attributes)].to_numpy())

    def marginals(self, cliques: Sequence[Clique]) -> dict[Clique, np.ndarray]:
        out = {}
        for c in cliques:
            c = tuple(c)
            shape = self.domain.shape_of(c)
            if not c:
                out[c] = np.array(self.records.shape[0], dtype=np.int64)
                continue
            idx = [self.domain.index(a) for a in c]
            flat = np.ravel_multi_index(tuple(self.records[:, i] for i in idx), shape)
            out[c] = np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape).astype(np.int64)
        return out
