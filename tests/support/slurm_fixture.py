"""A real single-node Slurm for the tests: munged, slurmctld and slurmd started from a private folder.

``slurm`` (session fixture) needs Debian's ``slurmctld``, ``slurmd`` and ``munge`` packages and root
(slurmd launches jobs as their owner); otherwise the tests that use it are skipped with that reason.
It writes a ``slurm.conf`` for this host into a temporary folder (one node with this machine's CPUs
and memory, partition ``debug``, free ports, its own munge key and socket, no cgroups, no
accounting), starts the three daemons in the foreground (``-D``/``-F``) as child processes, points
``SLURM_CONF`` at the file for the rest of the session (sbatch, squeue, dask-jobqueue read it), waits
until ``sinfo`` reports the node ``idle``, and at the end cancels every job and stops the daemons by
their PIDs. No systemd, nothing outside the folder is touched. ``MinJobAge=4`` keeps ``sbatch --wait``
polling every 2 s (it backs off to 32 s when finished jobs are kept longer).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "srun")
PARTITION = "debug"


@dataclass
class Slurm:
    """A running test Slurm: its config, partition, node and the seconds it took to start."""

    folder: Path
    conf: Path
    partition: str
    node: str
    cpus: int
    memory_mb: int
    start_seconds: float
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "SLURM_CONF": str(self.conf)})

    def wait_no_jobs(self, timeout: float = 60) -> bool:
        """Wait until the queue is empty (cancelled jobs leave); True if it emptied."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.run("squeue", "--noheader", "--format=%i")
            if r.returncode == 0 and not r.stdout.strip():
                return True
            time.sleep(0.5)
        return False


def _which(name: str) -> str | None:
    """``name`` on PATH or in the sbin folders (daemons live there; users' PATH often lacks them)."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin:/usr/local/sbin")


def slurm_unavailable() -> str | None:
    """Why a test Slurm cannot be started here, or None."""
    missing = [d for d in DAEMONS if _which(d) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing; on Debian: apt-get install -y "
                "slurmctld slurmd munge)")
    if os.geteuid() != 0:
        return "the test Slurm needs root (slurmd starts jobs as their owner)"
    return None


def _free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _memory_mb() -> int:
    """90% of this machine's memory in MiB (slurmd drains a node that has less than RealMemory)."""
    import psutil

    return int(psutil.virtual_memory().total / 2**20 * 0.9)


def write_slurm_conf(folder: Path, node: str, cpus: int, memory_mb: int) -> Path:
    """slurm.conf (and the munge key) for a one-node cluster living entirely in ``folder``."""
    for sub in ("state", "spool", "log"):
        (folder / sub).mkdir(mode=0o700, exist_ok=True)
    munge = folder / "munge"
    munge.mkdir(mode=0o755, exist_ok=True)  # the socket's folder must be searchable by job owners
    key = munge / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    conf = folder / "slurm.conf"
    conf.write_text(f"""\
ClusterName=privcube-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge / 'munge.socket'}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder / 'state'}
SlurmdSpoolDir={folder / 'spool'}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}
SlurmdLogFile={folder / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=4
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")
    return conf


def _stop(procs: dict[str, subprocess.Popen]) -> None:
    """SIGTERM each daemon by PID (in reverse start order), then SIGKILL what is left."""
    for proc in reversed(list(procs.values())):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def start_slurm(folder: Path) -> tuple[Slurm, dict[str, subprocess.Popen]]:
    """Start munged, slurmctld and slurmd for ``folder`` and wait until the node is idle."""
    t0 = time.monotonic()
    node = socket.gethostname().split(".")[0]
    cpus = len(os.sched_getaffinity(0))
    memory_mb = _memory_mb()
    conf = write_slurm_conf(folder, node, cpus, memory_mb)
    munge = folder / "munge"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs: dict[str, subprocess.Popen] = {}
    commands = {
        "munged": [_which("munged") or "munged", "-F", "--force", f"--socket={munge / 'munge.socket'}", f"--key-file={munge / 'munge.key'}",
                   f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}",
                   f"--log-file={folder / 'log' / 'munged.log'}"],
        "slurmctld": [_which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(conf)],
        "slurmd": [_which("slurmd") or "slurmd", "-D", "-f", str(conf), "-N", node],
    }
    try:
        for name, cmd in commands.items():
            with open(folder / "log" / f"{name}.out", "wb") as out:
                procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True)
            if name == "munged":
                _wait(lambda: (munge / "munge.socket").exists(), 20, "munged did not create its socket", procs, folder)
        slurm = Slurm(folder, conf, PARTITION, node, cpus, memory_mb, 0.0, {k: p.pid for k, p in procs.items()})

        def idle() -> bool:
            r = slurm.run("sinfo", "--noheader", "--format=%t", f"--partition={PARTITION}", timeout=10)
            return r.returncode == 0 and r.stdout.strip() == "idle"

        _wait(idle, 60, "the node did not become idle", procs, folder)
    except BaseException:
        _stop(procs)
        raise
    slurm.start_seconds = time.monotonic() - t0
    return slurm, procs


def _wait(ready: Callable[[], bool], timeout: float, what: str, procs: dict[str, subprocess.Popen], folder: Path) -> None:
    """Poll ``ready()`` until true; fail with the daemons' logs after ``timeout`` or if one died."""
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [n for n, p in procs.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-2000:]}"
                             for f in sorted((folder / "log").glob("*")))
            raise RuntimeError(f"test Slurm: {what} (exited: {dead})\n{logs}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    """A single-node Slurm running for the test session (skipped where it cannot run)."""
    reason = slurm_unavailable()
    if reason:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="privcube-slurm-"))
    folder.chmod(0o755)
    old = os.environ.get("SLURM_CONF")
    cluster, procs = start_slurm(folder)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    print(f"test Slurm ({cluster.cpus} CPUs, {cluster.memory_mb} MiB) idle after {cluster.start_seconds:.1f} s")
    try:
        yield cluster
    finally:
        cluster.run("scancel", "--full", "--user=root")
        cluster.wait_no_jobs(30)
        _stop(procs)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        shutil.rmtree(folder, ignore_errors=True)
