"""Stage 2 on record types: one iteration re-solves the whole relaxed problem (every link, every record).

The fitted workloads define the types (``record_types``); the relaxed problem over the type-pair link counts
(``type_problem``) has the paper's optimum with #types1 × #types2 variables; its solution is rounded with
UBS per row and the links are assigned within types (``type_assignment``). Used while the number of type
pairs stays within the public budget ``type_cells``; beyond it stage 2 falls back to random slices.
Post-processing of the releases: nothing here reads the real data or spends budget.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.core.errors import DataError
from privcube.relational.solvers.type_problem import TypeConstraints, solve_types, type_operator
from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload
from privcube.relational.stages.record_types import SideTypes, link_types, shared_records, type_pair_counts
from privcube.relational.stages.type_assignment import (
    assign_incremental,
    assign_links,
    balanced_within_types,
    round_type_counts,
)


@dataclass
class TypeStep:
    """One type-level iteration's result: the new links and what the report says about it."""

    si: np.ndarray
    sj: np.ndarray
    info: dict[str, Any]


def type_pairs(syn: CrossTables, ws: Sequence[CrossWorkload]) -> int:
    """How many type pairs the fitted workloads induce on the synthetic tables (compared with ``type_cells``)."""
    t1, t2 = link_types(syn, ws)
    return t1.size * t2.size


TYPE_STEPS = 500  # accelerated PGD steps per solve with ``type_iters: auto`` on grids up to WORK / 500 pairs
TYPE_WORK = 50_000_000  # type pairs × steps per solve beyond that (0.05–0.12 s a step per million pairs)
TYPE_STEPS_MIN = 50


def type_iterations(p: Mapping[str, Any], pairs: int) -> int:
    """PGD steps per type-level solve: ``type_iters``, or with ``auto`` 500 while the grid is small and a fixed
    amount of work (``TYPE_WORK`` type-pair steps, at least 50 steps) beyond, so one solve costs seconds."""
    if p["type_iters"] != "auto":
        return int(p["type_iters"])
    return max(TYPE_STEPS_MIN, min(TYPE_STEPS, TYPE_WORK // max(pairs, 1)))


def learned_left_degrees(p: Mapping[str, Any], kind: str) -> bool:
    """Many-to-many with ``degrees: preserve`` and ``left_degrees: learned``: each left type's link total is
    a variable of the problem, capped at d_max per record (the right side is capped as before)."""
    return kind == "many_to_many" and p["degrees"] == "preserve" and p["left_degrees"] == "learned"


def _constraints(p: Mapping[str, Any], kind: str, t1: SideTypes, t2: SideTypes, si: np.ndarray, m_syn: int,
                 no_diagonal: bool) -> tuple[TypeConstraints, np.ndarray, np.ndarray | None]:
    """The aggregated feasible set (without column caps), the integer bounds U and the left degrees kept."""
    W = np.outer(t1.count, t2.count).astype(float)
    U = W - (shared_records(t1, t2) if no_diagonal else 0.0)
    hi = np.divide(U, W, out=np.zeros_like(W), where=W > 0)
    deg1: np.ndarray | None = None
    row_caps: np.ndarray | None = None
    if kind == "one_to_many":
        rows: np.ndarray | None = t1.count.astype(float)
        deg1 = np.ones(t1.of.size, dtype=np.int64)
    elif learned_left_degrees(p, kind):
        rows, row_caps = None, t1.count.astype(float) * int(p["d_max"])
    elif p["degrees"] == "preserve":
        deg1 = np.bincount(si, minlength=t1.of.size).astype(np.int64)
        rows = np.bincount(t1.of, weights=deg1, minlength=t1.size).astype(float)
    else:
        rows = None
    return TypeConstraints(W, hi, rows, float(m_syn), row_caps=row_caps), U, deg1


def type_step(p: Mapping[str, Any], kind: str, syn: CrossTables, si: np.ndarray, sj: np.ndarray, m_syn: int,
              ws: Sequence[CrossWorkload], answers: Sequence[np.ndarray], noise: Any, t: int, *,
              no_diagonal: bool = False) -> TypeStep:
    """Solve the type-level relaxed problem against ``answers`` (marginals of ``ws``), round, assign links."""
    rng = noise.generator("relational", "types", t)
    t1, t2 = link_types(syn, ws)
    cons, U, deg1 = _constraints(p, kind, t1, t2, si, m_syn, no_diagonal)
    sizes = [w.sizes(syn.dom1, syn.dom2) for w in ws]
    op = type_operator([t1.cells(syn.dom1, w.left) for w in ws], [t2.cells(syn.dom2, w.right) for w in ws], sizes,
                       cons.W)
    targets = [m_syn * np.asarray(a, dtype=float) for a in answers]
    current = type_pair_counts(t1, t2, si, sj)
    x0 = np.divide(current, cons.W)
    iters = type_iterations(p, t1.size * t2.size)
    x = solve_types(op, targets, float(m_syn), cons, x0, iters=iters, rng=rng)
    capped = False
    d_max = int(p["d_max"])
    if p["degrees"] == "preserve":
        caps = t2.count.astype(float) * d_max
        if np.any((cons.W * x).sum(axis=0) > caps * (1 + 1e-9)) and caps.sum() >= m_syn:
            cons.caps, capped = caps, True  # the right cap binds: solve again with it (capped projection)
            x = solve_types(op, targets, float(m_syn), cons, x, iters=iters, rng=rng)
    cap = d_max if p["degrees"] == "preserve" else None
    L = cons.W * x
    totals = cons.rows
    if cons.row_caps is not None:  # left degrees learned: integer type totals (≤ n_a·d_max) first
        totals = round_type_counts(L.sum(axis=1)[None, :], cons.row_caps[None, :], None, m_syn, rng)[0]
    Lint = round_type_counts(L, U, totals, m_syn, rng)
    if cons.row_caps is not None and np.array_equal(Lint, current):  # every type-pair count kept: keep the links
        ni, nj = si, sj
    elif deg1 is None:  # learned or free degrees: each left type's links shared evenly by its records, dealt anew
        ni, nj = assign_links(t1, t2, Lint, balanced_within_types(t1, Lint.sum(axis=1), rng), rng,
                              no_diagonal=no_diagonal, cap=cap)
    else:  # row totals fixed: keep the current links the new counts allow, deal only the difference
        ni, nj = assign_incremental(t1, t2, Lint, si, sj, rng, no_diagonal=no_diagonal, cap=cap)
    if ni.size != m_syn:
        raise DataError(f"internal: link count changed from {m_syn} to {ni.size} in the type assignment")
    kept = _kept_links(si, sj, ni, nj)
    info = {"optimiser": "types", "types": [t1.size, t2.size], "type_iters": iters, "right_cap_in_problem": capped,
            "left_degrees": "learned" if cons.row_caps is not None else "kept" if deg1 is not None else "free",
            "links_changed_share": 1.0 - kept / max(m_syn, 1)}
    return TypeStep(ni, nj, info)


def _kept_links(si: np.ndarray, sj: np.ndarray, ni: np.ndarray, nj: np.ndarray, chunk: int = 1 << 20) -> int:
    """How many of the old links (si, sj) are among the new ones (pairs are distinct; chunked lookups)."""
    n2 = max(int(sj.max(initial=0)), int(nj.max(initial=0))) + 1
    new = ni * n2 + nj
    new.sort()
    kept = 0
    for s in range(0, si.size, chunk):
        old = si[s:s + chunk] * n2 + sj[s:s + chunk]
        pos = np.minimum(np.searchsorted(new, old), max(new.size - 1, 0))
        kept += int(np.count_nonzero(new[pos] == old)) if new.size else 0
    return kept


__all__ = ["TypeStep", "type_iterations", "type_pairs", "type_step"]
