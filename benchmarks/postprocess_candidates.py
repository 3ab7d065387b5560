"""Benchmark (issue 14, item 1): candidates for non-negative, consistent reconstruction of released marginals.

Part 1, error: ResidualPlanner on adult15 and nltcs (``/work/shared/data``), all 3-way marginals,
δ = 1e-9, ε in ``--eps``, ``--seeds`` seeds; for each release every candidate's mean over the marginals of
‖true − published‖₁/N, its time, iterations and final constraint violations. Candidates:

- ``raw``: the unbiased estimate as released (negative cells, for reference);
- ``norm-sub``: the heuristic of ``privcube.synth.consistency`` (make_consistent + norm_sub; not exactly
  consistent, its violation is printed);
- ``wls``: consistent least squares, then the least lift to ≥ 0 (mixing with an independence model);
- ``dykstra``: alternating weighted projections (cell metric);
- ``grem-lnn/cell``: the default: the norm-sub pre-estimate projected by ADMM onto the exactly consistent
  non-negative set (every cell weighted by its clique's variance);
- ``grem-lnn/resid``: the same call with ResidualPlanner's public plan (σ_τ² per residual) passed, as
  ``privcube run`` does for residual-planner (the residual metric is no longer used: same result).

Part 2, time at census scale: the census domain (30 attributes as ``benchmarks/census_scale.py``), all 465
1- and 2-way marginals plus the total, truth from a random 10^8-record independence model, Gaussian noise
with ResidualPlanner's planned per-residual σ at ε = 1 (the released marginals are then exactly what RP
would release for that truth). Prints time per candidate.

    python benchmarks/postprocess_candidates.py --seeds 3 --eps 0.3 1 3 10
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DATA_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATASETS = {"adult15": ("adult15", "adult.csv", "adult-domain.json"), "nltcs": ("nltcs", "nltcs.csv", "nltcs-domain.json")}
DELTA = 1e-9
CANDIDATES = ("raw", "norm-sub", "wls", "dykstra", "grem-lnn/cell", "grem-lnn/resid")


def load(name: str, root: Path) -> tuple[Any, np.ndarray]:
    import pandas as pd

    from privcube.core.domain import Domain

    folder, csv, dom = DATASETS[name]
    sizes = {str(k): int(v) for k, v in json.loads((root / folder / dom).read_text()).items()}
    codes = pd.read_csv(root / folder / csv)[list(sizes)].to_numpy(dtype=np.int64)
    return Domain.from_mapping(sizes), codes


def rp_release(domain: Any, codes: np.ndarray, eps: float, seed: int, kway: int = 3) -> tuple[list[Any], dict]:
    """ResidualPlanner's answers to all k-way marginals and its plan's σ_τ² (public)."""
    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.core.oracle import ArrayOracle
    from privcube.privacy.budget import PrivacyBudget
    from privcube.privacy.discrete import make_noise_source
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.core.workload import parse_workload

    wl = parse_workload([{"kway": kway}], domain)
    budget = PrivacyBudget.from_config({"epsilon": eps, "delta": DELTA})
    mech = ResidualPlanner({})
    result = mech.run(ArrayOracle(domain, codes), wl, budget, PrivacyLedger(budget), make_noise_source(seed), None)
    plan = mech.plan(wl, budget)
    return result.answers, {tuple(m["residual"]): float(m["sigma2"]) for m in plan.measurements}


def run_candidate(name: str, answers: Sequence[Any], domain: Any, resid_var: Mapping) -> tuple[dict, dict[str, Any]]:
    """{clique: published array} and {time_s, iterations, violation, negativity} of one candidate."""
    from privcube.postprocess import PostprocessSpec, build_problem, solve
    from privcube.postprocess.feasibility import consistency_violation, negativity

    est = {tuple(a.group.attributes): np.asarray(a.estimate, float).reshape(domain.shape_of(a.group.attributes))
           for a in answers}
    var = {tuple(a.group.attributes): float(np.mean(a.variance)) for a in answers}
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    if name == "raw":
        out = est
    elif name == "norm-sub":
        from privcube.synth.consistency import make_consistent

        out = make_consistent(est, domain, variances=var)
    else:
        prob = build_problem(est, domain, var)
        method = name.split("/")[0]
        rv = resid_var if name.endswith("/resid") else None
        out, info = solve(prob, PostprocessSpec(method=method), residual_variances=rv)
    secs = time.perf_counter() - t0
    return out, {"time_s": secs, "iterations": info.get("iterations", 0),
                 "violation": consistency_violation(out), "negativity": negativity(out)}


def error(truth: Mapping, out: Mapping, domain: Any, n: int) -> float:
    """Mean over marginals of ‖true − published‖₁/N (cliques in any attribute order)."""
    errs = []
    for c, t in truth.items():
        cc = domain.canonical(c)
        a = out.get(c, out.get(cc))
        a = np.asarray(a, float)
        if a.shape != t.shape:
            a = np.transpose(a.reshape(domain.shape_of(cc)), [cc.index(x) for x in c])
        errs.append(float(np.abs(t - a).sum()) / n)
    return float(np.mean(errs))


def part_error(args: argparse.Namespace) -> list[dict[str, Any]]:
    from privcube.core.oracle import ArrayOracle

    rows = []
    for ds in args.datasets:
        domain, codes = load(ds, Path(args.data_root))
        cliques = list(itertools.combinations(domain.attributes, 3))
        truth = ArrayOracle(domain, codes).marginals(cliques)
        for eps in args.eps:
            for seed in range(args.seeds):
                answers, rv = rp_release(domain, codes, eps, seed)
                for cand in args.candidates:
                    out, info = run_candidate(cand, answers, domain, rv)
                    rows.append({"dataset": ds, "eps": eps, "seed": seed, "candidate": cand,
                                 "error": error(truth, out, domain, codes.shape[0]), **info})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def census_release(seed: int) -> tuple[list[Any], dict, Any]:
    """RP-shaped release of all 1-/2-way marginals + total on the census domain (independence-model truth)."""
    from privcube.mechanisms.base import GroupAnswer
    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.privacy.budget import PrivacyBudget
    from privcube.core.residuals import decomp, recon_add
    from privcube.storage.generate import census_schema
    from privcube.core.workload import parse_workload

    domain = census_schema(30).domain
    rng = np.random.default_rng(seed)
    probs = {a: rng.dirichlet(np.ones(domain[a]) * 0.5) for a in domain.attributes}
    wl = parse_workload([{"kway": 0}, {"kway": 1}, {"kway": 2}], domain)
    budget = PrivacyBudget.from_config({"epsilon": 1.0, "delta": DELTA})
    mech = ResidualPlanner({})
    plan = mech.plan(wl, budget)
    sigma2 = {tuple(m["residual"]): float(m["sigma2"]) for m in plan.measurements}
    z = {}
    for t, s2 in sigma2.items():
        m = np.asarray(1e8)
        for a in t:
            m = np.multiply.outer(m, probs[a])
        z[t] = decomp(m + rng.normal(0, np.sqrt(s2), np.shape(m)), t, t)
    answers = []
    for g, grp in zip(wl, plan.groups):
        c = domain.canonical(g.attributes)
        out = np.zeros(domain.shape_of(c))
        for t in [s for k in range(len(c) + 1) for s in itertools.combinations(c, k)]:
            recon_add(out, z[t], t, c, domain)
        answers.append(GroupAnswer(g, out.ravel(), np.full(out.size, grp["variance"])))
    return answers, sigma2, domain


def part_census(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for seed in range(args.seeds):
        answers, rv, domain = census_release(seed)
        answers = [a for a in answers if a.group.attributes]  # the total enters through the kway-0 group too
        for cand in args.candidates:
            if cand == "raw":
                continue
            _, info = run_candidate(cand, answers, domain, rv)
            rows.append({"seed": seed, "candidate": cand, **info, "marginals": len(answers),
                         "cells": int(sum(np.size(a.estimate) for a in answers))})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def table_error(rows: Sequence[Mapping[str, Any]], candidates: Sequence[str]) -> str:
    keys = sorted({(r["dataset"], r["eps"]) for r in rows}, key=lambda k: (k[0], k[1]))
    head = "| dataset | ε | " + " | ".join(candidates) + " |"
    lines = [head, "|" + "---|" * (2 + len(candidates))]
    for ds, eps in keys:
        cells = []
        for cand in candidates:
            e = [r["error"] for r in rows if r["dataset"] == ds and r["eps"] == eps and r["candidate"] == cand]
            t = [r["time_s"] for r in rows if r["dataset"] == ds and r["eps"] == eps and r["candidate"] == cand]
            cells.append(f"{np.mean(e):.4f} ± {np.std(e):.4f} ({np.mean(t):.1f} s)" if e else "-")
        lines.append(f"| {ds} | {eps:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_census(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| candidate | time s (mean, max) | iterations | consistency violation | negativity |", "|---|---|---|---|---|"]
    for cand in dict.fromkeys(r["candidate"] for r in rows):
        rs = [r for r in rows if r["candidate"] == cand]
        t = [r["time_s"] for r in rs]
        lines.append(f"| {cand} | {np.mean(t):.2f}, {np.max(t):.2f} | {np.mean([r['iterations'] for r in rs]):.0f} | "
                     f"{max(r['violation'] for r in rs):.1e} | {max(r['negativity'] for r in rs):.1e} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--eps", nargs="+", type=float, default=[0.3, 1.0, 3.0, 10.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    ap.add_argument("--parts", nargs="+", default=["error", "census"], choices=["error", "census"])
    ap.add_argument("--data-root", default=str(DATA_ROOT))
    ap.add_argument("--json", help="write all rows to this file")
    args = ap.parse_args(argv)
    print(f"load at start: {os.getloadavg()}")
    out: dict[str, Any] = {}
    if "error" in args.parts:
        out["error"] = part_error(args)
        print("\nMean over all 3-way marginals of ‖true − published‖₁/N, ResidualPlanner, δ = 1e-9 "
              f"({args.seeds} seeds; mean ± sd, time per reconstruction):")
        print(table_error(out["error"], args.candidates))
    if "census" in args.parts:
        out["census"] = part_census(args)
        print("\nCensus-scale shape: 30 attributes, all 465 1- and 2-way marginals (+ total), RP noise at ε = 1:")
        print(table_census(out["census"]))
    print(f"load at end: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
