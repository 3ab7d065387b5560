"""Relational quality on three data sets (issue 36, item 5): do the figures hold on data we did not tune on?

    python benchmarks/relational_generalise.py [--datasets airbnb airbnb-b generated] [--eps-rel 0.5 1 2]
        [--seeds 0 1 2 3 4] [--param KEY=JSON ...] [--no-within] [--out results.jsonl]
    python benchmarks/relational_generalise.py --markdown results.jsonl   # the summary table of saved results

Each run is a whole `privcube run` of the job ``_relational_datasets.write_job`` writes (tables at ε 1 each,
every link at ε_rel, δ 1e-6, the engine's defaults otherwise, ``evaluate_nonprivate: true``). Per link it prints
the average % L1 error over the cross-table 3-way marginals of the learned links, of the data-independent random
links (the algorithm's start) and of the floor (the real links moved onto the same synthetic tables), the share of
parents with children (synthetic / real), the largest synthetic degree against the link's d_max and, for a
foreign key with an earlier sibling into the same parent, the total variation distance between the real and
synthetic 2 × 2 tables of (has children in the sibling, has children here). Then per data set, ε_rel and link:
means, standard deviations and ranges over the seeds. Everything it prints is a NON-private evaluation.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _relational_datasets import AIRBNB, DATASETS, real_parent_sets, write_job  # noqa: E402


def _figures(config: Path, out: Path, real: dict) -> list[dict]:
    """One row per link of the finished run in ``out`` (see the module docstring)."""
    import yaml

    rep = json.loads((out / "report.json").read_text())
    raw = yaml.safe_load(config.read_text())
    graph = isinstance(raw["data"]["links"], list)
    links = raw["data"]["links"] if graph else [raw["data"]["links"]]
    bounds = (yaml.safe_load((out / "config.yaml").read_text())["resolved"]["degree_bounds"])
    syn: dict[str, pd.DataFrame] = {}
    rows = []
    flags: dict[str, np.ndarray] = {}
    for k, lk in enumerate(links):
        name = lk["from"]
        child, fk = name.split(".")
        parent = lk["to"].split(".")[0]
        for t in (child, parent):
            if t not in syn:
                syn[t] = pd.read_parquet(out / f"synthetic/{t}.parquet")
        fkv = syn[child][fk].to_numpy()
        n_par = len(syn[parent])
        deg = np.bincount(fkv, minlength=n_par)
        flags[name] = deg > 0
        ev = rep["nonprivate_evaluation"][name] if graph else rep["nonprivate_evaluation"]
        row = {"link": name, "learned": ev["average_cross_error_pct"], "random": ev["initial_random_links_error_pct"],
               "floor": ev["floor_pct"], "share_syn": float(flags[name].mean()),
               "share_real": float(real[name]["has"].mean()), "max_degree": int(deg.max()),
               "d_max": int(bounds[name if graph else "links"]["d_max"]), "degree_tv": ev["degree_tv"]["right"]}
        sib = [g["from"] for g in links[:k] if g["to"].split(".")[0] == parent]
        if sib:
            a = lk.get("within") or sib[0]
            joint_syn = np.histogram2d(flags[a], flags[name], bins=2)[0] / n_par
            joint_real = np.histogram2d(real[a]["has"], real[name]["has"], bins=2)[0] / len(real[name]["has"])
            row.update({"sibling": a, "joint_tv": 0.5 * float(np.abs(joint_syn - joint_real).sum()),
                        "joint_syn": joint_syn.round(4).tolist(), "joint_real": joint_real.round(4).tolist()})
        mech = next(lr["mechanism_report"] for lr in rep["links"] if lr["from"] == name) if graph else \
            rep["mechanism_report"]
        row["measurements"] = mech["privacy"]["selections"]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print a row per run and link, then the summary over seeds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--eps-rel", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--eps-table", type=float, default=1.0)
    ap.add_argument("--param", action="append", default=[], metavar="KEY=JSON", help="a mechanism parameter")
    ap.add_argument("--no-within", action="store_true", help="no declared sibling dependency (released instead)")
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per run and link")
    ap.add_argument("--markdown", type=Path, default=None, metavar="JSONL",
                    help="print the summary of a results file written with --out as a markdown table, run nothing")
    a = ap.parse_args(argv)
    if a.markdown is not None:
        markdown([json.loads(line) for line in a.markdown.read_text().splitlines() if line.strip()])
        return 0
    if not AIRBNB.exists() and any(d.startswith("airbnb") for d in a.datasets):
        print(f"skip: {AIRBNB} not found", file=sys.stderr)
        return 0
    import privcube

    params = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in a.param)}
    work = Path(tempfile.mkdtemp(prefix="relational-generalise-"))
    results = []
    print(f"{'data':>9} {'eps':>4} {'seed':>4} {'link':>17} {'learned':>7} {'random':>7} {'floor':>6} {'l/rnd':>6} "
          f"{'l/flr':>6} {'share syn/real':>14} {'maxdeg/d':>8} {'jointTV':>7} {'meas':>4} {'s':>6} {'load':>5}")
    try:
        for ds in a.datasets:
            for eps in a.eps_rel:
                config = write_job(ds, work / ds, eps, a.eps_table, params, within=not a.no_within)
                real = real_parent_sets(config)
                for seed in a.seeds:
                    out = work / "run"
                    t0 = time.perf_counter()
                    privcube.run(config, out, seed=seed, quiet=True)
                    dt = time.perf_counter() - t0
                    load = os.getloadavg()[0]
                    for r in _figures(config, out, real):
                        r.update({"data": ds, "eps_rel": eps, "seed": seed, "seconds": dt, "load": load})
                        results.append(r)
                        print(f"{ds:>9} {eps:4g} {seed:4d} {r['link']:>17} {r['learned']:7.2f} {r['random']:7.2f} "
                              f"{r['floor']:6.2f} {_ratio(r['learned'], r['random']):6.3f} "
                              f"{_ratio(r['learned'], r['floor']):6.3f} "
                              f"{r['share_syn']:6.3f}/{r['share_real']:6.3f} {r['max_degree']:>4d}/{r['d_max']:<3d} "
                              f"{r.get('joint_tv', float('nan')):7.3f} {r['measurements']:4d} {dt:6.1f} {load:5.2f}",
                              flush=True)
                        if a.out is not None:
                            with a.out.open("a") as fh:
                                fh.write(json.dumps(r) + "\n")
                    shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summarise(results)
    print("load average (1, 5, 15 min) at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
          + f" on {os.cpu_count()} cores")
    return 0


def _ratio(a: float, b: float) -> float:
    """a / b, NaN when b is 0 (a floor of 0: every real record has a same-code synthetic twin)."""
    return a / b if b else float("nan")


def summarise(results: list[dict]) -> None:
    """Per data set, ε_rel and link: mean ± sd [min–max] over seeds of learned ÷ random and ÷ floor, the
    learned error, wins over random links, |share error|, the mean share, degree bound kept, joint TV."""
    if not results:
        return
    df = pd.DataFrame(results)
    print("\nsummary over seeds: mean ± sd [min–max]")
    for (ds, link, eps), g in df.groupby(["data", "link", "eps_rel"], sort=False):
        lr, lf = g["learned"] / g["random"], g["learned"] / g["floor"].where(g["floor"] > 0)
        err = (g["share_syn"] - g["share_real"])
        line = (f"{ds:>9} {link:>17} eps {eps:g}: learned {g['learned'].mean():6.2f} ± {g['learned'].std():4.2f}, "
                f"l/random {lr.mean():.3f} [{lr.min():.3f}–{lr.max():.3f}] (wins {int((lr < 1).sum())}/{len(g)}), "
                f"l/floor {lf.mean():.3f} ± {lf.std():.3f} [{lf.min():.3f}–{lf.max():.3f}], share mean "
                f"{g['share_syn'].mean():.3f} (real {g['share_real'].iloc[0]:.3f}, mean err {err.mean():+.3f}, "
                f"|err| ≤ {err.abs().max():.3f}), degree ≤ d_max {int((g['max_degree'] <= g['d_max']).sum())}/{len(g)}")
        if "joint_tv" in g and g["joint_tv"].notna().any():
            line += f", joint TV {g['joint_tv'].mean():.3f} [{g['joint_tv'].min():.3f}–{g['joint_tv'].max():.3f}]"
        print(line)


def markdown(results: list[dict]) -> None:
    """The summary as a markdown table: one row per data set, link and ε_rel (mean ± sd [min–max] over seeds)."""
    df = pd.DataFrame(results)
    print("| data | link | ε_rel | seeds | learned % | random % | floor % | learned ÷ random | wins | learned ÷ floor "
          "| share with children: mean (real), mean error, largest error | ≤ d_max | joint TV | s (load) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (ds, link, eps), g in df.groupby(["data", "link", "eps_rel"], sort=False):
        lr, err = g["learned"] / g["random"], g["share_syn"] - g["share_real"]
        lf = g["learned"] / g["floor"].where(g["floor"] > 0)
        tv = (f"{g['joint_tv'].mean():.3f} [{g['joint_tv'].min():.3f}–{g['joint_tv'].max():.3f}]"
              if "joint_tv" in g and g["joint_tv"].notna().any() else "–")
        print(f"| {ds} | {link} | {eps:g} | {len(g)} | {g['learned'].mean():.2f} ± {g['learned'].std():.2f} "
              f"[{g['learned'].min():.2f}–{g['learned'].max():.2f}] | {g['random'].mean():.2f} | {g['floor'].mean():.2f} "
              f"| {lr.mean():.3f} [{lr.min():.3f}–{lr.max():.3f}] | {int((lr < 1).sum())}/{len(g)} | {lf.mean():.3f} ± "
              f"{lf.std():.3f} [{lf.min():.3f}–{lf.max():.3f}] | {g['share_syn'].mean():.3f} ({g['share_real'].iloc[0]:.3f}), "
              f"{err.mean():+.3f}, {err.abs().max():.3f} | {int((g['max_degree'] <= g['d_max']).sum())}/{len(g)} | {tv} "
              f"| {g['seconds'].min():.0f}–{g['seconds'].max():.0f} ({g['load'].min():.1f}–{g['load'].max():.1f}) |")


if __name__ == "__main__":
    raise SystemExit(main())
