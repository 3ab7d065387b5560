"""Marginal estimates held on dask workers (AIM+GReM's table); lazy updates dispatched as per-shard tasks.

The kept cliques (W and the candidates in W↓) are split into shards balanced by cell count. Each shard
(true marginals + float estimates of its cliques) lives on a worker behind a future. A round's
residual changes {τ: Δz_τ} are sent only to the shards holding a clique γ ⊇ τ, where the task adds
Recon(Δz_τ, τ, γ) (Prop. 4.2) to a copy-on-write clone of the shard: a task that dask reruns after a
worker loss starts again from the unchanged input shard, so no update is ever applied twice.
Selection scores come back as one L1 error per clique, and measurements are drawn on the shard too
(:meth:`DistributedMarginals.noisy`), so only small vectors, noisy marginals and the selected
clique's estimate cross the network. When the true marginals come from the data pass as futures
(``DataOracle.marginal_futures``) they are attached to the shards on the workers and never reach the
client at all.

The shards are the mechanism's own in-memory table (AIM+GReM passes its ``LocalMarginals`` and
``residual_subsets`` through the run context's ``sharded-marginals`` kernel): this module only places them,
routes the changes and runs their methods as tasks, so the sharded table has the interface of the shard
(``MarginalTable`` for AIM+GReM) and imports nothing of the mechanism.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from privcube.core.domain import Domain

Clique = tuple[str, ...]


class Shard(Protocol):
    """An in-memory marginal table over some cliques: ``shard(domain, cliques, truth)`` builds one; tasks
    clone it (sharing ``truth`` and its indexes, copying the ``mu`` estimates they change) before changing it."""

    cliques: list[Clique]
    sizes: Any
    truth: Mapping[Clique, np.ndarray] | None
    mu: dict[Clique, np.ndarray]

    def containing(self, tau: Clique) -> list[Clique]: ...
    def apply(self, deltas: Sequence[tuple[Clique, np.ndarray]]) -> None: ...
    def rebuild(self, z: Mapping[Clique, np.ndarray]) -> None: ...
    def load(self, mu: Mapping[Clique, np.ndarray]) -> None: ...
    def get(self, gamma: Clique) -> np.ndarray: ...
    def l1_errors(self, cliques: Sequence[Clique]) -> np.ndarray: ...
    def noisy(self, requests: Sequence[tuple[Clique, Any, float]], noise: Any) -> list[np.ndarray]: ...
    def snapshot(self) -> Mapping[Clique, np.ndarray]: ...


#: ``shard(domain, cliques, truth)``: builds the in-memory table of one shard
ShardType = Callable[[Domain, Sequence[Clique], Mapping[Clique, np.ndarray] | None], Shard]
#: ``subsets(clique, domain)``: the residuals whose changes reach a clique's estimate
Subsets = Callable[[Clique, Domain], Sequence[Clique]]


def _clone(shard: Shard, touched: Sequence[Clique] = ()) -> Shard:
    """A new shard sharing the read-only parts (truth, index); ``touched`` estimates are copied."""
    new = copy.copy(shard)
    new.mu = dict(shard.mu)
    for g in touched:
        new.mu[g] = new.mu[g].copy()
    return new


def _shard_apply(shard: Shard, deltas: Sequence[tuple[Clique, np.ndarray]]) -> Shard:
    """Task: lazy update of one shard, copy-on-write (the input shard is never modified)."""
    touched = list(dict.fromkeys(g for t, _ in deltas for g in shard.containing(t)))
    new = _clone(shard, touched)
    new.apply(deltas)
    return new


def _shard_rebuild(shard: Shard, z: Mapping[Clique, np.ndarray]) -> Shard:
    """Task: full reconstruction of one shard (into a clone; the input is never modified)."""
    new = _clone(shard)
    new.rebuild(z)
    return new


def _shard_load(shard: Shard, mu: Mapping[Clique, np.ndarray]) -> Shard:
    """Task: replace a shard's estimates (in a clone; the input is never modified)."""
    new = _clone(shard)
    new.load(mu)  # load assigns fresh arrays
    return new


def _shard_attach(shard: Shard, truth: Sequence[np.ndarray]) -> Shard:
    """Task: a clone of ``shard`` holding the true marginals of its cliques (in ``shard.cliques`` order)."""
    new = _clone(shard)
    arrays = {}
    for c, mu in zip(shard.cliques, truth):
        mu = np.asarray(mu)
        want = tuple(shard.sizes[a] for a in c)
        if mu.shape != want:
            raise ValueError(f"true marginal of {list(c)} has shape {mu.shape}, expected {want}")
        arrays[c] = mu
    new.truth = arrays
    return new


def _shard_noisy(shard: Shard, requests: Sequence[tuple[Clique, Any, float]], noise: Any) -> list[np.ndarray]:
    """Task: noisy marginals μ_c + noise (keyed by measurement identity), computed next to μ_c."""
    return shard.noisy(requests, noise)


def _shard_get(shard: Shard, gamma: Clique) -> np.ndarray:
    """Task: one estimate."""
    return shard.get(gamma)


def _shard_errors(shard: Shard, cliques: Sequence[Clique]) -> np.ndarray:
    """Task: L1 errors of some of a shard's cliques."""
    return shard.l1_errors(cliques)


def _shard_snapshot(shard: Shard) -> dict[Clique, np.ndarray]:
    """Task: all estimates of a shard."""
    return dict(shard.snapshot())


def partition(cliques: Sequence[Clique], domain: Domain, shards: int) -> list[list[Clique]]:
    """Greedy largest-first split of cliques into ``shards`` groups of similar total cells."""
    loads = [0] * shards
    out: list[list[Clique]] = [[] for _ in range(shards)]
    for c in sorted(cliques, key=lambda c: -domain.size(c)):
        i = int(np.argmin(loads))
        out[i].append(c)
        loads[i] += domain.size(c)
    return [s for s in out if s]


class DistributedMarginals:
    """Marginal table sharded over a dask cluster (the interface of its ``shard`` type)."""

    def __init__(self, client: Any, domain: Domain, cliques: Sequence[Clique],
                 truth: Mapping[Clique, np.ndarray] | None, shards: int | None = None, *,
                 truth_futures: Mapping[Clique, Any] | None = None, shard: ShardType, subsets: Subsets) -> None:
        """Scatter shards of (truth, zero estimates) to the workers of ``client``.

        Each shard is a ``shard(domain, cliques, truth)`` over its cliques; a change of residual τ is sent to
        the shards holding a clique whose ``subsets(clique, domain)`` contain τ.

        With ``truth_futures`` (futures of the exact marginals on the cluster, e.g. from
        ``DataOracle.marginal_futures``) the shards are scattered empty and a task attaches the true
        marginals on the workers: they never pass through this process. The scattered root keeps the
        shards non-recomputable, so a lost worker surfaces as an error (the run resumes from its
        checkpoint) instead of a silent replay of every update since the start.
        """
        self.client = client
        self.domain = domain
        self.cliques = list(cliques)
        if shards is None:
            try:
                shards = 2 * max(1, len(client.scheduler_info().get("workers", {})))
            except Exception:  # pragma: no cover - a client without scheduler info
                shards = 2
        groups = partition(self.cliques, domain, max(1, int(shards)))
        self._shard_of: dict[Clique, int] = {c: i for i, g in enumerate(groups) for c in g}
        self._groups = groups
        self._subsets: list[set[Clique]] = [{t for c in g for t in subsets(c, domain)} for g in groups]
        self._futures = []
        empties = []
        for g in groups:
            if truth_futures is not None:
                empty = client.scatter(shard(domain, g, None), hash=False)
                empties.append(empty)
                self._futures.append(client.submit(_shard_attach, empty, [truth_futures[c] for c in g], pure=False))
                continue
            local = shard(domain, g, None if truth is None else {c: np.asarray(truth[c]) for c in g})
            self._futures.append(client.scatter(local, hash=False))
        if truth_futures is not None:
            from distributed import wait

            wait(self._futures)
            for f in [*empties, *truth_futures.values()]:  # the shards hold the true marginals now
                f.release()

    def apply(self, deltas: Sequence[tuple[Clique, np.ndarray]]) -> None:
        """Send each changed residual to the shards that hold a clique containing it."""
        for i, subs in enumerate(self._subsets):
            mine = [(t, d) for t, d in deltas if tuple(t) in subs]
            if mine:
                self._futures[i] = self.client.submit(_shard_apply, self._futures[i], mine, pure=False)

    def rebuild(self, z: Mapping[Clique, np.ndarray]) -> None:
        """Full reconstruction on every shard (each receives only its residuals)."""
        for i, subs in enumerate(self._subsets):
            mine = {t: v for t, v in z.items() if t in subs}
            self._futures[i] = self.client.submit(_shard_rebuild, self._futures[i], mine, pure=False)

    def get(self, gamma: Clique) -> np.ndarray:
        """The estimate of ``gamma`` fetched from its shard."""
        i = self._shard_of[tuple(gamma)]
        return self.client.submit(_shard_get, self._futures[i], tuple(gamma), pure=False).result()

    def l1_errors(self, cliques: Sequence[Clique]) -> np.ndarray:
        """‖μ_γ − μ̂_γ‖₁ computed next to the data, one small vector per shard."""
        per: dict[int, list[Clique]] = {}
        for c in cliques:
            per.setdefault(self._shard_of[tuple(c)], []).append(tuple(c))
        futs = {i: self.client.submit(_shard_errors, self._futures[i], cs, pure=False) for i, cs in per.items()}
        got = {i: f.result() for i, f in futs.items()}
        vals = {c: float(v) for i, cs in per.items() for c, v in zip(cs, got[i])}
        return np.array([vals[tuple(c)] for c in cliques], dtype=float)

    def noisy(self, requests: Sequence[tuple[Clique, Any, float]], noise: Any) -> list[np.ndarray]:
        """Noisy marginals μ_c + noise.gaussian(key, shape, σ), drawn on the worker holding μ_c (one task per
        shard): only the noisy arrays come back. ``noise`` travels with its root entropy, so the keyed
        draws equal the in-memory path's bit for bit."""
        per: dict[int, list[int]] = {}
        for k, (c, _, _) in enumerate(requests):
            per.setdefault(self._shard_of[tuple(c)], []).append(k)
        futs = {i: self.client.submit(_shard_noisy, self._futures[i],
                                      [(tuple(requests[k][0]), requests[k][1], requests[k][2]) for k in ks], noise,
                                      pure=False) for i, ks in per.items()}
        got = dict(zip(futs, self.client.gather(list(futs.values()))))
        out: list[Any] = [None] * len(requests)
        for i, ks in per.items():
            for k, y in zip(ks, got[i]):
                out[k] = y
        return out

    def snapshot(self) -> dict[Clique, np.ndarray]:
        """All estimates gathered to the client."""
        out: dict[Clique, np.ndarray] = {}
        for part in self.client.gather([self.client.submit(_shard_snapshot, f, pure=False) for f in self._futures]):
            out.update(part)
        return {c: out[c] for c in self.cliques}

    def load(self, mu: Mapping[Clique, np.ndarray]) -> None:
        """Replace estimates shard by shard."""
        for i, g in enumerate(self._groups):
            self._futures[i] = self.client.submit(_shard_load, self._futures[i], {c: mu[c] for c in g}, pure=False)

    def close(self) -> None:
        """Release the shard futures."""
        for f in self._futures:
            try:
                f.release()
            except Exception:  # pragma: no cover - already released or client closed
                pass
        self._futures = []


def sharded_marginals(client: Any, domain: Domain, cliques: Sequence[Clique], truth: Mapping[Clique, np.ndarray] | None,
                      truth_futures: Mapping[Clique, Any] | None = None, *, shard: ShardType,
                      subsets: Subsets) -> DistributedMarginals:
    """The ``sharded-marginals`` kernel: ``shard`` tables over ``cliques`` spread over ``client``'s workers;
    ``truth`` is None when ``truth_futures`` (exact marginals left on the cluster by the oracle) are given."""
    return DistributedMarginals(client, domain, cliques, truth, truth_futures=truth_futures, shard=shard,
                                subsets=subsets)


__all__ = ["DistributedMarginals", "Shard", "partition", "sharded_marginals"]
