"""The marginal pass: EXACT (non-private) counts of many attribute sets in one pass over the data.

Input is a table of integer codes (a dask DataFrame, or a pandas DataFrame for the in-memory fast
path) whose columns include the domain's attributes, plus optionally a weight column (e.g. ``count``
for distinct-row-compressed data). For a batch of cliques the pass:

1. plans: duplicate/permuted cliques are computed once; a clique that is a subset of another
   requested clique is *derived* by summation from that superset afterwards (unless the superset
   has more than ``derive_max_cells`` cells), so only the maximal cliques ("roots") are counted;
2. counts: per partition, for each root the flat cell index of its code columns (ravel in C order,
   by in-place stride arithmetic after a per-column range check) and
   ``np.bincount(minlength=n_cells)`` (int64) — one read of each partition for the whole batch;
3. reduces: partial count vectors are summed in a tree with fan-in ``split_every`` (bounded
   memory per task: at most ``split_every`` partials plus one accumulator).

Memory guard: any clique with more than ``max_cells`` cells (8 bytes each) raises
``MemoryLimitError`` before anything is computed. Roots are packed into passes of at most
``pass_cells`` total cells (one pass for ordinary batches); each extra pass re-reads the data. With a
client, passes are also sized to the smallest worker's memory limit (``fit_passes``: lower fan-in
first, then more passes; a marginal no worker can count raises ``MemoryLimitError`` up front).

Results are numpy int64 arrays, axes in the order each clique was given. Weighted counts are
accumulated in float64 per partition (exact below 2**53 per partition) and rounded to int64.
These are EXACT counts of private data: only mechanisms should read them, and add noise.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, DataError, DomainError, MemoryLimitError
from privcube.core.counting import (
    DEFAULT_DERIVE_MAX_CELLS,
    combine_counts,
    dense_block,
    derive_marginal,
    partition_counts,
    partition_sparse_blocks,
    plan_batch,
)
from privcube.graphs.progress import distributed_progress, local_task_progress
from privcube.core.oracle import ClusterMarginalsOracle, LazyMarginalOracle, MeasuringOracle

Clique = tuple[str, ...]

DEFAULT_MAX_CELLS = 2**28          # 2 GiB of int64 per marginal
DEFAULT_PASS_CELLS = 2**25         # 256 MiB of int64 partial counts per partition task
#: share of the smallest worker's memory limit a data pass may plan to use (dask spills at 60%, pauses at
#: 80% and restarts the worker at 95% by default)
WORKER_MEMORY_FRACTION = 0.6


# ------------------------------------------------------------------------------------ planning
def _canon(domain: Domain, clique: Sequence[str]) -> Clique:
    """Clique in domain order, validating attribute names (DomainError names the bad one)."""
    if isinstance(clique, str):
        raise DomainError(f"clique {clique!r} must be a sequence of attribute names, not a string")
    return domain.canonical(clique)


def check_memory(domain: Domain, cliques: Sequence[Sequence[str]], max_cells: int) -> None:
    """Raise MemoryLimitError for the first clique whose int64 marginal exceeds ``max_cells`` cells."""
    for c in cliques:
        cells = domain.size(tuple(c))
        if cells > max_cells:
            raise MemoryLimitError(
                f"marginal on {tuple(c)} has {cells:,} cells ({cells * 8 / 2**30:.2f} GiB as int64), "
                f"above the limit of {max_cells:,} cells ({max_cells * 8 / 2**30:.2f} GiB)"
            )


def _pack_passes(domain: Domain, roots: Sequence[Clique], pass_cells: int) -> list[list[Clique]]:
    """Greedily pack roots (largest first) into passes of at most ``pass_cells`` total cells."""
    passes: list[list[Clique]] = []
    loads: list[int] = []
    for r in sorted(roots, key=lambda c: -domain.size(c)):
        size = domain.size(r)
        for i, load in enumerate(loads):
            if load + size <= pass_cells:
                passes[i].append(r)
                loads[i] += size
                break
        else:
            passes.append([r])
            loads.append(size)
    return passes


def pass_bytes_per_worker(cells: int, split_every: int, threads: int) -> int:
    """Planned peak bytes on one worker while a pass of ``cells`` int64 counts is reduced: a combine task
    holds ``split_every`` partials and its sum, and each of the worker's other threads one partial."""
    return 8 * cells * (split_every + 1 + max(threads, 1))


def fit_passes(domain: Domain, roots: Sequence[Clique], client: Any, *, split_every: int,
               pass_cells: int = DEFAULT_PASS_CELLS) -> list[tuple[list[Clique], int]]:
    """Passes over the data as ``[(roots, fan-in)]`` that fit the workers of ``client``.

    A dask worker pushed over its memory limit is restarted, and the job ends in a communication error
    after a few retries; so with a client the passes are sized to the smallest worker memory limit:
    the fan-in of the reduction is lowered first (cheap), then roots are spread over more passes
    (each one re-reads the data). A marginal that cannot be counted on one worker even at fan-in 2
    raises MemoryLimitError naming it, before anything is computed."""
    from privcube.graphs.cluster.handle import worker_resources

    limit, threads = worker_resources(client) if client is not None else (None, 1)
    if limit is None:
        return [(p, split_every) for p in _pack_passes(domain, roots, pass_cells)]
    budget = WORKER_MEMORY_FRACTION * limit
    for r in sorted(roots, key=lambda c: -domain.size(c)):
        cells = domain.size(r)
        need = pass_bytes_per_worker(cells, 2, threads)
        if need > budget:
            raise MemoryLimitError(
                f"marginal on {tuple(r)} has {cells:,} cells ({cells * 8 / 2**30:.2f} GiB as int64); counting it "
                f"on the cluster needs about {need / 2**30:.2f} GiB per worker ({threads} thread(s), fan-in 2), "
                f"above {WORKER_MEMORY_FRACTION:.0%} of the smallest worker memory limit ({limit / 2**30:.2f} GiB): "
                "give the workers more memory (cluster.memory_limit) or fewer threads, or use coarser attributes")
    cap = int(budget // pass_bytes_per_worker(1, 2, threads))
    out = []
    for p in _pack_passes(domain, roots, min(pass_cells, cap)):
        cells = sum(domain.size(r) for r in p)
        fan_in = split_every
        while fan_in > 2 and pass_bytes_per_worker(cells, fan_in, threads) > budget:
            fan_in -= 1
        out.append((p, fan_in))
    return out


# ------------------------------------------------------------------------------------ the pass
def _is_dask_frame(frame: Any) -> bool:
    """Whether ``frame`` is a dask DataFrame (vs an in-memory pandas one)."""
    return hasattr(frame, "to_delayed") and hasattr(frame, "npartitions")


def _unwrap(frame: Any) -> Any:
    """Accept an ``EncodedTable`` (anything with a DataFrame ``.frame``) as well as a bare frame."""
    if _is_dask_frame(frame) or type(frame).__name__ == "DataFrame":
        return frame
    inner = getattr(frame, "frame", None)
    return inner if inner is not None and (_is_dask_frame(inner) or hasattr(inner, "iloc")) else frame


def check_columns(frame: Any, domain: Domain, attrs: Sequence[str], weight: str | None) -> None:
    """Raise DataError naming the first needed column (or weight column) that the frame lacks."""
    cols = set(map(str, frame.columns))
    for a in attrs:
        if a not in cols:
            raise DataError(f"data is missing column {a!r} (needed by the domain); it has {sorted(cols)}")
    if weight is not None and weight not in cols:
        raise DataError(f"data is missing weight column {weight!r}; it has {sorted(cols)}")


def _tree_reduce(partials: list[Any], split_every: int) -> Any:
    """Sum delayed partials in a tree with fan-in ``split_every``; returns one delayed."""
    from dask import delayed

    combine = delayed(combine_counts, pure=True)
    level = partials
    while len(level) > 1:
        level = [combine(*level[i:i + split_every]) if len(level[i:i + split_every]) > 1
                 else level[i] for i in range(0, len(level), split_every)]
    return level[0]


def _run_pass(frame: Any, domain: Domain, roots: list[Clique], weight: str | None,
              client: Any, split_every: int, label: str) -> list[np.ndarray]:
    """One read of the data counting every root; returns flat int64 vectors in ``roots`` order."""
    shapes = [domain.shape_of(r) for r in roots]
    sizes = domain.to_dict()
    needed = list(dict.fromkeys(a for r in roots for a in r))
    if weight is not None:
        needed.append(weight)
    if not needed:  # only the empty clique: still need a column to count rows
        needed = [str(frame.columns[0])]
    if not _is_dask_frame(frame):
        return partition_counts(frame[needed], roots, shapes, sizes, weight)

    import pandas as pd
    from dask import compute

    # map_partitions fuses the count into the (projected) read task: one task per partition, and
    # only the small count vectors ever leave a worker. The meta is nominal: results are lists.
    counted = frame[needed].map_partitions(partition_counts, roots, shapes, sizes, weight,
                                           meta=pd.Series([], dtype=object), enforce_metadata=False,
                                           align_dataframes=False)
    partials = counted.to_delayed(optimize_graph=True)
    final = _tree_reduce(partials, split_every)
    try:
        if client is not None:
            fut = client.compute(final)
            try:
                distributed_progress([fut], label)
                return fut.result()
            finally:
                fut.release()
        with local_task_progress(label):
            (result,) = compute(final)
        return result
    except KeyError as e:  # a file read after the up-front check lacks a column (ingest checks every file first)
        if "not in index" not in str(e):
            raise
        raise DataError(f"a data file lacks column(s) {str(e).split(' not in index')[0].strip(chr(34))} that the "
                        "input's first file has; every file must have the same columns") from None


def compute_marginals(frame: Any, domain: Domain, cliques: Sequence[Sequence[str]], *,
                      weight: str | None = None, client: Any = None, split_every: int = 8,
                      max_cells: int = DEFAULT_MAX_CELLS, pass_cells: int = DEFAULT_PASS_CELLS,
                      derive_max_cells: int = DEFAULT_DERIVE_MAX_CELLS,
                      label: str = "marginals") -> dict[Clique, np.ndarray]:
    """EXACT int64 marginals ``{clique: array}`` (axes in the given order) in one pass over ``frame``."""
    if split_every < 2:
        raise ConfigError(f"split_every must be >= 2, got {split_every}")
    frame = _unwrap(frame)
    requested = [tuple(c) for c in cliques]
    canon = [_canon(domain, c) for c in requested]
    check_memory(domain, requested, max_cells)
    check_columns(frame, domain, list(dict.fromkeys(a for c in canon for a in c)), weight)

    roots, derived = plan_batch(domain, canon, derive_max_cells)
    computed: dict[Clique, np.ndarray] = {}
    for p, fan_in in fit_passes(domain, roots, client if _is_dask_frame(frame) else None,
                                split_every=split_every, pass_cells=pass_cells):
        flats = _run_pass(frame, domain, p, weight, client, fan_in, label)
        for r, flat in zip(p, flats):
            computed[r] = np.asarray(flat, dtype=np.int64).reshape(domain.shape_of(r))
    for c, r in derived.items():
        computed[c] = derive_marginal(computed[r], r, c)
    out: dict[Clique, np.ndarray] = {}
    for req, c in zip(requested, canon):
        out[req] = derive_marginal(computed[c], c, req) if req != c else computed[c]
    return out


# ------------------------------------------------------------------------------ large marginals
def marginal_dask(frame: Any, domain: Domain, clique: Sequence[str], *, weight: str | None = None,
                  block_cells: int = 2**24, split_every: int = 8, max_cells: int = 2**36) -> Any:
    """A (large) EXACT marginal as a lazy, chunked dask array, computed in one pass over the data.

    Each partition emits its counts sparsely, cut into blocks of ``block_cells`` flat cells (C order,
    i.e. slabs along the first axis); each block is summed in its own tree, so no task ever holds
    more than ``split_every`` dense blocks. Use it for marginals too large for one process; write
    it with ``TensorStore.write`` (chunk-aligned). Axes are in the order of ``clique``.
    """
    import dask.array as da
    from dask import delayed

    if split_every < 2:
        raise ConfigError(f"split_every must be >= 2, got {split_every}")
    frame = _unwrap(frame)
    clique = tuple(clique)
    _canon(domain, clique)
    if not clique:
        raise DomainError("marginal_dask needs at least one attribute")
    check_memory(domain, [clique], max_cells)
    check_columns(frame, domain, list(clique), weight)
    shape = domain.shape_of(clique)
    inner = math.prod(shape[1:])
    rows_per_block = max(1, block_cells // inner)
    block_cells = rows_per_block * inner
    n_blocks = -(-shape[0] // rows_per_block)
    sizes = domain.to_dict()
    needed = list(clique) + ([weight] if weight is not None else [])
    if _is_dask_frame(frame):
        parts = frame[needed].to_delayed(optimize_graph=True)
    else:
        parts = [delayed(frame[needed])]
    sparse = [delayed(partition_sparse_blocks, pure=True, nout=n_blocks)(p, clique, shape, sizes, weight,
                                                                        block_cells) for p in parts]
    blocks = []
    for k in range(n_blocks):
        level = [sp[k] for sp in sparse]
        dense = delayed(dense_block, pure=True)
        level = [dense(block_cells, *level[i:i + split_every]) for i in range(0, len(level), split_every)]
        while len(level) > 1:
            level = [dense(block_cells, *level[i:i + split_every]) for i in range(0, len(level), split_every)]
        rows = min(rows_per_block, shape[0] - k * rows_per_block)
        block = level[0] if rows == rows_per_block else delayed(lambda b, n: b[:n], pure=True)(level[0], rows * inner)
        blocks.append(da.from_delayed(delayed(np.reshape)(block, (rows,) + shape[1:]), shape=(rows,) + shape[1:],
                                      dtype=np.int64))
    return da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]


def _take(flats: list[np.ndarray], i: int, shape: tuple[int, ...]) -> np.ndarray:
    """Task: root ``i`` of a pass result, as an int64 array of ``shape``."""
    return np.asarray(flats[i], dtype=np.int64).reshape(shape)


def remote_marginals(frame: Any, domain: Domain, cliques: Sequence[Sequence[str]], client: Any, *,
                     weight: str | None = None, split_every: int = 8,
                     derive_max_cells: int = DEFAULT_DERIVE_MAX_CELLS) -> dict[Clique, Any]:
    """EXACT marginals left on the cluster: ``{clique: Future of int64 array}`` from one batched pass."""
    frame = _unwrap(frame)
    requested = [tuple(c) for c in cliques]
    canon = [_canon(domain, c) for c in requested]
    check_columns(frame, domain, list(dict.fromkeys(a for c in canon for a in c)), weight)
    roots, derived = plan_batch(domain, canon, derive_max_cells)
    sizes = domain.to_dict()
    import pandas as pd

    computed: dict[Clique, Any] = {}
    for p, fan_in in fit_passes(domain, roots, client, split_every=split_every):
        shapes = [domain.shape_of(r) for r in p]
        needed = list(dict.fromkeys(a for r in p for a in r)) + ([weight] if weight is not None else [])
        if not needed:
            needed = [str(frame.columns[0])]
        counted = frame[needed].map_partitions(partition_counts, p, shapes, sizes, weight,
                                               meta=pd.Series([], dtype=object), enforce_metadata=False,
                                               align_dataframes=False)
        pass_future = client.compute(_tree_reduce(counted.to_delayed(optimize_graph=True), fan_in))
        computed.update({r: client.submit(_take, pass_future, i, shapes[i], pure=False) for i, r in enumerate(p)})
        pass_future.release()
    for c, r in derived.items():
        computed[c] = client.submit(derive_marginal, computed[r], r, c, pure=False)
    out = {}
    for req, c in zip(requested, canon):
        out[req] = client.submit(derive_marginal, computed[c], c, req, pure=False) if req != c else computed[c]
    return out


# ------------------------------------------------------------------------------------ oracle
class DataOracle(MeasuringOracle, ClusterMarginalsOracle, LazyMarginalOracle):
    """MarginalOracle over a (dask) DataFrame of codes: EXACT, non-private counts, cached and batched.

    Declares every optional oracle ability (``privcube.core.oracle``): measuring next to the data, exact
    marginals left on the cluster, lazy chunked marginals."""

    exact = True

    def __init__(self, frame: Any, domain: Domain, *, weight: str | None = None, client: Any = None,
                 split_every: int = 8, max_cells: int = DEFAULT_MAX_CELLS,
                 derive_max_cells: int = DEFAULT_DERIVE_MAX_CELLS) -> None:
        frame = _unwrap(frame)
        check_columns(frame, domain, domain.attributes, weight)
        self.domain = domain
        self.frame = frame
        self.weight = weight
        self.client = client
        self.split_every = split_every
        self.max_cells = max_cells
        self.derive_max_cells = derive_max_cells
        self._cache: dict[frozenset[str], tuple[Clique, np.ndarray]] = {}
        self.n_passes = 0

    def _from_cache(self, c: Clique) -> np.ndarray | None:
        """Exact hit, or derivation from the smallest cached superset within the derive limit."""
        key = frozenset(c)
        if key in self._cache:
            cc, mu = self._cache[key]
            return derive_marginal(mu, cc, c)
        best: tuple[Clique, np.ndarray] | None = None
        for k, (cc, mu) in self._cache.items():
            if key < k and mu.size <= self.derive_max_cells and (best is None or mu.size < best[1].size):
                best = (cc, mu)
        return None if best is None else derive_marginal(best[1], best[0], c)

    def prefetch(self, cliques: Sequence[Sequence[str]]) -> None:
        """Compute (in one batched pass) every clique not already answerable from the cache."""
        todo = []
        for c in cliques:
            c = _canon(self.domain, c)
            if self._from_cache(c) is None and c not in todo:
                todo.append(c)
        if not todo:
            return
        res = compute_marginals(self.frame, self.domain, todo, weight=self.weight, client=self.client,
                                split_every=self.split_every, max_cells=self.max_cells,
                                derive_max_cells=self.derive_max_cells, label="exact marginals")
        self.n_passes += 1
        for c, mu in res.items():
            self._cache[frozenset(c)] = (c, mu)

    def marginals(self, cliques: Sequence[Sequence[str]]) -> dict[Clique, np.ndarray]:
        """EXACT int64 count arrays, one per clique, axes in the clique's order."""
        cliques = [tuple(c) for c in cliques]
        check_memory(self.domain, cliques, self.max_cells)
        self.prefetch(cliques)
        out = {}
        for c in cliques:
            mu = self._from_cache(c)
            assert mu is not None
            out[c] = mu
        return out

    def measure(self, cliques: Sequence[Sequence[str]], fn: Callable[[Clique, np.ndarray], Any]) -> dict[Clique, Any]:
        """``{c: fn(c, exact marginal of c)}``, applying ``fn`` where the counts are.

        With a client, the exact counts are computed, derived and measured on the workers: only
        ``fn``'s outputs (noisy releases) reach this process, and nothing is cached here. ``fn``
        must be picklable and deterministic in its inputs (noise keyed by measurement identity).
        """
        cliques = [tuple(c) for c in cliques]
        check_memory(self.domain, cliques, self.max_cells)
        if self.client is None or not _is_dask_frame(self.frame):
            mus = self.marginals(cliques)
            return {c: fn(c, mus[c]) for c in cliques}
        futures = remote_marginals(self.frame, self.domain, cliques, self.client, weight=self.weight,
                                   split_every=self.split_every, derive_max_cells=self.derive_max_cells)
        self.n_passes += 1
        measured = {c: self.client.submit(fn, c, futures[c], pure=False) for c in cliques}
        try:
            results = self.client.gather(list(measured.values()))
        finally:
            for f in [*measured.values(), *futures.values()]:
                f.release()
        return dict(zip(measured, results))

    def marginal_dask(self, clique: Sequence[str]) -> Any:
        """One EXACT marginal as a lazy chunked dask array (axes in ``clique`` order), for releases too
        large for one process: the caller builds ``A x + noise`` on it and computes only the noisy result."""
        frame = self.frame
        if not _is_dask_frame(frame):
            import dask.dataframe as dd

            frame = dd.from_pandas(frame, npartitions=1)
        return marginal_dask(frame, self.domain, tuple(clique), weight=self.weight)

    def marginal_futures(self, cliques: Sequence[Sequence[str]]) -> dict[Clique, Any] | None:
        """EXACT marginals left on the cluster (``{clique: Future}``, one batched pass), or None without a
        client or a dask frame. For mechanisms that keep state next to the counts across rounds; the
        futures must only feed tasks whose outputs are noisy or scalar, never be gathered here."""
        cliques = [tuple(c) for c in cliques]
        check_memory(self.domain, cliques, self.max_cells)
        if self.client is None or not _is_dask_frame(self.frame):
            return None
        futures = remote_marginals(self.frame, self.domain, cliques, self.client, weight=self.weight,
                                   split_every=self.split_every, derive_max_cells=self.derive_max_cells)
        self.n_passes += 1
        return futures

    def total(self) -> int:
        """Number of (weighted) records."""
        return int(self.marginals([()])[()])

    def clear(self) -> None:
        """Drop cached marginals."""
        self._cache.clear()

