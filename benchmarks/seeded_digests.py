"""Digests of every mechanism's seeded outputs: run before and after a restructuring, they must match.

Each job runs on a generated table (and the relational one on a generated two-table schema) with a
fixed seed on the threads cluster, then hashes the bytes of what a user reads: the answer tables,
the synthetic records, the zarr chunks and the ledger. Timings are not hashed (report.json is skipped).

    python benchmarks/seeded_digests.py --out /tmp/digests.json [--compare earlier.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import privcube

ATTRS = {"a": 5, "b": 4, "c": 3, "d": 6, "e": 2}


def _table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """A small dependent table: b and c follow a, d follows b."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = (a > 2).astype(int) + rng.integers(0, 2, n)
    d = (b + rng.integers(0, 3, n)) % 6
    e = rng.integers(0, 2, n)
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "e": e})


def _jobs() -> dict[str, dict]:
    base = {"domain": dict(ATTRS), "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": "threads"}
    two_way = [{"kway": 2}]
    return {
        "residual-planner": {**base, "mechanism": "residual-planner", "workload": two_way},
        "residual-planner-synth": {**base, "mechanism": "residual-planner", "workload": two_way,
                                   "synthesize": {"rows": 500}},
        "residual-planner-lnn": {**base, "mechanism": "residual-planner", "workload": two_way,
                                 "postprocess": {"method": "grem-lnn"}},
        "hdmm": {**base, "mechanism": "hdmm", "workload": two_way},
        "querysmasher": {**base, "mechanism": "querysmasher", "workload": [{"kway": 1, "queries": "prefix"}]},
        "eigen-design": {**base, "mechanism": "eigen-design", "workload": two_way},
        "aim-grem": {**base, "mechanism": "aim-grem", "workload": [{"kway": 3}], "synthesize": {"rows": 500}},
    }


def _digest(folder: Path) -> dict[str, str]:
    """sha256 of each output file a user reads, keyed by its path in the run folder."""
    out: dict[str, str] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if not p.is_file() or rel in ("report.json", "report.html") or rel.startswith(("logs/", ".")):
            continue
        if p.name in (".complete", ".privcube-files.json", "config.yaml") or "/checkpoint" in rel:
            continue
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def _relational(tmp: Path) -> dict:
    """A generated users <- orders schema (integer-coded, public domains) as a relational job."""
    rng = np.random.default_rng(1)
    users = pd.DataFrame({"id": np.arange(400), "age": rng.integers(0, 4, 400), "region": rng.integers(0, 3, 400)})
    n_orders = rng.integers(0, 4, 400)
    uid = np.repeat(users["id"].to_numpy(), n_orders)
    orders = pd.DataFrame({"user_id": uid, "kind": (users["age"].to_numpy()[uid] + rng.integers(0, 2, len(uid))) % 3})
    users.to_csv(tmp / "users.csv", index=False)
    orders.to_csv(tmp / "orders.csv", index=False)
    (tmp / "users.domain.json").write_text(json.dumps({"age": 4, "region": 3}))
    (tmp / "orders.domain.json").write_text(json.dumps({"kind": 3}))
    return {"data": {"tables": {"users": {"path": str(tmp / "users.csv"), "domain": str(tmp / "users.domain.json"),
                                          "key": "id"},
                                "orders": {"path": str(tmp / "orders.csv"), "domain": str(tmp / "orders.domain.json")}},
                     "links": {"from": "orders.user_id", "to": "users.id"}},
            "mechanism": {"name": "relational", "d_max": 4},
            "privacy": {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "orders": {"epsilon": 1.0, "delta": 1e-6}},
                        "links": {"epsilon": 1.0, "delta": 1e-6}},
            "cluster": "threads"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where to write the digests (JSON)")
    ap.add_argument("--compare", help="an earlier digests file: exit 1 and list what differs")
    args = ap.parse_args(argv)
    digests: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="privcube-digests-") as tmp_name:
        tmp = Path(tmp_name)
        data = _table()
        for name, job in _jobs().items():
            privcube.run(job, out=tmp / name, data=data, seed=11, quiet=True)
            digests[name] = _digest(tmp / name)
            print(f"{name}: {len(digests[name])} files", flush=True)
        privcube.run(_relational(tmp), out=tmp / "relational", seed=11, quiet=True)
        digests["relational"] = _digest(tmp / "relational")
        print(f"relational: {len(digests['relational'])} files", flush=True)
    Path(args.out).write_text(json.dumps(digests, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        diff = sorted(f"{job}/{f}" for job in set(before) | set(digests)
                      for f in set(before.get(job, {})) | set(digests.get(job, {}))
                      if before.get(job, {}).get(f) != digests.get(job, {}).get(f))
        print("identical" if not diff else "differs:\n  " + "\n  ".join(diff))
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
