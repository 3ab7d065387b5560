"""Test-only network lab: nodes in their own network namespaces, linked by veth pairs to a hub namespace that
routes between them, with faults injected on the links.

Topology: node i (scheduler, workers, the driver) has ``eth0`` = 10.77.i.2/24 in its namespace, paired with
``h<i>`` = 10.77.i.1/24 in the hub, which forwards between the nodes' subnets (every node's default route).
Faults: ``cut(node)`` drops every packet of a node's link (iptables DROP in its namespace, both directions);
``impair(delay, loss)`` delays and drops packets on every link: with ``tc netem`` where the kernel has it, else
(this machine's kernel has no sch_netem) by a delay line in the hub (netlab_relay.py): packets arriving on any
``h<i>`` are policy-routed into a TUN device, held ``delay`` seconds, dropped with probability ``loss``, and
injected through a second TUN device, from which the hub forwards them on. Either way each packet between two
nodes crosses the impairment once per direction (one-way delay ``delay`` through the hub).

``unavailable()`` says why a lab cannot be built here (not root, no ``ip`` / ``iptables``, namespaces refused);
tests skip with that reason. Everything is torn down by ``close()`` (namespaces deleted: their interfaces,
rules and TUN devices go with them; the processes the lab started are killed by their pids).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RELAY = Path(__file__).resolve().parent / "netlab_relay.py"


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def unavailable() -> str | None:
    """None when network namespaces, veth pairs and iptables work here, else the reason they do not."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (.ci/run installs iproute2 and iptables with apt)"
    probe = f"pcprobe{os.getpid()}"
    try:
        r = _run("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            return f"network namespaces are not available: {r.stderr.strip()}"
        for argv in (("ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0"),
                     ("ip", "netns", "exec", probe, "iptables", "-A", "OUTPUT", "-o", "a0", "-j", "DROP")):
            r = _run(*argv, check=False)
            if r.returncode != 0:
                return f"`{' '.join(argv[3:])}` fails here: {r.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def netem_available() -> bool:
    """Whether the kernel has the netem queueing discipline."""
    probe = f"pcnetem{os.getpid()}"
    try:
        if _run("ip", "netns", "add", probe, check=False).returncode != 0:
            return False
        return _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                    "1ms", check=False).returncode == 0
    finally:
        _run("ip", "netns", "del", probe, check=False)


class NetLab:
    """Namespaces ``<tag>-hub`` and ``<tag>-<node>`` for each node name (see the module docstring)."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.tag = f"pcn{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
        self.nodes = list(nodes)
        self.index = {n: i + 1 for i, n in enumerate(self.nodes)}
        self.hub = f"{self.tag}-hub"
        self.procs: list[subprocess.Popen] = []
        self.relay: subprocess.Popen | None = None
        self.netem = False
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def ns(self, node: str) -> str:
        return f"{self.tag}-{node}"

    def ip(self, node: str) -> str:
        return f"10.77.{self.index[node]}.2"

    def _build(self) -> None:
        for name in [self.hub] + [self.ns(n) for n in self.nodes]:
            _run("ip", "netns", "add", name)
            self._made.append(name)
            _run("ip", "-n", name, "link", "set", "lo", "up")
        hub = self.hub
        _run("ip", "netns", "exec", hub, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
        for node, i in self.index.items():
            ns = self.ns(node)
            _run("ip", "-n", hub, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", hub, "addr", "add", f"10.77.{i}.1/24", "dev", f"h{i}")
            _run("ip", "-n", hub, "link", "set", f"h{i}", "up")
            _run("ip", "-n", ns, "addr", "add", f"10.77.{i}.2/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "route", "add", "default", "via", f"10.77.{i}.1")

    # ------------------------------------------------------------------------------------ processes
    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` inside the node's namespace (its own process group, killed by ``close``)."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(node), *argv], start_new_session=True, **kwargs)
        self.procs.append(p)
        return p

    def run(self, node: str, argv: Sequence[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` inside the node's namespace to completion (output captured)."""
        p = self.popen(node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(p)
            out, err = p.communicate()
            raise AssertionError(f"{' '.join(argv[:4])}... did not finish in {timeout:.0f} s\n{err}") from None
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    # ---------------------------------------------------------------------------------------- faults
    def cut(self, node: str) -> None:
        """Drop every packet on the node's link, both ways (its cable pulled, no error sent back)."""
        ns = self.ns(node)
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            _run("ip", "netns", "exec", ns, "iptables", "-I", chain, flag, "eth0", "-j", "DROP")

    def heal(self, node: str) -> None:
        ns = self.ns(node)
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            _run("ip", "netns", "exec", ns, "iptables", "-D", chain, flag, "eth0", "-j", "DROP", check=False)

    def impair(self, delay: float, loss: float, seed: int = 0) -> str:
        """Delay and lose packets on every link (netem when the kernel has it, else the hub's delay line);
        returns which was used."""
        if netem_available():
            for node, i in self.index.items():
                _run("ip", "netns", "exec", self.hub, "tc", "qdisc", "add", "dev", f"h{i}", "root", "netem",
                     "delay", f"{int(delay * 1000)}ms", "loss", f"{loss * 100:g}%")
            self.netem = True
            return "netem"
        hub = self.hub
        for dev in ("tin", "tout"):
            _run("ip", "-n", hub, "tuntap", "add", "dev", dev, "mode", "tun")
        self.relay = subprocess.Popen(["ip", "netns", "exec", hub, sys.executable, str(RELAY), "tin", "tout",
                                       repr(delay), repr(loss), str(seed)], start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for dev in ("tin", "tout"):
            _run("ip", "-n", hub, "link", "set", dev, "up")
        deadline = time.monotonic() + 20
        while any("LOWER_UP" not in _run("ip", "-n", hub, "link", "show", dev).stdout for dev in ("tin", "tout")):
            if self.relay.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the delay line did not attach to its TUN devices: "
                                   + (self.relay.stderr.read() if self.relay.poll() is not None and self.relay.stderr else ""))
            time.sleep(0.1)
        _run("ip", "netns", "exec", hub, "sh", "-c", "for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > $f; "
             "done")
        _run("ip", "-n", hub, "route", "add", "default", "dev", "tin", "table", "100")
        for i in self.index.values():
            _run("ip", "-n", hub, "rule", "add", "iif", f"h{i}", "lookup", "100")
        return "delay line"

    def clear_impairment(self) -> None:
        """Undo ``impair``: links back to plain veth forwarding."""
        hub = self.hub
        if self.netem:
            for i in self.index.values():
                _run("ip", "netns", "exec", hub, "tc", "qdisc", "del", "dev", f"h{i}", "root", check=False)
            self.netem = False
        for i in self.index.values():
            _run("ip", "-n", hub, "rule", "del", "iif", f"h{i}", "lookup", "100", check=False)
        _run("ip", "-n", hub, "route", "flush", "table", "100", check=False)
        if self.relay is not None:
            kill(self.relay)
            self.relay = None
            for dev in ("tin", "tout"):
                _run("ip", "-n", hub, "tuntap", "del", "dev", dev, "mode", "tun", check=False)

    # -------------------------------------------------------------------------------------- teardown
    def close(self) -> None:
        for p in [*self.procs, *([self.relay] if self.relay is not None else [])]:
            kill(p)
        for name in reversed(self._made):
            _run("ip", "netns", "del", name, check=False)
        self._made.clear()

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def kill(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the process group the lab started (``ip netns exec`` and what it runs), then reap it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass
