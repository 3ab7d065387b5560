"""Stage 2: learning the links (Alg. 4's loop): start from data-independent random links, then per
iteration select and measure cross workloads (``selection``), turn the releases into fitting targets
(optionally shrunk, post-processing) and re-optimise disjoint random slices by PGD + rounding.

Everything after the releases is post-processing; iterations without a new measurement re-optimise
other slices against the answers already released.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.core.errors import CheckpointError, DataError
from privcube.privacy.noise import NoiseSource
from privcube.relational.solvers.slicing import (
    Slice,
    SliceTask,
    choose_slices_m2m,
    choose_slices_o2m,
    edges_in,
    map_slices,
    slice_shape,
    sparse_block,
)
from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload, FixedLinkCounts, RealCross
from privcube.relational.stages.selection import Schedule, measure_first, select_and_measure
from privcube.relational.stages.shrinkage import components, shrink, wiener
from privcube.relational.stages.synthetic_degrees import balanced_degrees, links_with_degrees
from privcube.relational.stages.type_iteration import type_pairs, type_step


def random_links(rng: np.random.Generator, n1: int, n2: int, m: int, no_diagonal: bool) -> tuple[np.ndarray, np.ndarray]:
    """m distinct uniformly random pairs of [n1] × [n2] (off the diagonal i = j when ``no_diagonal``)."""
    if not no_diagonal:
        flat = rng.choice(n1 * n2, size=m, replace=False)
        i, j = np.divmod(flat, n2)
        return i.astype(np.int64), j.astype(np.int64)
    # n × n without the diagonal: enumerate the n·(n−1) off-diagonal cells row by row
    flat = rng.choice(n1 * (n2 - 1), size=m, replace=False)
    i, r = np.divmod(flat, n2 - 1)
    j = r + (r >= i)
    return i.astype(np.int64), j.astype(np.int64)


def initial_links(kind: str, noise: NoiseSource, n1s: int, n2s: int, m_syn: int,
                  no_diag: bool, degrees: str = "free") -> tuple[np.ndarray, np.ndarray]:
    """The data-independent start: one uniform parent per child (one-to-many) or m_syn random pairs
    (``degrees: preserve``: with balanced degrees on both sides, each ⌊m/n⌋ or ⌈m/n⌉)."""
    rng0 = noise.generator("relational", "init")
    if kind == "one_to_many":
        return np.arange(n1s, dtype=np.int64), rng0.integers(0, n2s, size=n1s).astype(np.int64)
    if degrees == "preserve":
        return links_with_degrees(balanced_degrees(n1s, m_syn, rng0), balanced_degrees(n2s, m_syn, rng0), rng0,
                                  no_diagonal=no_diag)
    return random_links(rng0, n1s, n2s, m_syn, no_diag)


def dp_fit_report(syn: CrossTables, si: np.ndarray, sj: np.ndarray, selected: list[CrossWorkload],
                  released: list[np.ndarray], sigmas: list[float]) -> dict[str, Any]:
    """Differentially private error summary: final synthetic marginals against the noisy releases.

    Only DP outputs enter (synthetic links/tables and the Gaussian releases), so this is post-processing.
    ``average_l1_vs_noisy_pct`` = 100·mean_w ‖P_w(syn) − y_w‖₁ includes the measurement noise, whose own
    expected L1 is ``expected_noise_l1_pct`` = 100·mean_w d_w·σ·√(2/π); ``debiased_l1_pct`` subtracts it
    (clipped at 0), a rough DP estimate of the error on the measured workloads.
    """
    if not selected:
        return {"workloads": 0, "note": "no workloads were measured (iterations: 0)"}
    l1 = [float(np.abs(syn.marginal(w, si, sj) - y).sum()) for w, y in zip(selected, released)]
    noise_l1 = [y.size * sigma * math.sqrt(2.0 / math.pi) for y, sigma in zip(released, sigmas)]
    avg, nz = 100.0 * float(np.mean(l1)), 100.0 * float(np.mean(noise_l1))
    return {"workloads": len(selected), "average_l1_vs_noisy_pct": avg, "expected_noise_l1_pct": nz,
            "debiased_l1_pct": max(avg - nz, 0.0),
            "note": "differentially private (computed from the noisy releases and the synthetic data only); "
                    "measured workloads only, in the paper's % L1 units"}


@dataclass
class LinkState:
    """The links stage's state (what a checkpoint holds): current links, the initial links' marginals (``prior``:
    the shrinkage prior with 'initial'; their count table, not a copy of the links), releases, history."""

    si: np.ndarray
    sj: np.ndarray
    prior: FixedLinkCounts
    selected: list[CrossWorkload] = field(default_factory=list)
    released: list[np.ndarray] = field(default_factory=list)  # raw Gaussian releases (before any shrinkage)
    history: list[dict[str, Any]] = field(default_factory=list)
    t_start: int = 0
    init_err: float | None = None
    sigmas: list[float] = field(default_factory=list)  # each release's noise std (marginal units)
    rho_spent: float = 0.0  # links budget spent so far (selection + measurement)
    degree_hist: np.ndarray | None = None  # noisy degree histograms: one-to-many the binned children per parent; many-to-many (2, d_max+1), NaN for a side not released

    def checkpoint_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a checkpoint commits after an iteration."""
        extra = {} if self.degree_hist is None else {"degree_hist": self.degree_hist}
        return {"si": self.si, "sj": self.sj, **self.prior.arrays(), **extra,
                **{f"released.{q}": y for q, y in enumerate(self.released)}}


def restore_link_state(state: Mapping[str, Any], by_label: Mapping[str, CrossWorkload], m_syn: int,
                       init_err: float | None) -> LinkState:
    """The links stage's state from a checkpoint committed after an iteration (CheckpointError if incomplete)."""
    meta, arrs = state["meta"], state["arrays"]
    try:
        selected = [by_label[lab] for lab in meta["selected"]]
        si, sj = (np.asarray(arrs[k], dtype=np.int64) for k in ("si", "sj"))
        if "prior_counts" in arrs:
            prior = FixedLinkCounts.restore(np.asarray(arrs["prior_counts"], dtype=float), None, m_syn)
        else:
            prior = FixedLinkCounts.restore(None, tuple(np.asarray(arrs[k], dtype=np.int64) for k in ("si0", "sj0")),
                                            m_syn)
        ls = LinkState(si, sj, prior, selected=selected,
                       released=[np.asarray(arrs[f"released.{q}"], dtype=float) for q in range(len(selected))],
                       history=list(meta["history"]), t_start=int(meta["iteration"]) + 1,
                       init_err=meta.get("init_err", init_err), sigmas=[float(x) for x in meta["sigmas"]],
                       rho_spent=float(meta["rho_links_spent"]),
                       degree_hist=np.asarray(arrs["degree_hist"], dtype=float) if "degree_hist" in arrs else None)
    except KeyError as e:
        raise CheckpointError(f"relational checkpoint lacks entry {e}") from None
    if ls.si.size != m_syn or ls.sj.size != m_syn:
        raise CheckpointError(f"relational checkpoint holds {ls.si.size} links, expected {m_syn}")
    return ls


def fit_targets(p: Mapping[str, Any], sched: Schedule, syn: CrossTables, ls: LinkState) -> list[np.ndarray]:
    """The releases as fitting targets: as they are, or (shrinkage) each noisy-enough one shrunk towards a
    prior: ('initial', the default) the random start's marginal, fixed and data-independent, or ('current')
    the current synthetic marginal, which lets the targets creep towards the noise; ``shrink_by``
    (``by_components``) shrinks each ANOVA component of a release on its own (``shrink``). Post-processing."""
    if not sched.shrinkage:
        return list(ls.released)
    def prior(w: CrossWorkload) -> np.ndarray:
        return ls.prior.marginal(syn, w) if p["shrink_towards"] == "initial" else syn.marginal(w, ls.si, ls.sj)

    if p["shrink_by"] == "pooled":
        return pooled_targets(syn, ls.selected, ls.released, ls.sigmas,
                              [prior(w) for w in ls.selected], float(p["shrinkage_margin"]))
    return [shrink(y, prior(w), sg, float(p["shrinkage_margin"]),
                   (*syn.dom1.shape_of(w.left), *syn.dom2.shape_of(w.right))
                   if by_components(p["shrink_by"], sg, y.size) else None)
            for w, y, sg in zip(ls.selected, ls.released, ls.sigmas)]


def pooled_targets(syn: CrossTables, selected: list[CrossWorkload], released: list[np.ndarray],
                   sigmas: list[float], priors: list[np.ndarray], margin: float) -> list[np.ndarray]:
    """``shrink_by: pooled``: consistent targets. Every release's difference from its prior gives, per attribute
    subset S of its workload, an estimate of the S-marginal's ANOVA component (summed over the other axes:
    noise variance σ²·N per cell, N the cells summed); the estimates of one S from all releases are averaged
    with weights 1/(σ²·N), shrunk once on the pooled variance, and every release is rebuilt from the same
    components, so overlapping releases agree (least squares under the ANOVA model). Post-processing."""
    from privcube.relational.solvers.projection import project_rows_simplex

    axes_of = [[("1", a) for a in w.left] + [("2", b) for b in w.right] for w in selected]
    sizes = {**{("1", a): n for a, n in zip(syn.dom1.attributes, syn.dom1.shape)},
             **{("2", b): n for b, n in zip(syn.dom2.attributes, syn.dom2.shape)}}
    est: dict[tuple, list[tuple[np.ndarray, float]]] = {}
    for axes, y, prior, sg in zip(axes_of, released, priors, sigmas):
        if not math.isfinite(sg):
            continue
        diff = (y - prior).reshape([sizes[a] for a in axes])
        for sub in _subsets(len(axes)):
            rest = tuple(k for k in range(len(axes)) if k not in sub)
            c = _centred(diff.sum(axis=rest) if rest else diff)
            n_rest = int(np.prod([sizes[axes[k]] for k in rest])) if rest else 1
            est.setdefault(tuple(axes[k] for k in sub), []).append((c, max(sg * sg * n_rest, 1e-300)))
    shrunk = {}
    for key, parts in est.items():
        wts = np.array([1.0 / v for _, v in parts])
        mean = sum(wt * c for wt, (c, _) in zip(wts, parts)) / wts.sum()
        dim = int(np.prod([sizes[a] - 1 for a in key]))
        shrunk[key] = wiener(mean, dim, math.sqrt(1.0 / wts.sum()), margin) if dim else 0.0 * mean
    out = []
    for axes, prior in zip(axes_of, priors):
        shape = [sizes[a] for a in axes]
        t = prior.reshape(shape).astype(float).copy()
        for sub in _subsets(len(axes)):
            key = tuple(axes[k] for k in sub)
            if key not in shrunk:
                continue
            n_rest = int(np.prod([shape[k] for k in range(len(axes)) if k not in sub]))
            t += np.expand_dims(shrunk[key], [k for k in range(len(axes)) if k not in sub]) / n_rest
        out.append(project_rows_simplex(t.ravel()[None, :])[0])
    return out


def _subsets(k: int) -> list[tuple[int, ...]]:
    """The non-empty subsets of range(k), as sorted index tuples."""
    return [tuple(a for a in range(k) if m >> a & 1) for m in range(1, 1 << k)]


def _centred(x: np.ndarray) -> np.ndarray:
    """x centred along every axis (its top ANOVA component)."""
    for ax in range(x.ndim):
        x = x - x.mean(axis=ax, keepdims=True)
    return x


#: ``shrink_by: auto`` shrinks a release by components when its expected noise norm σ·√cells is at most this
#: (public: σ and the cell count); noisier releases are shrunk as a whole (measured: see the mechanism's notes).
COMPONENTS_MAX_NOISE = 0.1


def by_components(mode: str, sigma: float, cells: int) -> bool:
    """Whether a release is shrunk by ANOVA components (``components``; ``auto``: only if σ·√cells ≤
    ``COMPONENTS_MAX_NOISE``, where the many small components do not let noise through) or as a whole."""
    if mode == "auto":
        return math.isfinite(sigma) and sigma * math.sqrt(cells) <= COMPONENTS_MAX_NOISE * (1 + 1e-9)
    return mode == "components"


def _fit_workloads(p: Mapping[str, Any], syn: CrossTables, si: np.ndarray, sj: np.ndarray,
                   selected: list[CrossWorkload], answers: list[np.ndarray]) -> tuple[list[CrossWorkload], list[np.ndarray]]:
    """The workloads a slice fits: all, or (``workloads_per_slice``) the worst-fitted ones."""
    use = list(range(len(selected)))
    wps = p["workloads_per_slice"]
    if wps is not None and len(use) > int(wps):
        err = [np.abs(syn.marginal(w, si, sj) - a).sum() for w, a in zip(selected, answers)]
        use = sorted(np.argsort(err)[::-1][: int(wps)].tolist())
    return [selected[q] for q in use], [answers[q] for q in use]


def _choose_slices(p: Mapping[str, Any], kind: str, si: np.ndarray, sj: np.ndarray, n1s: int, n2s: int,
                   rng: np.random.Generator) -> list[Any]:
    """This iteration's disjoint random slices (data-independent given the synthetic links).

    ``slices_per_iteration: all`` covers everything each iteration: one-to-many, every parent (blocks of
    parents with all their children); many-to-many with ``degrees: preserve``, every left record (blocks of
    rows × all columns: rows keep their degrees, so blocks do not interact); otherwise as many disjoint
    slices as fit.
    """
    cells = float(p["slice_cells"])
    cover = p["slices_per_iteration"] == "all"
    if cover and kind == "many_to_many" and p["degrees"] == "preserve":
        step = max(1, int(cells // max(n2s, 1)))
        perm = rng.permutation(n1s)
        cols = np.arange(n2s, dtype=np.int64)
        return [Slice(np.sort(perm[k:k + step]).astype(np.int64), cols) for k in range(0, n1s, step)]
    n_sl = max(n1s, n2s) if cover else int(p["slices_per_iteration"])
    if cover and kind == "one_to_many":
        s2 = max(1, min(n2s, int(math.sqrt(cells * n2s / max(n1s, 1)))))
    else:
        s1, s2 = slice_shape(n1s, n2s, fraction=p["slice_fraction"], cells=cells)
    if kind == "one_to_many":
        parent_of = np.empty(n1s, dtype=np.int64)
        parent_of[si] = sj
        max_rows = n1s if cover else max(1, int(cells // s2))
        slices = choose_slices_o2m(parent_of, n2s, rng, s2, max_rows, n_sl)
        if cover and n2s % s2:  # the parents left over by the equal blocks
            slices += _rest_of(parent_of, n2s, slices)
        return slices
    return choose_slices_m2m(n1s, n2s, si, sj, rng, s1, s2, n_sl, float(p["guaranteed"]))


def _rest_of(parent_of: np.ndarray, n2s: int, slices: list[Any]) -> list[Any]:
    """One more slice of the parents in no block yet (cover mode), with all their children."""
    taken = np.zeros(n2s, dtype=bool)
    for sl in slices:
        taken[sl.cols] = True
    rest = np.flatnonzero(~taken).astype(np.int64)
    if not rest.size:
        return []
    return [Slice(np.flatnonzero(np.isin(parent_of, rest)).astype(np.int64), rest)]


def _slice_task(p: Mapping[str, Any], kind: str, syn: CrossTables, sl: Any, inside: np.ndarray, si: np.ndarray,
                sj: np.ndarray, ws: list[CrossWorkload], ans: list[np.ndarray], full: list[np.ndarray], n_slices: int,
                m_syn: int, noise: NoiseSource, key: tuple, no_diagonal: bool) -> SliceTask:
    """One slice's solve: its current block (sparse), per-workload cell indices and count targets."""
    B0 = sparse_block(sl, si[inside], sj[inside])  # shipped sparse; densified inside the task
    m_slice = float(inside.sum())
    rows = [syn.index(1, w.left)[sl.rows] for w in ws]
    cols = [syn.index(2, w.right)[sl.cols] for w in ws]
    sizes = [w.sizes(syn.dom1, syn.dom2) for w in ws]
    if p["objective"] == "paper":
        targets = [m_slice * a for a in ans]
        scale = max(m_slice, 1.0)
    else:
        # global objective: the slice absorbs its 1/S share of the whole table's residual
        cur = [syn.counts(w, si[inside], sj[inside]) for w in ws]
        targets = [c + (m_syn * a - f) / n_slices for c, a, f in zip(cur, ans, full)]
        scale = float(m_syn)
    forbidden = None
    if no_diagonal:
        _, fr, fc = np.intersect1d(sl.rows, sl.cols, assume_unique=True, return_indices=True)
        forbidden = (fr.astype(np.int64), fc.astype(np.int64))
    return SliceTask(rows, cols, sizes, targets, scale, B0, kind, int(p["pgd_iters"]), noise, key, forbidden,
                     keep_row_degrees=kind == "many_to_many" and p["degrees"] == "preserve")


def optimise(p: Mapping[str, Any], kind: str, syn: CrossTables, si: np.ndarray, sj: np.ndarray, n1s: int, n2s: int,
             m_syn: int, selected: list[CrossWorkload], answers: list[np.ndarray], noise: NoiseSource, t: int,
             run_map: Callable[..., list[Any]] | None, *, no_diagonal: bool = False
             ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """One iteration's re-optimisation; returns the new links and the iteration's report entries.

    ``optimiser: auto`` (default) solves the whole relaxed problem over record types (``type_iteration``: every
    link re-solved, ``relinked_share`` 1.0) while the type pairs stay within ``type_cells``, else random
    slices (``slices``: the share of links inside a slice). ``types`` is the same choice (the cell budget
    still applies); ``slices`` always slices.
    """
    ws, ans = _fit_workloads(p, syn, si, sj, selected, answers)
    if p["optimiser"] != "slices" and type_pairs(syn, ws) <= int(p["type_cells"]):
        step = type_step(p, kind, syn, si, sj, m_syn, ws, ans, noise, t, no_diagonal=no_diagonal)
        return step.si, step.sj, {"relinked_share": 1.0, **step.info}
    si, sj, share = optimise_slices(p, kind, syn, si, sj, n1s, n2s, m_syn, ws, ans, noise, t, run_map,
                                    no_diagonal=no_diagonal)
    return si, sj, {"relinked_share": share, "optimiser": "slices"}


def optimise_slices(p: Mapping[str, Any], kind: str, syn: CrossTables, si: np.ndarray, sj: np.ndarray, n1s: int,
                    n2s: int, m_syn: int, ws: list[CrossWorkload], ans: list[np.ndarray], noise: NoiseSource, t: int,
                    run_map: Callable[..., list[Any]] | None, *, no_diagonal: bool = False
                    ) -> tuple[np.ndarray, np.ndarray, float]:
    """One iteration's slices: PGD + rounding per disjoint slice (tasks through ``run_map``), then re-insertion;
    also the share of the links that lay inside a slice (re-optimised this iteration).

    ``no_diagonal`` (self-referential links without self-loops): the cells (r, r) of each slice are
    fixed at 0 (box upper bound 0), so they are never optimised towards nor sampled.
    """
    rng = noise.generator("relational", "slices", t)
    slices = _choose_slices(p, kind, si, sj, n1s, n2s, rng)
    full = [syn.counts(w, si, sj) for w in ws]
    masks = [edges_in(sl, si, sj, n1s, n2s) for sl in slices]
    tasks = [_slice_task(p, kind, syn, sl, inside, si, sj, ws, ans, full, len(slices), m_syn, noise,
                         ("relational", "slice", t, k), no_diagonal) for k, (sl, inside) in enumerate(zip(slices, masks))]
    results = map_slices(tasks, run_map, label=f"relational-slice-t{t}")
    inside_any = np.zeros(si.size, dtype=bool)
    new_i, new_j = [], []
    for sl, inside, (r, c) in zip(slices, masks, results):
        inside_any |= inside
        new_i.append(sl.rows[r])
        new_j.append(sl.cols[c])
    si = np.concatenate([si[~inside_any], *new_i]).astype(np.int64)
    sj = np.concatenate([sj[~inside_any], *new_j]).astype(np.int64)
    if si.size != m_syn:
        raise DataError(f"internal: link count changed from {m_syn} to {si.size} during slice re-insertion")
    return si, sj, float(inside_any.sum()) / max(m_syn, 1)


@dataclass
class LinkRun:
    """What the links loop needs besides the state: the data (real links only for selection and
    measurement, charged first), the schedule, the execution and the checkpoint/progress hooks."""

    p: Mapping[str, Any]
    kind: str
    real: RealCross
    syn: CrossTables
    m: int
    m_syn: int
    no_diag: bool
    sched: Schedule
    candidates: list[CrossWorkload]
    ledger: Any
    noise: NoiseSource
    run_map: Callable[..., list[Any]] | None = None
    save: Callable[[int, dict, dict], None] = lambda *a: None
    round0: int = 0  # checkpoint round of iteration 0 (after the stage-1 tables)
    progress: Callable[[str, float], None] | None = None


def learn_links(run: LinkRun, ls: LinkState) -> LinkState:
    """Iterations ``ls.t_start`` .. T−1: select + measure (charged), fit targets, optimise slices, commit."""
    p, sched, syn = run.p, run.sched, run.syn
    chosen = set(ls.selected)
    n1s, n2s = syn.n1, syn.n2
    for t in range(ls.t_start, sched.T):
        kt = sched.ks[t]
        picked: list[CrossWorkload] = []
        if t == 0 and sched.first:
            picked, releases, sigmas, spent = measure_first(sched, run.real, run.m, run.ledger, run.noise)
            ls.rho_spent += spent
            ls.selected.extend(picked)
            ls.released.extend(releases)
            ls.sigmas.extend(sigmas)
            chosen.update(picked)
        if kt > 0:
            remaining = [w for w in run.candidates if w not in chosen]
            drawn, releases, sigmas, ls.rho_spent = select_and_measure(
                t, kt, sched, p, remaining, run.real, syn, ls.si, ls.sj, run.m, run.ledger, run.noise,
                ls.rho_spent)
            picked = picked + drawn
            ls.selected.extend(drawn)
            ls.released.extend(releases)
            ls.sigmas.extend(sigmas)
            chosen.update(drawn)
        if not ls.selected or (not picked and not p["refit"]):
            break  # nothing measured yet, or (refit: false) no new measurement to fit
        answers = fit_targets(p, sched, syn, ls)
        ls.si, ls.sj, info = optimise(p, run.kind, syn, ls.si, ls.sj, n1s, n2s, run.m_syn, ls.selected, answers,
                                      run.noise, t, run.run_map, no_diagonal=run.no_diag)
        ls.history.append({"iteration": t, "selected": [w.label() for w in picked], **info})
        run.save(run.round0 + t, {"stage": "links", "iteration": t, "selected": [w.label() for w in ls.selected],
                                  "history": ls.history, "init_err": ls.init_err, "sigmas": ls.sigmas,
                                  "rho_links_spent": ls.rho_spent}, ls.checkpoint_arrays())
        if run.progress is not None:
            run.progress("relational iterations", (t + 1) / max(sched.T, 1))
    return ls


__all__ = ["random_links", "initial_links", "shrink", "components", "by_components", "pooled_targets",
           "COMPONENTS_MAX_NOISE", "dp_fit_report", "LinkState", "restore_link_state",
           "fit_targets", "optimise", "optimise_slices", "LinkRun", "learn_links"]
