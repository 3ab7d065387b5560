"""Non-negative census tables that add up exactly, top-down over the geography tree (after GLS).

Root: the total is fixed (an invariant, or the estimate clipped at 0); each 1-way table is the Euclidean
projection onto {x >= 0, structural zeros 0, sum = total}; each 2-way table is raked (2-D IPF) to its two
fixed 1-way margins, then finished exactly (an LP only when the finish would fill a structural zero).
Each level, all parents at once: children totals are projected onto {>= 0, sum = parent's total} (or are the
invariants); each 1-way table a is the children x a matrix fitted to row sums = children totals and column
sums = parent's table; each 2-way table (a, b) is the children x a x b array raked to (c, a), (c, b) and the
parent's (a, b) for a bounded number of sweeps ((c, b) first made consistent with the parent's b-margin), then
each a-slice fitted to (c, a) and the parent's (a, b) only, so those hold exactly and (c, b) as well as the
3-margin problem allows (reported: with noisy margins it is often infeasible). "Fitted" = a 2-D
transportation problem per parent: raked for at most ``sweeps`` (IPF converges only sublinearly when the fit has
cells near 0, i.e. small counts under large noise), then finished exactly by one non-negative step
(:mod:`.transport`). So every level's output is exactly consistent before the next level uses it, and the
work is bounded whatever the input. Raking starts (:class:`Start`) from max(estimate, floor) off the
structural zeros; optionally from the estimate projected onto the unit's fitted margin (better where many
cells are truly 0) and with prior pseudo-counts spread as the parent's table (better for units whose cells
are mostly noise). Post-processing of released noisy answers: spends no privacy budget.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy.optimize import linprog

from privcube.core.errors import ConfigError

from .hierarchy import ROOT, Hierarchy
from .raking import ACCEPT, TOLERANCE, Margin, rake, relative_error, segment_margin
from .tables import AttrSet, Tables, TableSet, prepare
from .transport import finish_matrix, finish_transport

#: sweeps of the 3-margin raking of a 2-way table before the final per-a-slice raking
SWEEPS_3D = 50
#: sweeps of raking of each 2-D transportation problem before its exact finish
SWEEPS_2D = 30


def nonnegative_tables(hierarchy: Hierarchy, tables: Mapping[str, Mapping[AttrSet, np.ndarray]], *,
                       zeros: Mapping[AttrSet, np.ndarray] | None = None,
                       fixed_totals: Mapping[str, np.ndarray] | None = None,
                       floor: float | Mapping[str, float] = 1e-3, tol: float = TOLERANCE, sweeps_3d: int = SWEEPS_3D,
                       sweeps: int = SWEEPS_2D,
                       prior: float | Mapping[str, float] = 0.0, project: bool | Mapping[str, bool] = False,
                       ) -> tuple[dict[str, dict[AttrSet, np.ndarray]], dict[str, Any]]:
    """Every cell >= 0, structural zeros 0, children summing to their parent for every table, 1-way tables
    summing to the unit total, 2-way a-margins equal to the 1-way a table; returns (tables, diagnostics) with
    the keys of ``tables`` (derived sub-margins are used, not returned). ``floor``, ``prior`` (pseudo-counts
    per cell, ~ the noise sd of a level whose units are small) and ``project`` are per level when mappings
    (level "" = the root); ``sweeps`` / ``sweeps_3d`` bound the raking before each exact finish."""
    ts = prepare(hierarchy, tables, zeros, fixed_totals)
    rules = {lv: Start(float(_per_level(floor, lv, 1e-3)), float(_per_level(prior, lv, 0.0)),
                       bool(_per_level(project, lv, False))) for lv in ts.chain}
    diag = Diagnostics()
    out: Tables = {ROOT: _root(ts, diag, rules[ROOT], tol, sweeps)}
    for depth in range(1, len(ts.chain)):
        level = ts.chain[depth]
        out[level] = _level(ts, level, out[ts.chain[depth - 1]], diag, rules[level], tol, sweeps, sweeps_3d)
    return {lv: {s: out[lv][s] for s in tables[lv]} for lv in tables}, diag.summary()


class Diagnostics:
    """Per (level, stage): tables, max iterations, max residual, all converged; 2-way b-margin deviations."""

    def __init__(self) -> None:
        self.stages: dict[tuple[str, str], dict[str, Any]] = {}
        self.b_margin: dict[str, float] = {}
        self.b_margin_abs: dict[str, float] = {}
        self.fallbacks: list[str] = []
        self.reraked: dict[str, tuple[int, int]] = {}

    def add(self, level: str, stage: str, info: Mapping[str, Any], seconds: float = 0.0) -> None:
        """Fold one raking's info (and its wall time) into its stage."""
        s = self.stages.setdefault((level, stage), {"level": level, "stage": stage, "tables": 0, "iterations": 0,
                                                    "max_residual": 0.0, "converged": True, "seconds": 0.0,
                                                    "finish_max_change": 0.0, "input_gap": 0.0})
        s["tables"] += 1
        s["iterations"] = max(s["iterations"], int(info.get("iterations", 0)))
        s["max_residual"] = max(s["max_residual"], float(info.get("max_residual", 0.0)))
        s["converged"] = s["converged"] and bool(info.get("converged", True))
        s["seconds"] += seconds
        s["finish_max_change"] = max(s["finish_max_change"], float(info.get("finish_max_change", 0.0)))
        s["input_gap"] = max(s["input_gap"], float(info.get("input_gap", 0.0)))

    def deviation(self, level: str, rel: float, absolute: float) -> None:
        """A 2-way table's b-margin against the unit's 1-way b table."""
        self.b_margin[level] = max(self.b_margin.get(level, 0.0), rel)
        self.b_margin_abs[level] = max(self.b_margin_abs.get(level, 0.0), absolute)

    def summary(self) -> dict[str, Any]:
        """The dict handed back: "stages" (list: per level and stage, tables, max raking "iterations",
        "max_residual" after the finish, "converged", "seconds", "finish_max_change" (largest cell change of the
        exact finish), "input_gap" (largest relative mismatch of a problem's row and column totals: > 1e-9
        means inconsistent inputs, which no fitting can meet)), "converged", "max_residual" (over the exact
        stages), "max_input_gap", "b_margin_max_deviation" / "b_margin_max_abs_deviation" per level,
        "lp_fallbacks"."""
        stages = list(self.stages.values())
        final = [s for s in stages if s["stage"] != "twoway_3d"]
        return {"stages": stages, "converged": all(s["converged"] for s in final),
                "max_residual": max((s["max_residual"] for s in final), default=0.0),
                "max_input_gap": max((s["input_gap"] for s in stages), default=0.0),
                "b_margin_max_deviation": dict(self.b_margin), "b_margin_max_abs_deviation": dict(self.b_margin_abs),
                "lp_fallbacks": list(self.fallbacks)}


def project_segments(values: np.ndarray, segment: np.ndarray, targets: np.ndarray,
                     free: np.ndarray | None = None) -> np.ndarray:
    """Euclidean projection of each segment of ``values`` onto {x >= 0, sum = target}, entries not ``free``
    fixed at 0 (Held, Wolfe & Crowder's sort-and-threshold, all segments at once)."""
    v = np.asarray(values, dtype=np.float64)
    free = np.ones(v.shape, dtype=bool) if free is None else free
    n_seg = len(targets)
    idx = np.flatnonzero(free)
    seg = segment[idx]
    empty = (np.bincount(seg, minlength=n_seg) == 0) & (targets > 0)
    if np.any(empty):
        raise ConfigError("census structural zeros: a table has every cell impossible but a positive total")
    order = idx[np.lexsort((-v[idx], seg))]
    u, s = v[order], segment[order]
    first = np.searchsorted(s, np.arange(n_seg))
    cs = np.cumsum(u)
    base = np.where(first > 0, cs[np.maximum(first - 1, 0)], 0.0)
    k = np.arange(len(u)) - first[s] + 1
    csum = cs - base[s]
    cond = u - (csum - targets[s]) / k > 0
    kmax = np.zeros(n_seg, dtype=np.int64)
    np.maximum.at(kmax, s[cond], k[cond])
    pick = first + np.maximum(kmax, 1) - 1
    theta = np.where(kmax > 0, (csum[np.minimum(pick, len(u) - 1)] - targets) / np.maximum(kmax, 1), np.inf)
    out = np.zeros_like(v)
    out[order] = np.maximum(u - theta[s], 0.0)
    sums = np.bincount(segment, weights=out, minlength=n_seg)      # the global cumsum's rounding, per segment
    return out * np.divide(targets, sums, out=np.ones(n_seg), where=sums > 0)[segment]


def _start(x: np.ndarray, zero: np.ndarray, floor: float) -> np.ndarray:
    return np.where(zero, 0.0, np.maximum(x, floor))


@dataclass(frozen=True)
class Start:
    """Where a level's raking starts: max(estimate, ``floor``) off the structural zeros; with ``project``, the
    estimate is first projected (Euclidean) onto {>= 0, sums = the unit's already fitted margin} row by row,
    which removes the mass clipping adds where many cells are truly zero; ``prior`` pseudo-counts per cell,
    spread as the parent's table, shrink units whose cells are mostly noise towards their parent."""

    floor: float = 1e-3
    prior: float = 0.0
    project: bool = False


def _per_level(value: Any, level: str, default: Any) -> Any:
    return value.get(level, default) if isinstance(value, Mapping) else value


def _begin(ts: TableSet, level: str, s: AttrSet, rows: np.ndarray, up: dict[AttrSet, np.ndarray] | None,
           rule: Start) -> np.ndarray:
    """The start of table ``s`` of ``level`` whose sums over its last axis must be ``rows``."""
    x, zero = ts.tables[level][s], ts.zero(s)
    if rule.project:
        width = x.shape[-1]
        free = np.broadcast_to(~zero[None], x.shape).ravel()
        x = project_segments(x.ravel(), np.repeat(np.arange(rows.size), width), rows.ravel(), free).reshape(x.shape)
    x = _start(x, zero[None], rule.floor)
    if rule.prior > 0 and up is not None:
        p = ts.hierarchy.parent_of(level)
        share = up[s] / np.maximum(up[()], 1e-300).reshape((-1,) + (1,) * len(s))
        x = x + (rule.prior * int(np.prod(up[s].shape[1:]))) * share[p]
    return x


def _root(ts: TableSet, diag: Diagnostics, rule: "Start", tol: float, sweeps: int) -> dict[AttrSet, np.ndarray]:
    t = ts.tables[ROOT]
    total = ts.fixed[ROOT] if ROOT in ts.fixed else np.maximum(t[()], 0.0)
    out: dict[AttrSet, np.ndarray] = {(): total.copy()}
    for s in ts.sets(ROOT, 1):
        x = t[s][0]
        out[s] = project_segments(x, np.zeros(len(x), dtype=np.int64), total, ~ts.zero(s))[None, :]
    for s in ts.sets(ROOT, 2):
        a, b = s
        zero = ts.zero(s)
        started = time.perf_counter()
        margins = [Margin(out[(a,)], axis=2), Margin(out[(b,)], axis=1)]
        x, info = rake(_begin(ts, ROOT, s, out[(a,)], None, rule), margins, tol=tol, max_sweeps=sweeps)
        x = finish_matrix(x[0], out[(a,)][0], out[(b,)][0])[None]
        if np.any(x[0][zero] > 0):
            x = transport_lp(t[s][0], zero, out[(a,)][0], out[(b,)][0], s)[None]
            diag.fallbacks.append(f"root {','.join(s)}")
        info = {**info, "max_residual": max(relative_error(m.of(x), m.target) for m in margins)}
        info["converged"] = info["max_residual"] <= ACCEPT
        diag.add(ROOT, "root_twoway", info, time.perf_counter() - started)
        out[s] = x
    return out


def transport_lp(x0: np.ndarray, zero: np.ndarray, rows: np.ndarray, cols: np.ndarray, s: AttrSet,
                 *, integral: bool = False) -> np.ndarray:
    """The (|a|, |b|) table nearest ``x0`` in L1 (``integral``: a vertex, integer for integer margins) with
    the given margins and zeros; ConfigError naming the table when the zeros make the margins infeasible."""
    cells = np.flatnonzero(~zero.ravel())
    na, nb = zero.shape
    k = len(cells)
    a_eq = np.zeros((na + nb, k))
    a_eq[cells // nb, np.arange(k)] = 1.0
    a_eq[na + cells % nb, np.arange(k)] = 1.0
    target = x0.ravel()[cells]
    if integral:
        res = linprog(-np.log(np.maximum(target, 1e-9)), A_eq=a_eq, b_eq=np.concatenate([rows, cols]),
                      bounds=(0, None), method="highs-ds")
        sol = res.x
    else:
        eye = np.eye(k)
        a_ub = np.block([[eye, -eye], [-eye, -eye]])
        res = linprog(np.concatenate([np.zeros(k), np.ones(k)]), A_ub=a_ub, b_ub=np.concatenate([target, -target]),
                      A_eq=np.hstack([a_eq, np.zeros((na + nb, k))]), b_eq=np.concatenate([rows, cols]),
                      bounds=(0, None), method="highs")
        sol = None if res.x is None else res.x[:k]
    if res.status != 0 or sol is None:
        raise ConfigError(f"census structural zeros of table {','.join(s)}: its fixed margins cannot be met "
                          f"with those cells zero (the zero rule contradicts the margins)")
    out = np.zeros(na * nb)
    out[cells] = np.maximum(sol, 0.0)
    return out.reshape(na, nb)


def _level(ts: TableSet, level: str, up: dict[AttrSet, np.ndarray], diag: Diagnostics, rule: "Start",
           tol: float, sweeps: int, sweeps_3d: int) -> dict[AttrSet, np.ndarray]:
    h = ts.hierarchy
    t = ts.tables[level]
    p, starts = h.parent_of(level), h.segment_starts(level)
    if level in ts.fixed:
        totals = ts.fixed[level].copy()
    else:
        totals = project_segments(t[()], p, up[()])
    out: dict[AttrSet, np.ndarray] = {(): totals}
    for s in ts.sets(level, 1):
        started = time.perf_counter()
        x, info = fit_transport(_begin(ts, level, s, totals, up, rule)[:, None, :], totals[:, None],
                                up[s][:, None, :], starts, p, tol=tol, sweeps=sweeps)
        diag.add(level, "oneway", info, time.perf_counter() - started)
        out[s] = x[:, 0, :]
    for s in ts.sets(level, 2):
        start = _begin(ts, level, s, out[(s[0],)], up, rule)
        out[s] = _twoway(ts, level, s, out, up[s], start, diag, tol, sweeps, sweeps_3d)
    return out


def _twoway(ts: TableSet, level: str, s: AttrSet, out: dict[AttrSet, np.ndarray], up: np.ndarray, start: np.ndarray,
            diag: Diagnostics, tol: float, sweeps: int, sweeps_3d: int) -> np.ndarray:
    """A level's 2-way table: the b target made consistent with the parent's b-margin, 3-margin raking
    (bounded), then each a-slice fitted exactly to (c, a) and the parent's (a, b)."""
    h = ts.hierarchy
    p, starts = h.parent_of(level), h.segment_starts(level)
    a, b = s
    ca, cb = out[(a,)], out[(b,)]
    started = time.perf_counter()
    cb_fit, _ = fit_transport(cb[:, None, :], out[()][:, None], up.sum(axis=1)[:, None, :], starts, p,
                              tol=tol, sweeps=sweeps)
    parent = segment_margin(up, starts, p)
    x, info = rake(start,
                   [Margin(ca, axis=2), Margin(cb_fit[:, 0, :], axis=1), parent], tol=tol, max_sweeps=sweeps_3d)
    diag.add(level, "twoway_3d", info, time.perf_counter() - started)
    started = time.perf_counter()
    x, info = fit_transport(x, ca, up, starts, p, tol=tol, sweeps=sweeps)
    diag.add(level, "twoway_slices", info, time.perf_counter() - started)
    dev = np.abs(x.sum(axis=1) - cb)
    diag.deviation(level, relative_error(x.sum(axis=1), cb), float(dev.max(initial=0.0)))
    return x


def fit_transport(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, starts: np.ndarray, parent: np.ndarray,
                  *, tol: float = TOLERANCE, sweeps: int = SWEEPS_2D) -> tuple[np.ndarray, dict[str, Any]]:
    """``x`` (children, K, J) >= 0 raked (at most ``sweeps``) to row sums ``rows`` (children, K) and column sums
    ``cols`` (parents, K, J) over each parent's children, then finished exactly (:func:`finish_transport`).
    Info: raking "iterations", "max_residual" after the finish, "converged", "finish_max_change", "input_gap"."""
    margins = [Margin(rows, axis=2), segment_margin(cols, starts, parent)]
    gap = relative_error(np.add.reduceat(rows, starts, axis=0), cols.sum(axis=2))
    x, info = rake(x, margins, tol=tol, max_sweeps=sweeps)
    done = finish_transport(x, rows, cols, starts, parent)
    change = float(np.max(np.abs(done - x), initial=0.0))
    x = done
    residual = max(relative_error(m.of(x), m.target) for m in margins)
    return x, {"iterations": info["iterations"], "max_residual": residual, "converged": residual <= ACCEPT,
               "finish_max_change": change, "input_gap": gap}
