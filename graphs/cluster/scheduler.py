"""Schedulers privcube does not start: ``address`` (``Client(address)``) and ``scheduler-file``
(``Client(scheduler_file=...)``, e.g. written by an HPC job script).

A scheduler that does not answer is one ConfigError line within seconds (a TCP probe first), not
distributed's 30 s of retries; a plain ``tcp://`` scheduler off the loopback interface is refused unless
``allow_insecure: true``. Closing the handle closes the Client, never the remote cluster.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.params import REQUIRED, Param
from privcube.graphs.cluster.kind import ClusterKind


class _Connects(ClusterKind):
    """A scheduler someone else runs: its address is required, TLS ``auto`` cannot be trusted by it."""

    abilities = frozenset({"connects", "tls"})
    flag = ""

    def check(self, options: dict[str, Any], *, security_spec: Any, security: Any, flag: str | None) -> None:
        key = next(iter(self.OPTIONS))
        if not options.get(key):
            raise ConfigError(f"cluster type {self.name!r} needs key {key!r} (or {self.flag})")
        if _tls_auto(security_spec):
            raise ConfigError(f"cluster.security.tls: 'auto' makes a certificate only this process holds, which a "
                              f"scheduler privcube does not start ({self.name}) cannot trust; give "
                              f"{{ca_file, cert, key}} of the cluster's CA instead")


class AddressKind(_Connects):
    """``Client(address)`` to a running scheduler (``--scheduler-address`` gives it too)."""

    name = "address"
    description = "connect to a running Dask scheduler at an address (--scheduler-address)"
    OPTIONS = {"address": Param(REQUIRED, "tcp:// or tls:// address", "the scheduler, e.g. tcp://host:8786")}
    flag = "--scheduler-address"

    def open(self, handle: Any) -> Any:
        from distributed import Client

        from privcube.graphs.cluster.security import check_address_security, client_kwargs

        address = check_address_security(handle.options["address"], handle.security, handle.allow_insecure)
        _check_reachable(address, "--scheduler-address / cluster.address")
        ckw = client_kwargs(handle.security)
        handle.client = _client_or_one_line(lambda: Client(address, timeout=CONNECT_TIMEOUT_S, **ckw), address)
        return handle.client


class SchedulerFileKind(_Connects):
    """``Client(scheduler_file=...)``: the address a scheduler wrote into a file (waited for up to a minute)."""

    name = "scheduler-file"
    description = "connect to the Dask scheduler whose address a scheduler file holds (--scheduler-file)"
    OPTIONS = {"scheduler_file": Param(REQUIRED, "path", "the JSON file `dask scheduler --scheduler-file` "
                                                         "writes")}
    LOCAL_PATHS = ("scheduler_file",)
    flag = "--scheduler-file"

    def open(self, handle: Any) -> Any:
        from distributed import Client

        from privcube.graphs.cluster.security import check_address_security, client_kwargs

        path = str(handle.options["scheduler_file"])
        address = _scheduler_file_address(path)
        check_address_security(address, handle.security, handle.allow_insecure)
        _check_reachable(address, f"scheduler file {path!r}")
        ckw = client_kwargs(handle.security)
        handle.client = _client_or_one_line(
            lambda: Client(scheduler_file=path, timeout=CONNECT_TIMEOUT_S, **ckw), address)
        return handle.client


#: seconds to wait for a scheduler that accepts connections (distributed's default is 30 s of retries)
CONNECT_TIMEOUT_S = 10
#: seconds for the first TCP probe of a scheduler address: a closed port or unknown host fails at once
PROBE_TIMEOUT_S = 3


def _check_reachable(address: str, where: str) -> None:
    """One ConfigError line, within seconds, when nothing listens at a tcp:// or tls:// scheduler ``address``
    (a closed port, an unknown host): distributed would retry for 30 s and end in a long traceback."""
    import socket

    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address)
    except (ValueError, TypeError):
        raise ConfigError(f"scheduler address {address!r} ({where}) is not an address such as "
                          "tcp://host:8786") from None
    if scheme not in ("tcp", "tls"):
        return
    try:
        host, port = parse_host_port(loc)
    except (ValueError, TypeError):
        raise ConfigError(f"scheduler address {address!r} ({where}) needs a host and a port, e.g. "
                          "tcp://host:8786") from None
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            return
    except OSError as e:
        reason = "connection refused: no scheduler listens there" if isinstance(e, ConnectionRefusedError) else \
            "timed out" if isinstance(e, (TimeoutError, socket.timeout)) else (e.strerror or type(e).__name__)
        raise ConfigError(f"cannot reach the Dask scheduler at {address} ({where}): {reason}; start it, or give "
                          "the address it prints") from None


def _client_or_one_line(connect: Any, address: str) -> Any:
    """``connect()``; a connection that fails or times out after the probe is one ConfigError line."""
    try:
        return connect()
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot connect to the Dask scheduler at {address}: "
                          f"{' '.join(str(e).split())[:200] or type(e).__name__}") from None


def _tls_auto(sec_spec: Any) -> bool:
    """Whether a ``security`` section asks for temporary certificates (``auto``)."""
    tls = sec_spec.get("tls") if isinstance(sec_spec, Mapping) else sec_spec
    return tls is True or tls == "auto"


def _scheduler_file_address(path: str) -> str:
    """The scheduler address recorded in a scheduler file (so it can be security-checked first)."""
    import json
    import time

    deadline = time.monotonic() + 60.0
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.25)  # the scheduler may still be starting (HPC job scripts)
    try:
        with open(path) as f:
            return str(json.load(f)["address"])
    except FileNotFoundError:
        raise ConfigError(f"scheduler file {path!r} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"scheduler file {path!r} is not a Dask scheduler file ({e})") from None


__all__ = ["AddressKind", "CONNECT_TIMEOUT_S", "PROBE_TIMEOUT_S", "SchedulerFileKind"]
