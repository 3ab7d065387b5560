"""Controlled rounding of census tables to whole counts, top-down, keeping the hierarchy and invariants exactly
(Cox 1987, "A constructive procedure for unbiased controlled rounding"; Bacharach 1966).

Root: the total is an integer (the invariant, or the rounded total); each 1-way table is rounded by largest
remainder keeping the total. Each 2-D problem — the root's 2-way tables (rows a, columns b), a level's children x
cells matrix of a 1-way table (rows = children totals, columns = the parent's cells), a level's 2-way tables per
a-slice (rows = children's (c, a) cells, columns = the parent's (a, b) cells) — is zero-restricted controlled
rounding: every entry becomes the floor or the ceiling of its value with the row and column sums (integers,
rounded before) kept exactly: a maximum flow on the bipartite graph of the fractional entries (source → row:
the row's missing units, row → column: capacity 1 per fractional entry, column → sink), one graph for every
parent of a level and several tables at once. A fractional feasible flow exists when the entries' sums ARE the
integer margins, so an integral one does; since the parent's integers differ from its fractional values by
< 1, the children's entries are first re-raked to the integer margins (a small change, reported as
"max_change"), then rounded. Post-processing of released noisy answers: spends no privacy budget.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from privcube.core.errors import ConfigError

from .hierarchy import ROOT, Hierarchy
from .nonnegative import Diagnostics, transport_lp
from .raking import TOLERANCE, Margin, rake, relative_error, segment_margin
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
    return {lv: {s: out[lv][s] for s in tables[lv]} for lv in tables}, summary


def _snap(x: np.ndarray) -> np.ndarray:
    r = np.rint(x)
    return np.where(np.abs(x - r) <= SNAP, r, x)


def largest_remainder(x: np.ndarray, segment: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each entry floor or ceil, each segment summing to its integer target: the ceilings go to the largest
    fractional parts (``x`` already sums to ``targets`` per segment)."""
    x = _snap(np.asarray(x, dtype=np.float64))
    low = np.floor(x)
    frac = x - low
    need = np.rint(targets).astype(np.int64) - np.bincount(segment, weights=low, minlength=len(targets)).round().astype(np.int64)
    order = np.lexsort((-frac, segment))
    s = segment[order]
    first = np.searchsorted(s, np.arange(len(targets)))
    rank = np.arange(len(x)) - first[s]
    up = np.zeros(len(x), dtype=bool)
    up[order] = (rank < need[s]) & (frac[order] > 0)
    out = (low + up).astype(np.int64)
    if np.any(np.bincount(segment, weights=out, minlength=len(targets)) != np.rint(targets)):
        raise RuntimeError("census rounding: largest remainder could not meet a segment total (inputs not consistent)")
    return out


def flow_round(problems: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
               ) -> list[np.ndarray | None]:
    """Zero-restricted controlled rounding of independent 2-D problems (x, row id, column id, row sums,
    column sums) in one maximum-flow graph; None for a problem whose flow falls short (margins unreachable)."""
    if not problems:
        return []
    xs, rows, cols, R, C, ro, co = [], [], [], [], [], 0, 0
    for x, r, c, rs, cs in problems:
        xs.append(_snap(x)); rows.append(r + ro); cols.append(c + co)
        R.append(np.rint(rs).astype(np.int64)); C.append(np.rint(cs).astype(np.int64))
        ro += len(rs); co += len(cs)
    x, row, col = np.concatenate(xs), np.concatenate(rows), np.concatenate(cols)
    R_, C_ = np.concatenate(R), np.concatenate(C)
    low = np.floor(x)
    rho = R_ - np.bincount(row, weights=low, minlength=ro).round().astype(np.int64)
    gamma = C_ - np.bincount(col, weights=low, minlength=co).round().astype(np.int64)
    frac = np.flatnonzero(x > low)
    n = 2 + ro + co
    src = np.flatnonzero(rho > 0)
    snk = np.flatnonzero(gamma > 0)
    u = np.concatenate([np.zeros(len(src), np.int64), 2 + row[frac], 2 + ro + snk])
    v = np.concatenate([2 + src, 2 + ro + col[frac], np.ones(len(snk), np.int64)])
    cap = np.concatenate([rho[src], np.ones(len(frac), np.int64), gamma[snk]]).astype(np.int32)
    graph = csr_matrix((cap, (u, v)), shape=(n, n))
    flow = maximum_flow(graph, 0, 1).flow.tocoo()
    keys = flow.row.astype(np.int64) * n + flow.col
    order = np.argsort(keys)
    want = (2 + row[frac]).astype(np.int64) * n + (2 + ro + col[frac])
    pos = np.minimum(np.searchsorted(keys[order], want), len(keys) - 1)
    got = np.where(keys[order][pos] == want, np.asarray(flow.data)[order][pos], 0)
    out = low.astype(np.int64)
    out[frac] += np.maximum(got, 0).astype(np.int64)
    return _split_checked(out, row, col, R_, C_, problems)


def _split_checked(out, row, col, R, C, problems) -> list[np.ndarray | None]:
    ok_row = np.bincount(row, weights=out, minlength=len(R)) == R
    ok_col = np.bincount(col, weights=out, minlength=len(C)) == C
    res: list[np.ndarray | None] = []
    i = ro = co = 0
    for x, _, _, rs, cs in problems:
        good = ok_row[ro:ro + len(rs)].all() and ok_col[co:co + len(cs)].all()
        res.append(out[i:i + len(x)] if good else None)
        i += len(x); ro += len(rs); co += len(cs)
    return res


def _batched(problems: list, keys: list) -> dict:
    """flow_round over batches of at most BATCH_EDGES entries; {key: result}."""
    results: dict = {}
    batch, names, size = [], [], 0
    for key, prob in zip(keys, problems):
        batch.append(prob); names.append(key); size += len(prob[0])
        if size >= BATCH_EDGES:
            results.update(zip(names, flow_round(batch)))
            batch, names, size = [], [], 0
    results.update(zip(names, flow_round(batch)))
    return results


def _root(ts: TableSet, diag: Diagnostics, tol: float) -> dict[AttrSet, np.ndarray]:
    t = ts.tables[ROOT]
    total = np.rint(ts.fixed[ROOT] if ROOT in ts.fixed else t[()]).astype(np.int64)
    out: dict[AttrSet, np.ndarray] = {(): total}
    for s in ts.sets(ROOT, 1):
        x = _rescale(np.where(ts.zero(s), 0.0, t[s][0]), np.zeros(t[s].shape[1], np.int64), total)
        out[s] = largest_remainder(x, np.zeros(len(x), np.int64), total)[None, :]
    for s in ts.sets(ROOT, 2):
        a, b = s
        rows, cols = out[(a,)][0].astype(float), out[(b,)][0].astype(float)
        x, info = rake(np.where(ts.zero(s), 0.0, t[s]), [Margin(rows[None], axis=2), Margin(cols[None], axis=1)], tol=tol)
        na, nb = ts.zero(s).shape
        r = None
        if info["converged"]:
            r = flow_round([(x[0].ravel(), np.repeat(np.arange(na), nb), np.tile(np.arange(nb), na), rows, cols)])[0]
        if r is None:
            r = np.rint(transport_lp(t[s][0], ts.zero(s), rows, cols, s, integral=True)).astype(np.int64).ravel()
            diag.fallbacks.append(f"root {','.join(s)}")
        diag.add(ROOT, "root_twoway", info)
        out[s] = r.reshape(1, na, nb)
    return out


def _rescale(x: np.ndarray, segment: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Scale each segment of ``x`` to sum to its (integer) target (equal shares where it sums to 0)."""
    sums = np.bincount(segment, weights=x, minlength=len(targets))
    counts = np.bincount(segment, minlength=len(targets))
    scaled = x * np.where(sums > 0, targets / np.where(sums > 0, sums, 1.0), 0.0)[segment]
    return scaled + np.where(sums > 0, 0.0, targets / np.maximum(counts, 1))[segment]


def _level(ts: TableSet, level: str, up: dict[AttrSet, np.ndarray], diag: Diagnostics, tol: float
           ) -> dict[AttrSet, np.ndarray]:
    h = ts.hierarchy
    t = ts.tables[level]
    p, starts = h.parent_of(level), h.segment_starts(level)
    n = h.n_units(level)
    if level in ts.fixed:
        totals = np.rint(ts.fixed[level]).astype(np.int64)
    else:
        totals = largest_remainder(_rescale(t[()], p, up[()].astype(float)), p, up[()])
    out: dict[AttrSet, np.ndarray] = {(): totals}
    probs, keys, shapes = [], [], {}
    for s in ts.sets(level, 1):
        k = ts.sizes[s[0]]
        x, info = rake(np.where(ts.zero(s)[None], 0.0, t[s]),
                       [Margin(totals.astype(float), axis=1), segment_margin(up[s].astype(float), starts, p)], tol=tol)
        diag.add(level, "oneway", info)
        probs.append((x.ravel(), np.repeat(np.arange(n), k), (p[:, None] * k + np.arange(k)).ravel(),
                      totals, up[s].ravel()))
        keys.append(s); shapes[s] = (n, k)
    _collect(_batched(probs, keys), shapes, out, level)
    probs, keys = [], []
    for s in ts.sets(level, 2):
        ka, kb = ts.sizes[s[0]], ts.sizes[s[1]]
        ca = out[(s[0],)].astype(float)
        x, info = rake(np.where(ts.zero(s)[None], 0.0, t[s]),
                       [Margin(ca, axis=2), segment_margin(up[s].astype(float), starts, p)], tol=tol)
        diag.add(level, "twoway_slices", info)
        cell = np.arange(n * ka * kb)
        row = cell // kb
        col = (p[row // ka] * ka + row % ka) * kb + cell % kb
        probs.append((x.ravel(), row, col, out[(s[0],)].ravel(), up[s].ravel()))
        keys.append(s); shapes[s] = (n, ka, kb)
    _collect(_batched(probs, keys), shapes, out, level)
    for s in ts.sets(level, 2):
        bm = out[s].sum(axis=1)
        diag.deviation(level, relative_error(bm, out[(s[1],)]), float(np.abs(bm - out[(s[1],)]).max(initial=0)))
    return out


def _collect(results: dict, shapes: dict, out: dict, level: str) -> None:
    for s, r in results.items():
        if r is None:
            raise RuntimeError(f"census rounding: the flow for table {','.join(s)} at level {level!r} fell short "
                               f"(its margins were not reached by raking)")
        out[s] = r.reshape(shapes[s])
