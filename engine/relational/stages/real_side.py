"""The real side of a relational run, counted where the data lives.

``RealSide`` builds the task graphs of ``real_kernels`` for two tables and their links (through
``privcube.storage.frame_tasks``: no dask import here), runs the checks on the run's
cluster (``RunContext.persist`` / ``compute``; dask's own scheduler without one) and keeps the checked
links, the codes and the keep masks there. The driver holds only what comes back: public sizes (n1, n2,
m), the degree reports and histograms, and count tables: each table's marginals for stage 1 and the
cross workloads' count tables for stage 2 through the single-table marginal engine
(``RunContext.data_oracle``) over the join of the links with both tables' codes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.context import RunContext
from privcube.relational.stages import real_kernels as F
from privcube.relational.stages.cross_workloads import CrossWorkload
from privcube.relational.stages.resolved_links import Links
from privcube.storage.frame_tasks import frame_of_parts, frame_parts, held, task


class FrameCounts:
    """Exact marginals of a dask DataFrame of codes with ``privcube.core.counting`` kernels through ``compute``:
    the marginal engine of a run without ``data_oracle`` (a mechanism called without a run context)."""

    def __init__(self, frame: Any, domain: Domain, compute: Any) -> None:
        """Count ``frame`` (columns = ``domain``'s attributes) with ``compute``."""
        self.frame, self.domain, self.compute = frame, domain, compute

    def marginals(self, cliques: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], np.ndarray]:
        """EXACT int64 count arrays, axes in each clique's order."""
        from privcube.core.counting import combine_counts, partition_counts

        cliques = [tuple(c) for c in cliques]
        shapes = [self.domain.shape_of(c) for c in cliques]
        sizes = self.domain.to_dict()
        partials = [task(partition_counts, p, cliques, shapes, sizes) for p in frame_parts(self.frame)]
        (flats,) = self.compute(task(combine_counts, *partials))
        return {c: np.asarray(f, dtype=np.int64).reshape(s) for c, f, s in zip(cliques, flats, shapes)}


def _oracle(ctx: RunContext, frame: Any, domain: Domain) -> Any:
    """The run's marginal engine over ``frame`` (``data_oracle``), or counting kernels through ``compute``."""
    if ctx.data_oracle is not None:
        return ctx.data_oracle(frame, domain)
    return FrameCounts(frame, domain, ctx.compute)


class JoinedCross:
    """``RealCross`` over the real links joined with both tables' codes (a dask frame, never in this process):
    a cross workload (S1, S2) is the marginal over L.S1 ∪ R.S2 of the joined frame. The first count asked
    counts every workload registered with ``want`` in one pass; tables are cached per workload."""

    def __init__(self, frame: Any, dom1: Domain, dom2: Domain, ctx: RunContext) -> None:
        """Count the joined ``frame`` (columns ``L.<a>``, ``R.<b>``) through the run's marginal engine."""
        self.dom1, self.dom2 = dom1, dom2
        self.oracle = _oracle(ctx, frame, F.joined_domain(dom1, dom2))
        self._cache: dict[CrossWorkload, np.ndarray] = {}
        self._wanted: list[CrossWorkload] = []
        self.n_links: int | None = None
        self.passes = 0

    def want(self, workloads: Sequence[CrossWorkload]) -> None:
        """Count these workloads together with the next one asked for (one pass over the data)."""
        self._wanted += [w for w in workloads if w not in self._cache and w not in self._wanted]

    @staticmethod
    def clique(w: CrossWorkload) -> tuple[str, ...]:
        """The joined frame's clique of ``w`` (left attributes first: flat C order is left-major)."""
        return tuple(f"L.{a}" for a in w.left) + tuple(f"R.{b}" for b in w.right)

    def counts(self, w: CrossWorkload) -> np.ndarray:
        """Count table of ``w`` over the real links (flattened, C order, left cells major)."""
        if w not in self._cache:
            todo = [w, *(x for x in self._wanted if x != w and x not in self._cache)]
            got = self.oracle.marginals([self.clique(x) for x in todo])
            self.passes += 1
            for x in todo:
                self._cache[x] = np.asarray(got[self.clique(x)], dtype=float).ravel()
            self._wanted = [x for x in self._wanted if x not in self._cache]
        return self._cache[w]

    def marginal(self, w: CrossWorkload) -> np.ndarray:
        """``counts(w)`` divided by the number of links."""
        c = self.counts(w)
        return c / max(float(c.sum()), 1.0)


class RealSide:
    """Two tables and their links as task graphs on the run's cluster (see the module docstring)."""

    def __init__(self, lk: Links, tables: Mapping[str, tuple[Any, Domain]], p: Mapping[str, Any],
                 ctx: RunContext | None) -> None:
        """Build the graphs and run every check (errors are one line; nothing is charged before)."""
        self.ctx = ctx if ctx is not None else RunContext()
        self.lk, self.kind = lk, lk.kind
        self.names = (lk.left, lk.right)
        self.doms = (tables[lk.left][1], tables[lk.right][1])
        parts = {n: F.partitions(tables[n][0], tables[n][1], n) for n in dict.fromkeys(self.names)}
        codes = {n: task(F.stack_codes, n, tables[n][1], *parts[n]) for n in parts}
        index = {(n, k): self._index(n, k, tables, parts[n], codes[n]) for n, k in
                 dict.fromkeys(zip(self.names, (lk.left_key, lk.right_key)))}
        if self.kind == "one_to_many":
            pos = [task(F.fk_positions, q, lk.fk, index[(lk.right, lk.right_key)]) for q in parts[lk.left]]
        else:
            pos = [task(F.pair_positions, q, lk.pair_columns, index[(lk.left, lk.left_key)],
                        index[(lk.right, lk.right_key)]) for q in _link_parts(lk.pairs)]
        spec = self._spec(p)
        checks = task(F.link_checks, spec, task(len, codes[lk.left]), task(len, codes[lk.right]), *pos)
        persisted = self.ctx.persist(checks, *codes.values(), *pos)
        self.checks, self.pos = persisted[0], list(persisted[1 + len(codes):])
        self.codes = dict(zip(codes, persisted[1:1 + len(codes)]))
        (self.public,) = self.ctx.compute(task(F.public_view, self.checks))
        self.masks = [task(F.mask_of, self.checks, k) for k in range(len(self.pos))]
        self._kept: Any = None

    def _index(self, name: str, key: str, tables: Mapping[str, tuple[Any, Domain]], parts: list, codes: Any) -> Any:
        """The key index of a table: its key column, or row positions when it has none (or ids are positions)."""
        cols = F.columns_of(tables[name][0])
        if not self.lk.positions and cols is not None and key in cols:
            return task(F.key_index, name, key, *parts)
        return task(F.row_index, codes)

    def _spec(self, p: Mapping[str, Any]) -> F.LinkSpec:
        """Names and rules for the link-check task."""
        lk, (a, b) = self.lk, self.names
        sides = (f"{a} (source)", f"{b} (target)") if lk.self_ref else (a, b)
        if self.kind == "one_to_many":
            what, targets = ("", f"{a}.{lk.fk}"), ("", f"{b}.{lk.right_key}")
        else:
            cols = tuple(map(str, lk.pair_columns)) if lk.pair_columns else None
            what = ((f"link table column {cols[0]!r}", f"link table column {cols[1]!r}") if cols else
                    (f"pairs.{a}", f"pairs.{b}"))  # the user's column names when the pairs have them
            targets = (f"{a}.{lk.left_key}", f"{b}.{lk.right_key}")
        return F.LinkSpec(self.kind, (a, b), sides, what, targets, int(p["d_max"]), bool(p["truncate"]),
                          lk.self_ref and not p["self_loops"], lk.missing_column)

    # ---- public figures (sizes, degree reports), as the driver receives them
    @property
    def m(self) -> int:
        """Number of real links after the checks (public, as in the paper)."""
        return int(self.public["m"])

    @property
    def n_real(self) -> tuple[int, int]:
        """Real row counts of (left, right); a one-to-many child keeps only its linked rows."""
        return int(self.public["n1"]), int(self.public["n2"])

    @property
    def degree_report(self) -> dict[str, Any]:
        """``enforce_degree``'s report (max degrees only with ``evaluate_nonprivate``)."""
        return dict(self.public["degree_report"])

    @property
    def links_report(self) -> dict[str, Any]:
        """Repeated pairs dropped (many-to-many)."""
        return dict(self.public["links_report"])

    def degree_histogram(self, side: int) -> np.ndarray:
        """How many records of side 0 (left) / 1 (right) have 0, 1, 2, … links: an aggregate count."""
        return np.asarray(self.public["degree_histograms"][side], dtype=np.int64)

    def parent_flags(self) -> Any:
        """One-to-many: which real parents have at least one (kept) child, a task whose result stays on the
        cluster (a sibling link counts the parents flagged in both there; only that count comes back)."""
        return task(F.parent_flags, self.n_real[1], self.pos, self.masks)

    # ---- stage 1: each table's codes as a dask frame for the marginal engine
    def _table_codes(self, name: str) -> Any:
        """The codes array of ``name`` on the cluster (a one-to-many child: the rows that keep their link)."""
        if self.kind == "one_to_many" and name == self.names[0]:
            if self._kept is None:
                (self._kept,) = self.ctx.persist(task(F.kept_codes, self.codes[name], *self.masks))
            return self._kept
        return self.codes[name]

    def table_frame(self, name: str) -> Any:
        """Table ``name``'s (kept) codes as a dask DataFrame in chunks (a single-table job's input)."""
        k = self.names.index(name)
        return _codes_frame(self._table_codes(name), self.n_real[k], self.doms[k])

    def table_oracle(self, name: str) -> Any:
        """The marginal engine over table ``name`` (stage 1's ResidualPlanner measures through it)."""
        return _oracle(self.ctx, self.table_frame(name), self.doms[self.names.index(name)])

    # ---- stage 2: the join of the links with both tables' codes
    def joined_frame(self, codes1: Any = None, codes2: Any = None) -> Any:
        """The kept links joined with both tables' codes (or the given per-record code arrays) as a dask frame."""
        c1 = self.codes[self.names[0]] if codes1 is None else codes1
        c2 = self.codes[self.names[1]] if codes2 is None else codes2
        cols1, cols2 = F.prefixed(self.doms[0], "L."), F.prefixed(self.doms[1], "R.")
        offsets = np.cumsum([0, *self.public["partition_rows"]])
        parts = [task(F.joined_part, q, mk, self.kind, c1, c2, cols1, cols2, int(off))
                 for q, mk, off in zip(self.pos, self.masks, offsets)]
        dtypes = [F.code_dtype(self.doms[0])] * len(cols1) + [F.code_dtype(self.doms[1])] * len(cols2)
        return frame_of_parts(parts, F.meta_frame(cols1 + cols2, dtypes))

    def cross(self) -> JoinedCross:
        """``RealCross`` of the real links (counted where they are)."""
        return JoinedCross(self.joined_frame(), self.doms[0], self.doms[1], self.ctx)

    def transplanted(self, syn1: np.ndarray, syn2: np.ndarray, seed: int = 0) -> JoinedCross:
        """NON-private evaluation: the real links moved onto the synthetic tables (each real record to a synthetic
        record with the same codes when there is one, else a random one): the error floor's count tables."""
        syn1 = np.asarray(syn1).astype(F.code_dtype(self.doms[0]))  # small codes: a small graph to ship
        syn2 = np.asarray(syn2).astype(F.code_dtype(self.doms[1]))
        t1 = task(F.twin_codes, self.codes[self.names[0]], syn1, self.doms[0].shape, seed)
        t2 = t1 if self.lk.self_ref else task(F.twin_codes, self.codes[self.names[1]], syn2, self.doms[1].shape,
                                              seed + 1)
        return JoinedCross(self.joined_frame(t1, t2), self.doms[0], self.doms[1], self.ctx)


def table_oracle(data: Any, domain: Domain, name: str, ctx: RunContext | None) -> tuple[Any, int]:
    """One table alone (a schema graph's stage 1): its codes checked and kept on the cluster, and (the run's
    marginal engine over them, its public row count)."""
    ctx = ctx if ctx is not None else RunContext()
    (codes,) = ctx.persist(task(F.stack_codes, name, domain, *F.partitions(data, domain, name)))
    (n,) = ctx.compute(task(len, codes))
    return _oracle(ctx, _codes_frame(codes, int(n), domain), domain), int(n)


def _codes_frame(codes: Any, n: int, domain: Domain) -> Any:
    """A codes array held on the cluster (``n`` rows) as a dask DataFrame in chunks of about 8 MB."""
    attrs = list(domain.attributes)
    chunks = [task(F.code_chunk, codes, a, b, attrs) for a, b in F.chunk_bounds(n, F.chunk_rows(len(attrs)))]
    return frame_of_parts(chunks, F.meta_frame(attrs, [F.code_dtype(domain)] * len(attrs)))


def public_codes(data: Any, domain: Domain, name: str, ctx: RunContext | None) -> np.ndarray:
    """A table marked public: its codes, checked, in this process (they are released as they are)."""
    ctx = ctx if ctx is not None else RunContext()
    (codes,) = ctx.compute(task(F.stack_codes, name, domain, *F.partitions(data, domain, name)))
    return np.asarray(codes, dtype=np.int64)


def parent_flags_of(tables: Mapping[str, tuple[Any, Domain]], links: Any, p: Mapping[str, Any],
                    ctx: RunContext | None) -> Any:
    """A one-to-many link's real parents with children (``RealSide.parent_flags``: a task on the cluster), its
    links checked as its own run checks them: what a later sibling link counts against."""
    from privcube.relational.stages.resolved_links import parse_links

    return RealSide(parse_links(links, tables), tables, p, ctx).parent_flags()


def _link_parts(pairs: Any) -> list[Any]:
    """A link table as delayed partitions (a dask frame's own; one for a pandas frame or an array)."""
    if F.is_dask(pairs):
        return frame_parts(pairs)
    return [held(pairs)]


__all__ = ["FrameCounts", "JoinedCross", "RealSide", "parent_flags_of", "public_codes", "table_oracle"]
