"""Marginal oracles: the one interface through which mechanisms read the private data.

A mechanism asks for exact marginals of attribute sets (cliques, in domain order) and adds noise
itself. ``ArrayOracle`` answers from in-memory records (tests, small data); the Parquet/Dask oracle
lives in ``privcube.graphs.marginals``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privcube.domain import Domain
from privcube.errors import DataError

Clique = tuple[str, ...]


@runtime_checkable
class MarginalOracle(Protocol):
    """Source of EXACT (non-private) marginals; only mechanisms should call it, then add noise."""

    domain: Domain

    def marginals(self, cliques: Sequence[Clique]) -> dict[Clique, np.ndarray]:
        """Exact count arrays, one per clique, axes in the clique's order, dtype int64."""
        ...


def measure(oracle: MarginalOracle, cliques: Sequence[Clique],
            fn: Callable[[Clique, np.ndarray], Any]) -> dict[Clique, Any]:
    """``{c: fn(c, exact marginal)}``: where the oracle supports it (``DataOracle`` with a client),
    ``fn`` runs next to the data and only its (noisy) outputs come back to this process."""
    cliques = [tuple(c) for c in cliques]
    remote = getattr(oracle, "measure", None)
    if callable(remote):
        return remote(cliques, fn)
    mus = oracle.marginals(cliques)
    return {c: fn(c, mus[c]) for c in cliques}


def marginal_futures(oracle: MarginalOracle, cliques: Sequence[Clique]) -> dict[Clique, Any] | None:
    """``{c: future of the exact marginal}`` left on the cluster, where the oracle supports it (a
    ``DataOracle`` over a dask frame with a client), else None. The futures are for tasks that run
    next to them (scores, noisy releases); the caller must never gather them to this process."""
    remote = getattr(oracle, "marginal_futures", None)
    if not callable(remote):
        return None
    return remote([tuple(c) for c in cliques])


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
                raise DataError(f"column {a!r} has value {col[bad][0]!r} outside the domain [0, {domain.shape[j]})")
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
