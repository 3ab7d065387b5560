"""Relational synthesis on Airbnb users → sessions (one-to-many), run by hand.

    python benchmarks/relational_airbnb.py [--eps-rel 0.1 0.5 1 2 10] [--paper] [--param KEY=JSON ...] [--seed 0 | --seeds 0 1 2]

Reads ../shared/data/airbnb (relative to the project root) through the shipped job config
benchmarks/configs/airbnb/relational.yaml, encodes both tables with its explicit public schemas
(users.schema.yaml, sessions.schema.yaml: categories and bins fixed by hand, never read off the data),
truncates parents to d_max children, and prints the average % L1 cross-table 3-way marginal error (the paper's metric) for each
ε_rel with the mechanism's default parameters, against two baselines on the same synthetic tables:
uniformly random links (the algorithm's data-independent start) and the real links transplanted onto the
synthetic tables (the error floor of the tables alone). All errors are NON-private diagnostics.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "airbnb"
CONFIG = ROOT / "benchmarks" / "configs" / "airbnb" / "relational.yaml"


def load_job(config: Path = CONFIG, sample_users: int | None = None, folder: Path | None = None) -> object:
    """The shipped relational job (schemas with explicit bins); ``sample_users`` keeps the first n users
    and their sessions, written as CSV to ``folder`` (the config then points there)."""
    from privcube.config import read_config_file
    from privcube.relational.config import load_relational_config

    raw, base = read_config_file(config)
    if sample_users is not None:
        import pandas as pd

        if folder is None:
            raise ValueError("load_job: sample_users needs a folder for the sample files")
        job = load_relational_config(raw, base)
        users = pd.read_csv(job.tables["users"].path, dtype=str, keep_default_na=False, na_values=[""])
        sessions = pd.read_csv(job.tables["sessions"].path, dtype=str, keep_default_na=False, na_values=[""])
        users = users.iloc[:sample_users]
        sessions = sessions[sessions["user_id"].isin(set(users["id"]))]
        users.to_csv(folder / "users.csv", index=False)
        sessions.to_csv(folder / "sessions.csv", index=False)
        for t in ("users", "sessions"):
            raw["data"]["tables"][t]["path"] = str(folder / f"{t}.csv")
            raw["data"]["tables"][t]["schema"] = str(Path(base) / raw["data"]["tables"][t]["schema"])
    return load_relational_config(raw, base)


def load(config: Path = CONFIG) -> dict:
    """Both tables encoded by the shipped schemas (benchmarks/configs/airbnb), with their Domains, and the
    FK links spec, in the shape ``run_relational`` takes."""
    from privcube.relational.inputs import read_inputs

    tables, links = read_inputs(load_job(config))
    return {"tables": tables, "links": links}


def real_links_floor(ds: dict, res, d_max: int, rng: np.random.Generator) -> float:
    """NON-private baseline: the real link pattern transplanted onto the synthetic tables.

    Each synthetic session takes a real session with the same codes (else any), and is linked to a
    synthetic user with the same codes as that session's real user (else any). What remains is the
    error the synthetic tables alone cause (the "error floor" of the issue).
    """
    from privcube.relational.stages.degree_bound import enforce_degree
    from _real_links import real_positions
    from privcube.relational.stages.resolved_links import table_codes
    from privcube.relational.stages.cross_workloads import CrossTables, LinkedCodes, average_error, cross_workloads

    tables, li, lj = real_positions(ds)
    left, right = ds["links"]["from"].split(".")[0], ds["links"]["to"].split(".")[0]
    keep, _ = enforce_degree(li, lj, d_max, truncate=True, names=(left, right))
    cdom, pdom = tables[left][1], tables[right][1]
    rc = table_codes(tables[left][0], cdom, left)[li[keep]]
    rp = table_codes(tables[right][0], pdom, right)
    rj = lj[keep]
    sc = res.tables[left][list(cdom.attributes)].to_numpy()
    sp = res.tables[right][list(pdom.attributes)].to_numpy()

    def key(a: np.ndarray, dom) -> np.ndarray:
        return np.ravel_multi_index(tuple(a.T), dom.shape)

    rck, sck, rpk, spk = key(rc, cdom), key(sc, cdom), key(rp, pdom), key(sp, pdom)
    by_child: dict = {}
    for r, k in enumerate(rck.tolist()):
        by_child.setdefault(k, []).append(r)
    by_parent: dict = {}
    for r, k in enumerate(spk.tolist()):
        by_parent.setdefault(k, []).append(r)
    sj = np.empty(len(sc), dtype=np.int64)
    for c, k in enumerate(sck.tolist()):
        cand = by_child.get(k)
        real_child = cand[rng.integers(len(cand))] if cand else int(rng.integers(len(rc)))
        pk = int(rpk[rj[real_child]])
        par = by_parent.get(pk)
        sj[c] = par[rng.integers(len(par))] if par else int(rng.integers(len(sp)))
    real = CrossTables(rc, cdom, rp, pdom)
    syn = CrossTables(sc, cdom, sp, pdom)
    return average_error(LinkedCodes(real, np.arange(len(rc)), rj), syn, np.arange(len(sc)), sj, cross_workloads(cdom, pdom, 3))


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print one row per ε_rel."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps-rel", type=float, nargs="+", default=[0.1, 0.5, 1.0, 2.0, 10.0])
    ap.add_argument("--eps-table", type=float, default=1.0)
    ap.add_argument("--d-max", type=int, default=None, help="default: the shipped config's d_max (50)")
    ap.add_argument("--paper", action="store_true",
                    help="the paper's schedule: T·K k-way measurements, no noise-aware selection, no shrinkage")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=JSON",
                    help="override a mechanism parameter, e.g. --param iterations=20")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="several seeds (then a summary per eps_rel)")
    ap.add_argument("--sample-users", type=int, default=None, metavar="N",
                    help="a quick run on the first N users and their sessions (written to a temporary folder)")
    a = ap.parse_args(argv)
    if not DATA.exists():
        print(f"skip: {DATA} not found", file=sys.stderr)
        return 0
    import json

    from _relational_runs import load_footer, timed_run

    import tempfile

    tmp = tempfile.TemporaryDirectory(prefix="airbnb-sample-")
    job = load_job(sample_users=a.sample_users, folder=Path(tmp.name))
    from privcube.relational.inputs import read_inputs

    tables, links = read_inputs(job)
    ds = {"tables": tables, "links": links}
    d_max = int(a.d_max if a.d_max is not None else job.params.get("d_max", 50))
    extra = {}
    if a.paper:
        extra.update({"candidate_orders": "k", "max_noise": None, "noise_penalty": False, "shrinkage": False})
    for kv in a.param:
        k, v = kv.split("=", 1)
        extra[k] = json.loads(v)
    print(f"users {len(ds['tables']['users'][0])} × {len(ds['tables']['users'][1])} attrs, "
          f"sessions {len(ds['tables']['sessions'][0])} × {len(ds['tables']['sessions'][1])} attrs, d_max {d_max}, "
          f"table eps {a.eps_table}, params: defaults{' + ' + json.dumps(extra) if extra else ''}")
    print("average % L1 error over all cross-table 3-way marginals (NON-private evaluation)")
    print(f"{'seed':>4} {'eps_rel':>8} {'learned':>8} {'random':>8} {'real':>8} {'l/rand':>7} {'l/real':>7} {'meas.':>6} "
          f"{'users w/ sess. syn/real':>23} {'max deg syn/real':>16} {'deg TV':>6} {'pre-rep.':>8} {'seconds':>8} {'load(1min)':>10}")
    rows: dict[float, list[tuple[float, float, float]]] = {e: [] for e in a.eps_rel}
    for seed, eps in [(sd, e) for sd in (a.seeds or [a.seed]) for e in a.eps_rel]:
        params = {**job.params, "evaluate_nonprivate": True, "d_max": d_max, "truncate": True, **extra}
        budgets = {"tables": {"users": {"epsilon": a.eps_table, "delta": 1e-6},
                              "sessions": {"epsilon": a.eps_table, "delta": 1e-6}},
                   "links": {"epsilon": eps, "delta": 1e-6}}
        res, dt = timed_run(ds, params, budgets, seed)
        ev = res.report["nonprivate_evaluation"]
        e, r = ev["average_cross_error_pct"], ev["initial_random_links_error_pct"]
        floor = real_links_floor(ds, res, d_max, np.random.default_rng(seed))
        wl, md = ev.get("right_records_with_links", {}), ev.get("right_max_degree", {})
        rows[eps].append((e, r, floor))
        print(f"{seed:4d} {eps:8.2f} {e:8.2f} {r:8.2f} {floor:8.2f} {e / r:7.3f} {e / floor:7.3f} "
              f"{res.report['privacy']['selections']:6d} {str(wl.get('synthetic', '-')) + '/' + str(wl.get('real', '-')):>23} "
              f"{str(md.get('synthetic', '-')) + '/' + str(md.get('real', '-')):>16} {ev['degree_tv']['right']:6.3f} {ev['before_degree_repair_pct']:8.2f} "
              f"{dt:8.1f} {os.getloadavg()[0]:10.2f}",
              flush=True)
        np.testing.assert_equal(len(res.links), len(res.tables["sessions"]))
    if a.seeds:
        print("summary over seeds (mean ± std)")
        for eps, rs in rows.items():
            arr = np.array(rs)
            ratio = arr[:, 0] / arr[:, 2]
            print(f"  eps_rel {eps:5.2f}: learned {arr[:, 0].mean():6.2f} ± {arr[:, 0].std():5.2f}  random "
                  f"{arr[:, 1].mean():6.2f}  floor {arr[:, 2].mean():6.2f} ± {arr[:, 2].std():5.2f}  learned/floor "
                  f"{ratio.mean():5.3f} (per seed {' / '.join(f'{x:.3f}' for x in ratio)})")
    print(load_footer())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
