"""Transport security for the cluster: TLS settings from the config, and refusal of plain-text links.

Private data and exact (pre-noise) marginals travel between the client, scheduler and workers. On a
plain ``tcp://`` link anyone on the network path can read them, so privcube refuses a plain-text
scheduler address that is not on the loopback interface unless the config says ``allow_insecure:
true`` (e.g. inside a private, already-encrypted network such as a VPN or a service mesh).

Spec (the config's ``security`` section)::

    security:
      tls: auto                      # distributed.Security.temporary(): in-memory self-signed cert, for
                                     # clusters privcube starts (local; slurm/pbs, whose jobs get it
                                     # through jobqueue's shared_temp_directory; kubernetes DaskJob
                                     # resources, where it is rendered into a Secret); refused for
                                     # address/scheduler-file, whose scheduler could not trust it
    security:
      tls: {ca_file: ca.pem, cert: node.pem, key: node.key}   # one PEM cert/key for every role
      allow_insecure: false          # read by the caller, see check_address_security

``"auto"`` may also be given as the whole spec. The files are checked (exist, readable, loadable by
``ssl``) and a missing one raises ``ConfigError`` naming the key and the path.
"""
from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Mapping
from typing import Any

from privcube.core.errors import ConfigError

_TLS_KEYS = ("ca_file", "cert", "key")
_SPEC_KEYS = ("tls", "allow_insecure")
_SECURE_SCHEMES = frozenset({"tls", "wss"})
_IN_PROCESS_SCHEMES = frozenset({"inproc"})


def _check_file(key: str, value: Any) -> str:
    """A readable regular file for ``security.tls.<key>``, or ConfigError naming key and path."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise ConfigError(f"security.tls.{key} must be a file path, got {value!r}")
    path = os.path.expanduser(os.fspath(value))
    if not os.path.isfile(path):
        raise ConfigError(f"security.tls.{key}: file not found: {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"security.tls.{key}: file not readable: {path}")
    return os.path.abspath(path)


def security_from_spec(spec: Mapping[str, Any] | str | None) -> Any:
    """A ``distributed.Security`` from the config's security section, or None when TLS is not asked for."""
    if spec is None:  # no TLS asked for: distributed is not imported (a threads run does not need it)
        return None
    from distributed import Security

    if isinstance(spec, str):
        spec = {"tls": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"security must be a mapping (keys {list(_SPEC_KEYS)}) or 'auto', got {spec!r}")
    unknown = sorted(set(spec) - set(_SPEC_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in security; allowed: {list(_SPEC_KEYS)}")
    allow = spec.get("allow_insecure", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"security.allow_insecure must be true or false, got {allow!r}")
    tls = spec.get("tls")
    if tls is None or tls is False:
        return None
    if tls == "auto" or tls is True:
        try:
            return Security.temporary()
        except ImportError as exc:  # pragma: no cover - cryptography is a distributed dependency here
            raise ConfigError(f"security.tls: 'auto' needs the 'cryptography' package ({exc})") from exc
    if isinstance(tls, str):
        raise ConfigError(f"security.tls must be 'auto' or a mapping with {list(_TLS_KEYS)}, got {tls!r}")
    if not isinstance(tls, Mapping):
        raise ConfigError(f"security.tls must be 'auto' or a mapping with {list(_TLS_KEYS)}, got {tls!r}")
    unknown = sorted(set(tls) - set(_TLS_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in security.tls; allowed: {list(_TLS_KEYS)}")
    for key in _TLS_KEYS:
        if key not in tls:
            raise ConfigError(f"security.tls needs key {key!r} (all of {list(_TLS_KEYS)})")
    ca, cert, key = (_check_file(k, tls[k]) for k in _TLS_KEYS)
    try:
        ssl.create_default_context(cafile=ca)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"security.tls.ca_file: not a PEM CA certificate: {ca} ({exc})") from exc
    try:
        ssl.create_default_context().load_cert_chain(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"security.tls.cert/key: cannot load the pair {cert} / {key} ({exc})") from exc
    return Security(
        require_encryption=True,
        tls_ca_file=ca,
        tls_client_cert=cert, tls_client_key=key,
        tls_scheduler_cert=cert, tls_scheduler_key=key,
        tls_worker_cert=cert, tls_worker_key=key,
    )


def allow_insecure_from_spec(spec: Mapping[str, Any] | str | None) -> bool:
    """The ``security.allow_insecure`` flag (default False)."""
    if isinstance(spec, Mapping):
        allow = spec.get("allow_insecure", False)
        if not isinstance(allow, bool):
            raise ConfigError(f"security.allow_insecure must be true or false, got {allow!r}")
        return allow
    return False


def is_loopback_host(host: str) -> bool:
    """Literal loopback only: 127.0.0.0/8, ::1 or 'localhost' (names are not resolved: DNS can lie)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def check_address_security(address: str, security: Any, allow_insecure: bool = False) -> str:
    """Refuse a plain-text scheduler address off the loopback interface; return it with its scheme.

    ``tls://`` needs a Security; a Security that requires encryption cannot use ``tcp://``; a
    ``tcp://`` (or schemeless) address whose host is not loopback needs ``allow_insecure=True``.
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    if not isinstance(address, str) or not address.strip():
        raise ConfigError(f"cluster address must be a non-empty string, got {address!r}")
    if not isinstance(allow_insecure, bool):
        raise ConfigError(f"security.allow_insecure must be true or false, got {allow_insecure!r}")
    try:
        scheme, loc = parse_address(address.strip())
    except ValueError as exc:
        raise ConfigError(f"cluster address {address!r} is malformed ({exc})") from exc
    full = f"{scheme}://{loc}"
    if scheme in _IN_PROCESS_SCHEMES:
        return full
    if scheme in _SECURE_SCHEMES:
        if security is None:
            raise ConfigError(f"cluster address {address!r} uses {scheme}:// but no security.tls is configured")
        return full
    if security is not None and getattr(security, "require_encryption", False):
        raise ConfigError(f"cluster address {address!r} is plain {scheme}:// but security.tls requires "
                          f"encryption; use tls://{loc}")
    try:
        host, _ = parse_host_port(loc, default_port=0)
    except ValueError as exc:
        raise ConfigError(f"cluster address {address!r} has a malformed host:port ({exc})") from exc
    if is_loopback_host(str(host)) or allow_insecure:
        return full
    raise ConfigError(
        f"cluster address {address!r} is plain-text {scheme}:// to non-loopback host {host or '<all interfaces>'!r}: "
        f"private data would cross the network unencrypted. Configure security.tls and use tls://, "
        f"or set security.allow_insecure: true if the network is trusted")


def local_cluster_kwargs(security: Any, *, loopback: bool = True) -> dict[str, Any]:
    """Extra ``LocalCluster`` kwargs: loopback-only binding, plus protocol tls:// and the Security if given.

    Without ``host``, a LocalCluster's scheduler listens on every interface (0.0.0.0), so a local run
    would expose an unauthenticated scheduler to the network; ``loopback=False`` keeps that default.
    """
    kw: dict[str, Any] = {"host": "127.0.0.1"} if loopback else {}
    if security is not None:
        kw.update(protocol="tls://", security=security)
    return kw


def client_kwargs(security: Any) -> dict[str, Any]:
    """Extra ``Client`` kwargs (``security=``) for connecting to a TLS scheduler; {} without."""
    return {} if security is None else {"security": security}


__all__ = ["allow_insecure_from_spec", "check_address_security", "client_kwargs", "is_loopback_host",
           "local_cluster_kwargs", "security_from_spec"]
