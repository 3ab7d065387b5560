"""Benchmark (issue 32): post-processing a 10^8-cell workload, time and peak memory.

A census-like table (``privcube.storage.generate``, 30 attributes) with two attributes widened to large
public domains (``ancestry`` to 500 values, ``birthplace`` to 600: each code split uniformly at random into
5 and 10 finer codes), so that all 3-way marginals hold 1.08·10^8 cells. ResidualPlanner measures every 3-way
marginal (ε = 1, δ = 1e-9, seeded) in this process; then each post-processing method runs in a fresh
subprocess on the released answers and residual measurements (what ``privcube run`` hands it), and this
script reports its wall time (reading the answers excluded), its peak RSS (sampled every 50 ms, the whole
subprocess: the answers it holds included) and the fit's report. The machine's load is printed.

    python benchmarks/postprocess_scale.py [--rows 1000000] [--methods pgm] [--out /tmp/privcube-pp-scale]
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

WIDEN = {"ancestry": 500, "birthplace": 600}

POST = r'''
import json, pickle, sys, time
from types import SimpleNamespace
import numpy as np
from privcube.core.domain import Domain
from privcube.postprocess import parse_postprocess, publish_model
spec = json.loads(sys.argv[1])
dump = pickle.load(open(spec["dump"], "rb"))
domain = Domain.from_mapping(dump["sizes"])
answers = [SimpleNamespace(group=SimpleNamespace(attributes=a, is_marginal=True), estimate=e, variance=v,
                           published=None) for a, e, v in dump["answers"]]
print("READY", flush=True)
t0 = time.perf_counter()
report, _ = publish_model(answers, domain, parse_postprocess({"method": spec["method"]}),
                          residuals=dump["residuals"] or None)
secs = time.perf_counter() - t0
keep = ("iterations", "converged", "stop", "fit_s", "model", "consistency_violation", "negativity", "cells")
print("RESULT " + json.dumps({"seconds": secs, **{k: report.get(k) for k in keep}}, default=str), flush=True)
'''


def widened_table(rows: int, seed: int) -> tuple[dict[str, int], np.ndarray]:
    """The census-like codes with :data:`WIDEN`'s attributes split into finer public codes."""
    from privcube.storage.generate import census_schema, generate_part

    schema = census_schema(30)
    frame = generate_part(0, rows, seed=seed, n_attributes=30)
    rng = np.random.default_rng(seed + 1)
    sizes = dict(zip(schema.domain.attributes, schema.domain.shape))
    for attr, new in WIDEN.items():
        factor = new // sizes[attr]
        frame[attr] = frame[attr].to_numpy(np.int64) * factor + rng.integers(0, factor, rows)
        sizes[attr] = sizes[attr] * factor
    return sizes, frame[list(sizes)].to_numpy(np.int64)


def measure(sizes: dict[str, int], codes: np.ndarray, seed: int, dump: Path) -> dict[str, Any]:
    """ResidualPlanner over every 3-way marginal, in process; answers and residuals pickled to ``dump``."""
    from privcube.core.domain import Domain
    from privcube.mechanisms import get_mechanism
    from privcube.core.oracle import ArrayOracle
    from privcube.privacy.budget import PrivacyBudget
    from privcube.privacy.discrete import make_noise_source
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.core.workload import parse_workload

    domain = Domain.from_mapping(sizes)
    workload = parse_workload([{"kway": 3}], domain)
    budget = PrivacyBudget.from_config({"epsilon": 1.0, "delta": 1e-9})
    t0 = time.perf_counter()
    result = get_mechanism("residual-planner")({}).run(ArrayOracle(domain, codes), workload, budget,
                                                      PrivacyLedger(budget), make_noise_source(seed), None)
    secs = time.perf_counter() - t0
    with open(dump, "wb") as fh:
        pickle.dump({"sizes": sizes, "answers": [(tuple(a.group.attributes), a.estimate, a.variance)
                                                 for a in result.answers],
                     "residuals": result.residuals}, fh, protocol=5)
    return {"mechanism_s": secs, "groups": len(result.answers),
            "cells": int(sum(a.estimate.size for a in result.answers))}


def run_post(method: str, dump: Path) -> dict[str, Any]:
    """One method in a fresh subprocess; its peak RSS sampled every 50 ms (psutil)."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", POST, json.dumps({"dump": str(dump), "method": method})],
                            stdout=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample() -> None:
        p = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peak[0] = max(peak[0], p.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate()
    done.set()
    t.join()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        return {"method": method, "status": f"failed (exit {proc.returncode})"}
    return {"method": method, "status": "ok", "peak_gb": peak[0] / 2**30, **json.loads(line[7:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="pgm", help="comma list of post-processing methods")
    ap.add_argument("--out", default="/tmp/privcube-pp-scale")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} cores", flush=True)
    sizes, codes = widened_table(int(args.rows), args.seed)
    cells = sum(math.prod(c) for c in itertools.combinations(sizes.values(), 3))
    print(f"{len(sizes)} attributes, {codes.shape[0]:,} rows, all 3-way marginals: "
          f"{math.comb(len(sizes), 3)} marginals, {cells:,} cells", flush=True)
    dump = out / "answers.pkl"
    meas = measure(sizes, codes, args.seed, dump)
    print(f"ResidualPlanner: {meas['mechanism_s']:.1f} s, {meas['cells']:,} answer cells", flush=True)
    del codes
    rows = []
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        res = run_post(method, dump)
        rows.append(res)
        print(json.dumps(res, default=str), flush=True)
    print(f"load average after: {os.getloadavg()}")
    for r in rows:
        if r["status"] == "ok":
            print(f"{r['method']}: {r['seconds']:.1f} s (fit {r.get('fit_s') or 0:.1f} s, {r.get('iterations')} "
                  f"iterations, converged {r.get('converged')}), peak {r['peak_gb']:.2f} GB")
        else:
            print(f"{r['method']}: {r['status']}")


if __name__ == "__main__":
    main()
