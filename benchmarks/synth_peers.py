"""Synthetic data beside the peers: average total variation distance of 1-, 2- and 3-way marginals.

privcube (a marginal mechanism, then ``synthesize``) against smartnoise-synth MST / AIM and dpmm MST /
AIM on adult and nltcs (../shared/data) at ε ∈ {1, 3}, δ = 1e-9. Each peer is installed by this script
in its own virtual environment under a cache folder (never a project dependency) and run in a
subprocess with a time limit (DNF when over). Prints one row per (data, ε, system): TVD per k, time,
and the ratios to privcube (TVD ratio > 1: the peer is worse; time ratio: how many times slower). Two
times: the whole run (privcube: ``api.run`` in this process; a peer: its whole subprocess, interpreter
and imports included) and the core, data in memory to records (privcube: the mechanism, post-process and
synthesize stages; a peer: its fit and sample calls).

    python benchmarks/synth_peers.py [--datasets adult nltcs] [--eps 1 3] [--seeds 0 1] [--timeout 600]

Run with ``--peer-worker SPEC.json`` by the script itself inside a peer's venv (imports no privcube).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
CACHE = Path(os.environ.get("PRIVCUBE_PEER_CACHE", Path.home() / ".cache" / "privcube-bench" / "peers"))
PEERS = {  # peer -> (venv name, pip requirement)
    "smartnoise-mst": ("smartnoise", "smartnoise-synth==1.0.8"),
    "smartnoise-aim": ("smartnoise", "smartnoise-synth==1.0.8"),
    "dpmm-mst": ("dpmm", "dpmm==0.1.9"),
    "dpmm-aim": ("dpmm", "dpmm==0.1.9"),
}
DATASETS = {"adult": ("adult/adult.csv", "adult/adult-domain.json"),
            "nltcs": ("nltcs/nltcs.csv", "nltcs/nltcs-domain.json")}


# ---------------------------------------------------------------------------------------------------------
# peer side (runs inside the peer's venv)
def _peer_worker(spec_path: str) -> None:
    """Fit one peer on the CSV and write its synthetic records (same row count) to spec['out']."""
    spec = json.loads(Path(spec_path).read_text())
    df = pd.read_csv(spec["data"])
    sizes = spec["domain"]
    df = df[list(sizes)]
    np.random.seed(spec["seed"])
    system, algo = spec["peer"].split("-")
    if system == "smartnoise":
        from snsynth import Synthesizer

        t0 = time.perf_counter()  # fit + sample only: the imports and the CSV are outside the core time
        synth = Synthesizer.create(algo, epsilon=float(spec["epsilon"]), delta=float(spec["delta"]))
        out = synth.fit_sample(df, categorical_columns=list(df.columns), preprocessor_eps=0.0)
    else:
        from dpmm.pipelines import AIMPipeline, MSTPipeline

        t0 = time.perf_counter()
        cls = MSTPipeline if algo == "mst" else AIMPipeline
        pipe = cls(epsilon=float(spec["epsilon"]), delta=float(spec["delta"]), disable_processing=True)
        pipe.fit(df, domain={c: int(s) for c, s in sizes.items()}, random_state=spec["seed"])
        out = pipe.generate(n_records=len(df), random_state=spec["seed"])
    core = time.perf_counter() - t0
    pd.DataFrame(out)[list(sizes)].to_csv(spec["out"], index=False)
    Path(spec["out"] + ".time").write_text(str(core))


# ---------------------------------------------------------------------------------------------------------
# driver side
def ensure_peer(venv: str, requirement: str) -> Path:
    """The python of the peer's own venv under the cache folder, created and installed on first use."""
    py = CACHE / venv / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-m", "pip", "show", requirement.split("==")[0]],
                                      capture_output=True).returncode == 0:
        return py
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(CACHE / venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", requirement], check=True)
    return py


def load(name: str) -> tuple[pd.DataFrame, dict[str, int], Path, Path]:
    """Records (domain column order), the public domain, and the two files."""
    csv, dom = (DATA / p for p in DATASETS[name])
    sizes = json.loads(dom.read_text())
    return pd.read_csv(csv)[list(sizes)], sizes, csv, dom


def tvd(real: np.ndarray, syn: np.ndarray, sizes: list[int], k: int) -> float:
    """Mean over all k-way attribute sets of ½‖p_real − p_syn‖₁ (normalised histograms)."""
    out = []
    for c in itertools.combinations(range(len(sizes)), k):
        shape = [sizes[i] for i in c]
        cells = int(np.prod(shape))
        hr = np.bincount(np.ravel_multi_index(tuple(real[:, i] for i in c), shape), minlength=cells)
        hs = np.bincount(np.ravel_multi_index(tuple(np.clip(syn[:, i], 0, sizes[i] - 1) for i in c), shape),
                         minlength=cells)
        out.append(0.5 * np.abs(hr / hr.sum() - hs / max(hs.sum(), 1)).sum())
    return float(np.mean(out))


def run_ours(name: str, eps: float, delta: float, seed: int, mechanism: dict, workload: list,
             estimator: str) -> tuple[np.ndarray, float]:
    """privcube run (ingest, measure, synthesize, write) on a threads cluster; records and wall time."""
    from privcube import api

    _, sizes, csv, dom = load(name)
    cfg = {"data": {"path": str(csv), "domain": str(dom)}, "mechanism": mechanism, "workload": workload,
           "privacy": {"epsilon": eps, "delta": delta}, "cluster": {"type": "threads"},
           "synthesize": {"rows": "auto", "estimator": estimator}}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = api.run(cfg, Path(tmp) / "run", seed=seed, quiet=True)
        secs = time.perf_counter() - t0
        t = summary.report["timings"]
        run_ours.stages = {k: t.get(k) for k in ("mechanism_s", "postprocess_s", "synthesize_s", "write_s")}
        # core time, as the peers' (data in memory -> records): measure + post-process + fit, sample, write records
        run_ours.stages["core_s"] = sum(t.get(k) or 0.0 for k in ("mechanism_s", "postprocess_s", "synthesize_s"))
        files = sorted((Path(tmp) / "run" / "synthetic" / "records").glob("part-*.parquet"))
        syn = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)[list(sizes)].to_numpy()
    return syn, secs


def run_peer(peer: str, name: str, eps: float, delta: float, seed: int, timeout: float) -> tuple[np.ndarray | None, float]:
    """A peer in its venv, killed after ``timeout`` s (None = did not finish); records and wall time (the
    whole process: interpreter, imports, CSV); its fit + sample time is left in ``run_peer.core``."""
    run_peer.core = None
    py = ensure_peer(*PEERS[peer])
    _, sizes, csv, _ = load(name)
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"peer": peer, "data": str(csv), "domain": sizes, "epsilon": eps, "delta": delta, "seed": seed,
                "out": str(Path(tmp) / "syn.csv")}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(py), str(Path(__file__).resolve()), "--peer-worker", str(Path(tmp) / "spec.json")],
                                stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "err.txt", "w"),
                                start_new_session=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, time.perf_counter() - t0
        secs = time.perf_counter() - t0
        if proc.returncode != 0:
            err = (Path(tmp) / "err.txt").read_text().strip().splitlines()
            print(f"  {peer} failed: {err[-1] if err else proc.returncode}", file=sys.stderr)
            return None, secs
        run_peer.core = float(Path(spec["out"] + ".time").read_text())
        return pd.read_csv(spec["out"])[list(sizes)].to_numpy(), secs


OURS = {  # label -> (mechanism, workload, estimator); aim-grem synthesizes from its measured marginals
    "privcube aim-grem+jt": ({"name": "aim-grem"}, [{"kway": 1}, {"kway": 2}], "junction-tree"),
    "privcube rp+jt": ({"name": "residual-planner"}, [{"kway": 1}, {"kway": 2}], "junction-tree"),
    "privcube aim-grem+tree": ({"name": "aim-grem"}, [{"kway": 1}, {"kway": 2}], "tree"),
}


def main() -> None:
    """Run every system on every (data, ε, seed); print the table of means (± spread over seeds)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["nltcs", "adult"])
    ap.add_argument("--eps", nargs="+", type=float, default=[1.0, 3.0])
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--ours", nargs="*", default=list(OURS))
    ap.add_argument("--peers", nargs="*", default=list(PEERS))
    ap.add_argument("--merge", nargs="+", default=None, help="only print the table of these --json files")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--peer-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer_worker:
        _peer_worker(args.peer_worker)
        return
    if args.merge:
        rows = [r for f in args.merge for r in json.loads(Path(f).read_text())]
        print_table(rows, args.ours[0] if args.ours else next(iter(OURS)))
        return
    print(f"load: {os.getloadavg()}  cores: {os.cpu_count()}  timeout per peer run: {args.timeout:.0f} s", flush=True)
    rows = []
    for name, eps in itertools.product(args.datasets, args.eps):
        real, sizes, _, _ = load(name)
        real = real.to_numpy()
        for system, seed in itertools.product(args.ours + args.peers, args.seeds):
            stages = {}
            if system in OURS:
                syn, secs = run_ours(name, eps, args.delta, seed, *OURS[system])
                stages = run_ours.stages
            else:
                syn, secs = run_peer(system, name, eps, args.delta, seed, args.timeout)
                stages = {"core_s": run_peer.core}
            tv = [tvd(real, syn, list(sizes.values()), k) if syn is not None else None for k in (1, 2, 3)]
            rows.append({"data": name, "eps": eps, "system": system, "seed": seed, "tvd": tv, "seconds": secs,
                         "load": os.getloadavg()[0], **stages})
            shown = " ".join("DNF" if t is None else f"{t:.4f}" for t in tv)
            extra = " ".join(f"{k} {v:.2f}" for k, v in stages.items() if v is not None)
            print(f"{name:6} eps={eps:<4g} seed={seed} {system:24} tvd1/2/3 {shown}  {secs:8.1f} s  "
                  f"load {rows[-1]['load']:.2f} {extra}", flush=True)
            if args.json:  # after every run: an interrupted benchmark keeps what it measured
                Path(args.json).write_text(json.dumps(rows, indent=1))
    print_table(rows, args.ours[0] if args.ours else next(iter(OURS)))


def _core(r: dict) -> float | None:
    """A row's core seconds (older result files: the stages they recorded)."""
    if r.get("core_s") is not None:
        return r["core_s"]
    if r.get("synthesize_s") is not None:
        return sum(r.get(k) or 0.0 for k in ("mechanism_s", "postprocess_s", "synthesize_s"))
    return None


def _system_stats(rs: list[dict]) -> dict:
    """Means over seeds (± half range) of one system's rows on one (data, ε)."""
    done = [r for r in rs if r["tvd"][0] is not None]
    tv = [float(np.mean([r["tvd"][k] for r in done])) if done else None for k in range(3)]
    sp = [(max(r["tvd"][k] for r in done) - min(r["tvd"][k] for r in done)) / 2 if done else None for k in range(3)]
    core = [c for c in (_core(r) for r in done) if c is not None]
    return {"tv": tv, "sp": sp, "secs": float(np.mean([r["seconds"] for r in rs])), "done": len(done), "n": len(rs),
            "core": float(np.mean(core)) if core else None, "load": float(np.mean([r["load"] for r in rs]))}


def _ratio(a: float | None, b: float | None, fmt: str) -> str:
    return "-" if a is None or b is None or b == 0 else format(a / b, fmt)


def print_table(rows: list[dict], reference: str) -> None:
    """Means over seeds (± half range), and ratios to ``reference``: system TVD / reference, system time /
    reference (how many times slower), for the whole process and for the core (fit + sample) time."""
    print("\nwhole s: privcube = api.run in this process (ingest, measure, post-process, synthesize, write every "
          "output); peers = their whole subprocess (interpreter, imports, CSV in and out). core s: data in memory "
          "to records (privcube: mechanism + postprocess + synthesize stages; peers: fit + sample). "
          "Ratios: system / " + reference + "; load = 1-min load average during the system's runs")
    print("| data | ε | system | seeds | TVD 1-way | TVD 2-way | TVD 3-way | whole s | core s | TVD2 ratio | "
          "TVD3 ratio | whole ratio | core ratio | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for data, eps in sorted({(r["data"], r["eps"]) for r in rows}):
        here = [r for r in rows if r["data"] == data and r["eps"] == eps]
        stats = {s: _system_stats([r for r in here if r["system"] == s])
                 for s in dict.fromkeys(r["system"] for r in here)}
        ref = stats.get(reference)
        for s, st in stats.items():
            cells = " | ".join("DNF" if t is None else f"{t:.4f} ± {e:.4f}" for t, e in zip(st["tv"], st["sp"]))
            if ref is not None and st["tv"][1] is not None:
                ratios = " | ".join([_ratio(st["tv"][1], ref["tv"][1], ".2f"), _ratio(st["tv"][2], ref["tv"][2], ".2f"),
                                     _ratio(st["secs"], ref["secs"], ".1f"), _ratio(st["core"], ref["core"], ".1f")])
            else:  # did not finish: at least the time limit over the reference
                ratios = "- | - | " + ("> " + _ratio(st["secs"], ref["secs"], ".1f") if ref else "-") + " | -"
            label = s if st["done"] == st["n"] else f"{s} ({st['n'] - st['done']} DNF at the time limit)"
            core = "-" if st["core"] is None else f"{st['core']:.2f}"
            print(f"| {data} | {eps:g} | {label} | {st['done']}/{st['n']} | {cells} | {st['secs']:.1f} | {core} | "
                  f"{ratios} | {st['load']:.1f} |")


if __name__ == "__main__":
    main()
