"""A cluster over a real network, with faults (issue 37): the Dask scheduler, two workers and the driver
(`privcube run`) each in its own network namespace, linked by veth pairs through a routing hub
(tests/support/netlab.py), every connection TLS. A seeded aim-grem job (checkpointed every round, its state sharded
over the workers, charged to a dataset budget) runs while (a) a worker is killed, (b) a worker's link is cut
(iptables DROP), (c) every link has 200 ms delay and 5 % loss, (d) a worker is killed and started again. Each
run either completes with the outputs of a clean run, or stops with one clear line and a folder that
``--resume`` completes to those outputs; the dataset budget holds one run, charged once.

Skipped, with the reason, where network namespaces cannot be made (not root, no ``ip`` / ``iptables``; .ci/run
installs both with apt). The kernel here has no ``sch_netem``: (c) then delays packets in a userspace delay line
in the hub (tests/support/netlab_relay.py; netem is used where it exists).
The scheduler notices a silent worker after 10 s (``worker-ttl``, set for this test cluster) instead of the
default 5 min, so that (b) finishes in seconds rather than minutes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import netlab


DOMAIN = {"a": 3, "b": 4, "c": 2, "d": 5, "e": 3}
SEED = 11
PORT = 8786
#: the test cluster's failure detection: a worker silent for 10 s is removed (default 5 min)
CLUSTER_ENV = {"DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "10s", "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "30s",
               "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "30s", "DASK_LOGGING__DISTRIBUTED": "error"}


def write_tls(folder: Path) -> dict[str, str]:
    """One self-signed CA/cert/key for every role (what ``Security.temporary()`` makes), as files."""
    from distributed import Security

    sec = Security.temporary()
    paths = {"ca_file": folder / "ca.pem", "cert": folder / "node.pem", "key": folder / "node.key"}
    paths["ca_file"].write_text(sec.tls_ca_file)
    paths["cert"].write_text(sec.tls_worker_cert)
    paths["key"].write_text(sec.tls_worker_key)
    for p in paths.values():
        p.chmod(0o600)
    return {k: str(v) for k, v in paths.items()}


def make_job(folder: Path, address: str, tls: dict[str, str], budget: Path, n: int = 20000, parts: int = 6) -> Path:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = rng.integers(0, 2, n)
    d = (b + c + rng.integers(0, 3, n)) % 5
    e = rng.integers(0, 3, n)
    frame = pd.DataFrame(dict(a=a, b=b, c=c, d=d, e=e))
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for i, idx in enumerate(np.array_split(np.arange(n), parts)):
        frame.iloc[idx].to_parquet(data / f"p{i}.parquet", index=False)
    cfg = {"mechanism": {"name": "aim-grem"}, "workload": [{"kway": 2}], "domain": DOMAIN,
           "privacy": {"epsilon": 1.0, "delta": 1e-9, "budget_file": str(budget)}, "data": {"path": str(data)},
           "cluster": {"type": "address", "address": address, "security": {"tls": tls}}}
    path = folder / f"job-{budget.stem}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class Cluster:
    """The scheduler and two workers of one test, started in their namespaces (TLS)."""

    def __init__(self, lab: netlab.NetLab, tls: dict[str, str], scratch: Path) -> None:
        self.lab, self.tls, self.scratch = lab, tls, scratch
        self.address = f"tls://{lab.ip('s')}:{PORT}"
        self.env = {**os.environ, **CLUSTER_ENV}
        self.tls_args = ["--tls-ca-file", tls["ca_file"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]]
        self.scheduler = lab.popen("s", [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", lab.ip("s"),
                                         "--port", str(PORT), "--protocol", "tls", "--no-dashboard", *self.tls_args],
                                   env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.workers: dict[str, subprocess.Popen] = {}
        for w in ("w1", "w2"):
            self.start_worker(w)
        self.wait_for_workers(2)

    def start_worker(self, node: str) -> None:
        local = self.scratch / f"{node}-{time.monotonic_ns()}"
        local.mkdir(parents=True)
        self.workers[node] = self.lab.popen(
            node, [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--host", self.lab.ip(node),
                   "--nthreads", "2", "--no-nanny", "--memory-limit", "1GiB", "--name", node, "--no-dashboard",
                   "--local-directory", str(local), *self.tls_args],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        """From the driver's namespace: connect over TLS and wait until ``n`` workers are up."""
        code = ("import sys; from distributed import Client, Security; "
                f"sec = Security(tls_ca_file={self.tls['ca_file']!r}, tls_client_cert={self.tls['cert']!r}, "
                f"tls_client_key={self.tls['key']!r}, require_encryption=True); "
                f"c = Client({self.address!r}, security=sec, timeout=60); c.wait_for_workers({n}, timeout={timeout}); "
                "print(len(c.scheduler_info()['workers'])); c.close()")
        r = self.lab.run("d", [sys.executable, "-c", code], timeout=timeout + 60, env=self.env)
        assert r.returncode == 0, r.stderr[-2000:]

    def kill_worker(self, node: str) -> None:
        netlab.kill(self.workers.pop(node))

    def close(self) -> None:
        for p in [*self.workers.values(), self.scheduler]:
            netlab.kill(p)


@pytest.fixture(scope="module")
def lab():
    reason = netlab.unavailable()
    if reason is not None:
        pytest.skip(f"network namespaces not available: {reason}")
    with netlab.NetLab(["s", "w1", "w2", "d"]) as lab:
        yield lab


def test_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the lab cannot be built the tests are skipped with the reason (not root; a tool missing)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "need root" in netlab.unavailable()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(netlab.shutil, "which", lambda tool: None if tool == "iptables" else "/usr/sbin/" + tool)
    assert "`iptables` is not installed" in netlab.unavailable()


@pytest.fixture(scope="module")
def setup(lab, tmp_path_factory):
    """TLS files, the data, and a clean reference run on the namespace cluster."""
    folder = tmp_path_factory.mktemp("netfaults")
    tls = write_tls(folder)
    cluster = Cluster(lab, tls, folder / "scratch")
    try:
        budget = new_budget(folder, "reference")
        cfg = make_job(folder, cluster.address, tls, budget)
        ref = folder / "reference"
        r = privcube_run(lab, cfg, ref)
        assert r.returncode == 0, r.stderr[-3000:]
        assert_charged_once(budget, ref)
    finally:
        cluster.close()
    return folder, tls, ref


def new_budget(folder: Path, name: str) -> Path:
    """A dataset budget that holds exactly one of these runs (a second charge would not fit)."""
    path = folder / f"{name}.budget"
    r = subprocess.run([sys.executable, "-m", "privcube", "budget", "init", str(path), "--epsilon", "1.3", "--delta",
                        "1e-9"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return path


def privcube_run(lab: netlab.NetLab, cfg: Path, out: Path, *extra: str, timeout: float = 600,
                 wait: bool = True) -> subprocess.CompletedProcess | subprocess.Popen:
    argv = [sys.executable, "-m", "privcube", "run", str(cfg), "--out", str(out), "--seed", str(SEED), "--quiet",
            "--no-report", *extra]
    env = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "error"}
    if wait:
        return lab.run("d", argv, timeout=timeout, env=env)
    return lab.popen("d", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_round(out: Path, k: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until the run has committed checkpoint round ``k`` (mid-run: the state is on the workers by then)."""
    cur = out / "store.zarr" / "checkpoint" / "CURRENT"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cur.exists() and int(cur.read_text().strip()[len("manifest-"):-len(".json")]) >= k:
            return
        assert proc.poll() is None, f"the run ended before round {k}: {proc.communicate()[1][-2000:]}"
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint round {k} within {timeout} s")


def finish(proc: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        netlab.kill(proc)
        raise AssertionError("the run did not finish") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_same_outputs(ref: Path, got: Path) -> None:
    """Answers, ledger and the mechanism's report (trace) equal to the clean run's, bit for bit."""
    assert (got / ".complete").exists()
    idx = json.loads((ref / "answers" / "index.json").read_text())
    assert json.loads((got / "answers" / "index.json").read_text()) == idx
    for g in idx["groups"]:
        pd.testing.assert_frame_equal(pd.read_parquet(ref / "answers" / g["file"]),
                                      pd.read_parquet(got / "answers" / g["file"]), check_exact=True)
    assert json.loads((got / "ledger.json").read_text()) == json.loads((ref / "ledger.json").read_text())
    rep = [json.loads((d / "report.json").read_text())["mechanism_report"] for d in (ref, got)]
    assert rep[0]["trace"] == rep[1]["trace"]


def assert_charged_once(budget: Path, out: Path) -> None:
    from privcube.dataset_budget import show_budget

    status = show_budget(budget)
    live = [r for r in status["runs"] if r["state"] != "released"]
    assert len(live) == 1 and live[0]["state"] == "settled", status["runs"]
    ledger = json.loads((out / "ledger.json").read_text())
    assert status["spent"]["rho"] == pytest.approx(ledger["spent"]["rho"], rel=1e-12)


def settle_outcome(lab: netlab.NetLab, cluster: Cluster, cfg: Path, out: Path, ref: Path, budget: Path,
                   r: subprocess.CompletedProcess, expect_loss: bool = True) -> str:
    """The fault's run either completed, or stopped with one clear line and a folder ``--resume`` completes
    (on the cluster as it is after the fault); then the outputs are the clean run's and the budget holds one
    charge. Returns which happened."""
    if r.returncode == 0:
        outcome = "completed"
        if expect_loss:  # the fault hit the run: it lost a worker's state and went on from its checkpoint
            assert "a dask worker was lost" in r.stderr, r.stderr[-3000:]
    else:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("privcube: "), r.stderr[-3000:]
        assert not any("Traceback" in ln for ln in lines), r.stderr[-3000:]
        assert (out / ".started").exists() and not (out / ".complete").exists()
        resumed = privcube_run(lab, cfg, out, "--resume")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        outcome = f"stopped ({lines[-1][:160]}), resumed"
    assert_same_outputs(ref, out)
    assert_charged_once(budget, out)
    print(f"outcome: {outcome}; stderr: {[ln for ln in r.stderr.splitlines() if ln.strip()][-3:]}")
    return outcome


@pytest.fixture()
def cluster(lab, setup):
    folder, tls, _ = setup
    c = Cluster(lab, tls, folder / "scratch")
    yield c
    c.close()
    for node in ("w1", "w2"):
        lab.heal(node)


def start_mid_run(lab, setup, cluster, tmp_path: Path, name: str) -> tuple:
    """A run on its own dataset budget started on the cluster and waited for to round 2 (mid-run): its config,
    run folder, the clean run's folder, the budget file and the process."""
    folder, tls, ref = setup
    budget = new_budget(tmp_path, name)
    cfg = make_job(tmp_path, cluster.address, tls, budget)
    out = tmp_path / "run"
    proc = privcube_run(lab, cfg, out, wait=False)
    wait_for_round(out, 2, proc)
    return cfg, out, ref, budget, proc


def test_a_worker_killed_mid_run(lab, setup, cluster, tmp_path) -> None:
    cfg, out, ref, budget, proc = start_mid_run(lab, setup, cluster, tmp_path, "a")
    cluster.kill_worker("w1")
    settle_outcome(lab, cluster, cfg, out, ref, budget, finish(proc))


def test_b_worker_link_cut_mid_run(lab, setup, cluster, tmp_path) -> None:
    cfg, out, ref, budget, proc = start_mid_run(lab, setup, cluster, tmp_path, "b")
    lab.cut("w1")  # its cable pulled: every packet dropped, both ways, nothing sent back
    settle_outcome(lab, cluster, cfg, out, ref, budget, finish(proc))


def test_d_worker_restarted_mid_run(lab, setup, cluster, tmp_path) -> None:
    cfg, out, ref, budget, proc = start_mid_run(lab, setup, cluster, tmp_path, "d")
    cluster.kill_worker("w1")
    cluster.start_worker("w1")  # the same machine comes back: a new worker process at the same address
    settle_outcome(lab, cluster, cfg, out, ref, budget, finish(proc))


# ~130 s, yet in the default suite: issue 37 asks (a)-(d) to pass in .ci/run
def test_c_delay_and_loss_on_every_link(lab, setup, cluster, tmp_path) -> None:
    """200 ms each way through the hub and 5 % of packets lost, on every link, for the whole run."""
    folder, tls, ref = setup
    budget = new_budget(tmp_path, "c")
    cfg = make_job(tmp_path, cluster.address, tls, budget)
    out = tmp_path / "run"
    how = lab.impair(0.2, 0.05)
    try:
        t0 = time.monotonic()
        r = privcube_run(lab, cfg, out, timeout=1200)
        print(f"impairment by {how}; run {time.monotonic() - t0:.0f} s")
        settle_outcome(lab, cluster, cfg, out, ref, budget, r, expect_loss=False)
    finally:
        lab.clear_impairment()
