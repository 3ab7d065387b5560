"""Controlled rounding of census tables to whole counts, top-down, keeping the hierarchy and invariants exactly
(Cox 1987, "A constructive procedure for unbiased controlled rounding"; Bacharach 1966).

Root: the total is an integer (the invariant, or the rounded total); each 1-way table is rounded by largest
remainder keeping the total. Each 2-D problem — the root's 2-way tables (rows a, columns b), a level's children x
cells matrix of a 1-way table (rows = children totals, columns = the parent's cells), a level's 2-way tables per
a-slice (rows = children's (c, a) cells, columns = the parent's (a, b) cells) — is zero-restricted controlled
rounding: every entry becomes the floor or the ceiling of its value with the row and column sums (integers,
rounded before) kept exactly: a maximum flow on the bipartite graph of the fractional entries (source → row:
the row's missing units, row → column: capacity 1 per fractional entry, column → sink), all parents of a
level and several tables in one graph (each parent an independent block). When the entries' sums ARE the integer margins a fractional feasible flow exists,
so an integral one does; but the parent's integers differ from its fractional values by < 1, and floors and
ceilings of the input cannot always meet them (rows 2.7, 0.4 -> 3, 0; columns 1.2, 0.95, 0.95 -> 2, 1, 0). So each
block is first rounded on its own entries; only the parents whose flow falls short are re-raked to the
integer margins (a small change) and rounded again ("reraked_groups", "max_change" in the diagnostics).
Post-processing of released noisy answers: spends no privacy budget.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from privcube.core.errors import ConfigError

from .hierarchy import ROOT, Hierarchy
from .nonnegative import Diagnostics, fit_transport, transport_lp
from .raking import TOLERANCE, Margin, rake, relative_error
from .tables import AttrSet, TableSet, prepare

#: values within this of an integer are that integer (not a fractional entry)
SNAP = 1e-7
#: fractional entries per flow graph before a batch is solved
BATCH_EDGES = 4_000_000


def controlled_rounding(hierarchy: Hierarchy, tables: Mapping[str, Mapping[AttrSet, np.ndarray]], *,
                        zeros: Mapping[AttrSet, np.ndarray] | None = None,
                        fixed_totals: Mapping[str, np.ndarray] | None = None, tol: float = TOLERANCE,
                        ) -> tuple[dict[str, dict[AttrSet, np.ndarray]], dict[str, Any]]:
    """Integer (int64) tables from non-negative consistent ones (the output of ``nonnegative_tables``):
    children sum exactly to their parent, 1-way tables to the unit total, 2-way a-margins to the 1-way a
    table, zeros stay zero, invariants kept. Returns (tables, diagnostics) with the keys of ``tables``."""
    ts = prepare(hierarchy, tables, zeros, fixed_totals)
    for level, v in ts.fixed.items():
        if np.any(v != np.round(v)):
            raise ConfigError(f"census invariants: totals of level {level or 'root'!r} must be whole counts "
                              f"for integer output")
    diag = Diagnostics()
    changes: dict[str, float] = {}
    out: dict[str, dict[AttrSet, np.ndarray]] = {ROOT: _root(ts, diag, tol)}
    for depth in range(1, len(ts.chain)):
        level = ts.chain[depth]
        out[level] = _level(ts, level, out[ts.chain[depth - 1]], diag, tol)
    for level in ts.chain:
        changes[level] = max(float(np.max(np.abs(out[level][s] - ts.tables[level][s]), initial=0.0))
                             for s in out[level])
    summary = diag.summary()
    summary["max_change"] = changes
    summary["reraked_groups"] = {lv: list(v) for lv, v in diag.reraked.items()}
    return {lv: {s: out[lv][s] for s in tables[lv]} for lv in tables}, summary


def _snap(x: np.ndarray) -> np.ndarray:
    r = np.rint(x)
    return np.where(np.abs(x - r) <= SNAP, r, x)


def largest_remainder(x: np.ndarray, segment: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each entry floor or ceil of its value, each segment summing to its integer target: the ceilings go to
    the largest fractional parts. A segment whose floors and ceilings cannot reach its target (its values do
    not sum to within 1 of it) is first rescaled to the target."""
    x = _snap(np.asarray(x, dtype=np.float64))
    targets = np.rint(targets).astype(np.int64)
    n_seg = len(targets)
    low = np.floor(x)
    need = targets - np.bincount(segment, weights=low, minlength=n_seg).round().astype(np.int64)
    room = np.bincount(segment, weights=(x > low), minlength=n_seg).round().astype(np.int64)
    bad = (need < 0) | (need > room)
    if np.any(bad):
        x = np.where(bad[segment], _snap(_rescale(x, segment, targets.astype(float))), x)
        low = np.floor(x)
        need = targets - np.bincount(segment, weights=low, minlength=n_seg).round().astype(np.int64)
    frac = x - low
    order = np.lexsort((-frac, segment))
    s = segment[order]
    first = np.searchsorted(s, np.arange(n_seg))
    rank = np.arange(len(x)) - first[s]
    up = np.zeros(len(x), dtype=bool)
    up[order] = (rank < need[s]) & (frac[order] > 0)
    out = (low + up).astype(np.int64)
    if np.any(np.bincount(segment, weights=out, minlength=n_seg).round().astype(np.int64) != targets):
        raise RuntimeError("census rounding: largest remainder could not meet a segment total")
    return out


@dataclass
class Problem:
    """A 2-D controlled-rounding problem: entries ``x`` with row / column ids, integer row / column sums, and
    the group (parent) of each row and column: groups are independent blocks of the flow graph."""

    x: np.ndarray
    row: np.ndarray
    col: np.ndarray
    R: np.ndarray
    C: np.ndarray
    row_group: np.ndarray
    col_group: np.ndarray


def flow_round(problems: list[Problem]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Zero-restricted controlled rounding of independent problems in one maximum-flow graph. Per problem:
    (integers, ok per group): a group whose flow falls short (its margins unreachable by floors and ceilings
    of its entries) is not ok and its entries are not to be used."""
    if not problems:
        return []
    off = np.cumsum([0] + [len(p.R) for p in problems]), np.cumsum([0] + [len(p.C) for p in problems])
    goff = np.cumsum([0] + [int(max(p.row_group.max(initial=-1), p.col_group.max(initial=-1))) + 1 for p in problems])
    x = _snap(np.concatenate([p.x for p in problems]))
    row = np.concatenate([p.row + off[0][i] for i, p in enumerate(problems)])
    col = np.concatenate([p.col + off[1][i] for i, p in enumerate(problems)])
    R = np.rint(np.concatenate([p.R for p in problems])).astype(np.int64)
    C = np.rint(np.concatenate([p.C for p in problems])).astype(np.int64)
    nr, nc = len(R), len(C)
    low = np.floor(x)
    rho = R - np.bincount(row, weights=low, minlength=nr).round().astype(np.int64)
    gamma = C - np.bincount(col, weights=low, minlength=nc).round().astype(np.int64)
    frac = np.flatnonzero(x > low)
    n = 2 + nr + nc
    src, snk = np.flatnonzero(rho > 0), np.flatnonzero(gamma > 0)
    u = np.concatenate([np.zeros(len(src), np.int64), 2 + row[frac], 2 + nr + snk])
    v = np.concatenate([2 + src, 2 + nr + col[frac], np.ones(len(snk), np.int64)])
    cap = np.concatenate([rho[src], np.ones(len(frac), np.int64), gamma[snk]]).astype(np.int32)
    flow = maximum_flow(csr_matrix((cap, (u, v)), shape=(n, n)), 0, 1).flow.tocoo()
    keys = flow.row.astype(np.int64) * n + flow.col
    order = np.argsort(keys)
    skeys, sdata = keys[order], np.asarray(flow.data)[order]
    want = (2 + row[frac]).astype(np.int64) * n + (2 + nr + col[frac])
    pos = np.minimum(np.searchsorted(skeys, want), max(len(skeys) - 1, 0))
    out = low.astype(np.int64)
    if len(skeys):
        out[frac] += np.maximum(np.where(skeys[pos] == want, sdata[pos], 0), 0).astype(np.int64)
    row_ok = np.bincount(row, weights=out, minlength=nr).round().astype(np.int64) == R
    col_ok = np.bincount(col, weights=out, minlength=nc).round().astype(np.int64) == C
    rg = np.concatenate([p.row_group + goff[i] for i, p in enumerate(problems)])
    cg = np.concatenate([p.col_group + goff[i] for i, p in enumerate(problems)])
    bad = np.zeros(goff[-1], dtype=bool)
    bad[rg[~row_ok]] = True
    bad[cg[~col_ok]] = True
    res, i = [], 0
    for k, p in enumerate(problems):
        res.append((out[i:i + len(p.x)], ~bad[goff[k]:goff[k + 1]]))
        i += len(p.x)
    return res


def _round_tables(problems: dict, reraked: dict) -> tuple[dict, int, int]:
    """Round every problem, first on its own entries (floors / ceilings of the input); the groups (parents)
    where those cannot meet the integer margins again on their entries re-raked to them (``reraked[key]()``,
    called only then). Returns ({key: integers}, groups re-raked, groups)."""
    first = _batched(problems)
    again = {}
    n_bad = n_groups = 0
    for key, (ints, ok) in first.items():
        n_groups += len(ok)
        if not ok.all():
            n_bad += int(np.count_nonzero(~ok))
            p = problems[key]
            use = ~ok[p.row_group[p.row]]
            again[key] = Problem(np.where(use, reraked[key](), p.x), p.row, p.col, p.R, p.C, p.row_group, p.col_group)
    second = _batched(again)
    out = {}
    for key, (ints, ok) in first.items():
        if key in second:
            ints, ok = second[key]
        if not ok.all():
            raise RuntimeError(f"census rounding: the flow for table {','.join(key[1])} fell short after re-raking "
                               f"(its margins were not reached)")
        out[key] = ints
    return out, n_bad, n_groups


def _batched(problems: dict) -> dict:
    """flow_round over batches of at most BATCH_EDGES entries; {key: (integers, ok per group)}."""
    results: dict = {}
    batch, names, size = [], [], 0
    for key, prob in problems.items():
        batch.append(prob); names.append(key); size += len(prob.x)
        if size >= BATCH_EDGES:
            results.update(zip(names, flow_round(batch)))
            batch, names, size = [], [], 0
    results.update(zip(names, flow_round(batch)))
    return results


def _rescale(x: np.ndarray, segment: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Scale each segment of ``x`` to sum to its (integer) target (equal shares where it sums to 0)."""
    sums = np.bincount(segment, weights=x, minlength=len(targets))
    counts = np.bincount(segment, minlength=len(targets))
    scaled = x * np.where(sums > 0, targets / np.where(sums > 0, sums, 1.0), 0.0)[segment]
    return scaled + np.where(sums > 0, 0.0, targets / np.maximum(counts, 1))[segment]


def _root(ts: TableSet, diag: Diagnostics, tol: float) -> dict[AttrSet, np.ndarray]:
    t = ts.tables[ROOT]
    total = np.rint(ts.fixed[ROOT] if ROOT in ts.fixed else t[()]).astype(np.int64)
    out: dict[AttrSet, np.ndarray] = {(): total}
    for s in ts.sets(ROOT, 1):
        x = np.where(ts.zero(s), 0.0, t[s][0])
        out[s] = largest_remainder(x, np.zeros(len(x), np.int64), total)[None, :]
    problems, reraked, shapes = {}, {}, {}
    for s in ts.sets(ROOT, 2):
        a, b = s
        rows, cols = out[(a,)][0].astype(float), out[(b,)][0].astype(float)
        x, info = rake(np.where(ts.zero(s), 0.0, t[s]), [Margin(rows[None], axis=2), Margin(cols[None], axis=1)],
                       tol=tol)
        diag.add(ROOT, "root_twoway", info)
        na, nb = ts.zero(s).shape
        if not info["converged"]:
            out[s] = np.rint(transport_lp(t[s][0], ts.zero(s), rows, cols, s, integral=True)).astype(np.int64)[None]
            diag.fallbacks.append(f"root {','.join(s)}")
            continue
        row = np.repeat(np.arange(na), nb)
        problems[(ROOT, s)] = Problem(t[s][0].ravel(), row, np.tile(np.arange(nb), na), rows, cols,
                                      np.zeros(na, np.int64), np.zeros(nb, np.int64))
        reraked[(ROOT, s)] = (lambda x=x: x[0].ravel())
        shapes[(ROOT, s)] = (1, na, nb)
    _collect(problems, reraked, shapes, out, diag, ROOT)
    return out


def _collect(problems: dict, reraked: dict, shapes: dict, out: dict, diag: Diagnostics, level: str) -> None:
    ints, n_bad, n_groups = _round_tables(problems, reraked)
    for key, r in ints.items():
        out[key[1]] = r.reshape(shapes[key])
    diag.reraked[level] = (diag.reraked.get(level, (0, 0))[0] + n_bad, diag.reraked.get(level, (0, 0))[1] + n_groups)


def _solve(items: list, out: dict, diag: Diagnostics, level: str) -> None:
    """Build and round the problems of ``items`` ((key, cells, builder)) in chunks of at most BATCH_EDGES
    cells, so only one chunk's graphs and index arrays are alive at a time."""
    chunk: list = []
    size = 0
    for i, (key, cells, build) in enumerate(items):
        chunk.append((key, build))
        size += cells
        if size >= BATCH_EDGES or i == len(items) - 1:
            problems, reraked, shapes = {}, {}, {}
            for k, b in chunk:
                problems[k], reraked[k], shapes[k] = b()
            _collect(problems, reraked, shapes, out, diag, level)
            chunk, size = [], 0


def _level(ts: TableSet, level: str, up: dict[AttrSet, np.ndarray], diag: Diagnostics, tol: float
           ) -> dict[AttrSet, np.ndarray]:
    h = ts.hierarchy
    t = ts.tables[level]
    p, starts = h.parent_of(level), h.segment_starts(level)
    n = h.n_units(level)
    if level in ts.fixed:
        totals = np.rint(ts.fixed[level]).astype(np.int64)
    else:
        totals = largest_remainder(t[()], p, up[()])
    out: dict[AttrSet, np.ndarray] = {(): totals}

    def rerake(x0: np.ndarray, rows: np.ndarray, s: AttrSet, stage: str):
        def run() -> np.ndarray:
            started = time.perf_counter()
            shape = (len(x0), -1, x0.shape[-1])
            x, info = fit_transport(x0.reshape(shape), rows.astype(float).reshape(shape[:2]),
                                    up[s].astype(float).reshape((len(up[s]), -1, x0.shape[-1])), starts, p, tol=tol)
            diag.add(level, stage, info, time.perf_counter() - started)
            return x.ravel()
        return run

    def oneway(s: AttrSet):
        k = ts.sizes[s[0]]
        x0 = np.where(ts.zero(s)[None], 0.0, t[s])
        prob = Problem(x0.ravel(), np.repeat(np.arange(n), k), (p[:, None] * k + np.arange(k)).ravel(),
                       totals, up[s].ravel(), p, np.repeat(np.arange(len(up[s])), k))
        return prob, rerake(x0, totals, s, "rerake_oneway"), (n, k)

    def twoway(s: AttrSet):
        ka, kb = ts.sizes[s[0]], ts.sizes[s[1]]
        x0 = np.where(ts.zero(s)[None], 0.0, t[s])
        row = np.arange(n * ka * kb) // kb
        prob = Problem(x0.ravel(), row, (p[row // ka] * ka + row % ka) * kb + np.arange(n * ka * kb) % kb,
                       out[(s[0],)].ravel(), up[s].ravel(), np.repeat(p, ka), np.repeat(np.arange(len(up[s])), ka * kb))
        return prob, rerake(x0, out[(s[0],)], s, "rerake_twoway"), (n, ka, kb)

    _solve([((level, s), t[s].size, lambda s=s: oneway(s)) for s in ts.sets(level, 1)], out, diag, level)
    _solve([((level, s), t[s].size, lambda s=s: twoway(s)) for s in ts.sets(level, 2)], out, diag, level)
    for s in ts.sets(level, 2):
        bm = out[s].sum(axis=1)
        diag.deviation(level, relative_error(bm, out[(s[1],)]), float(np.abs(bm - out[(s[1],)]).max(initial=0)))
    return out
