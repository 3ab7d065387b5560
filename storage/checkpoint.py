"""Atomic, validated checkpoints of an iterative mechanism inside the run's zarr store.

Layout under ``<store>/checkpoint/`` (a zarr v3 subgroup; the JSON files beside the arrays are not zarr
nodes, so this module never lists the subgroup through zarr)::

    <name>-v<round>      one zarr array per saved array version (written via TensorStore)
    manifest-<round>.json  round, identity, JSON meta, and per array: version, shape, dtype, checksum
    CURRENT              the name of the committed manifest (replaced atomically with os.replace)

``save`` writes only arrays whose content changed since the last save (checksum), then a new manifest,
then switches ``CURRENT``; only after the switch are unreferenced versions and old manifests removed.
A crash at any point leaves the previous checkpoint intact. ``load`` validates the pointer, the
manifest, the identity and every array (shape, dtype, BLAKE2 checksum) and raises
:class:`~privcube.errors.CheckpointError` on any mismatch; ``check_identity`` does the cheap part
(pointer, manifest, identity) so a resume can be refused before any data is read.

Checkpoints hold only noisy state (residual estimates, precisions, marginal estimates, the ledger and
the trace); exact counts are recomputed from the data on resume.

Test hook (inert unless set): with the environment variable ``PRIVCUBE_TEST_STOP_AFTER_ROUND=k`` the
process kills itself with SIGKILL right after committing checkpoint round ``k`` -- a deterministic
stand-in for a driver killed mid-run, used by the resume tests.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from privcube.atomic import atomic_write_text
from privcube.errors import CheckpointError
from privcube.storage.zarr_store import TensorStore

FORMAT = "privcube-checkpoint-v1"
STOP_AFTER_ROUND_ENV = "PRIVCUBE_TEST_STOP_AFTER_ROUND"


def _test_stop_after(round: int) -> None:
    """Test hook: SIGKILL this process after committing ``round`` when the environment asks for it."""
    want = os.environ.get(STOP_AFTER_ROUND_ENV)
    if not want:
        return
    try:
        k = int(want)
    except ValueError:
        return
    if round == k:
        os.kill(os.getpid(), signal.SIGKILL)


def describe_mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """One line naming what differs between a checkpoint's identity and this run's."""
    if not isinstance(saved, Mapping):
        return f"identity {saved!r} != {dict(current)!r}"
    parts = []
    for k in sorted(set(saved) | set(current), key=str):
        a, b = saved.get(k), current.get(k)
        if a == b:
            continue
        if k == "config":
            parts.append("the job config differs (data, domain, workload, privacy, mechanism options or "
                         "noise_sampler changed)")
        elif k == "seed":
            parts.append(f"seed: the checkpoint was written with {'--seed ' + str(a) if a is not None else 'no seed'}, "
                         f"this run has {'--seed ' + str(b) if b is not None else 'no seed'}")
        else:
            parts.append(f"{k}: checkpoint has {a!r}, this run has {b!r}")
    return "; ".join(parts)


def checksum(array: np.ndarray) -> str:
    """BLAKE2b-128 of dtype, shape and C-order bytes."""
    a = np.ascontiguousarray(array)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def _write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file, fsync, os.replace)."""
    atomic_write_text(path, json.dumps(data, allow_nan=True))


class RunCheckpoint:
    """Checkpoint of one run: ``save(round, state)`` after every round, ``load()`` to resume."""

    def __init__(self, path: str | os.PathLike[str], identity: Mapping[str, Any] | None = None) -> None:
        """Checkpoints under ``<path>/checkpoint``; ``identity`` must match on load (mechanism, seed, ...)."""
        p = str(path)
        if "://" in p:
            raise CheckpointError(f"checkpoint path {p!r}: atomic checkpoints need a local filesystem path")
        self.root = Path(p)
        self.dir = self.root / "checkpoint"
        self.identity = json.loads(json.dumps(dict(identity or {}), default=str))
        self._store: TensorStore | None = None
        self._known: dict[str, dict[str, Any]] | None = None  # name -> manifest entry of the last save

    # ------------------------------------------------------------------------------------ helpers
    @property
    def store(self) -> TensorStore:
        """The zarr subgroup holding array versions (created on first use)."""
        if self._store is None:
            self.root.mkdir(parents=True, exist_ok=True)
            TensorStore(self.root)  # make sure the parent group exists
            self._store = TensorStore(self.dir)
        return self._store

    def _pointer(self) -> Path:
        return self.dir / "CURRENT"

    def exists(self) -> bool:
        """Whether a committed checkpoint exists."""
        return self._pointer().exists()

    def _read_manifest(self) -> dict[str, Any] | None:
        """The committed manifest (validated structurally), or None when no checkpoint exists."""
        ptr = self._pointer()
        if not ptr.exists():
            return None
        try:
            name = ptr.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise CheckpointError(f"checkpoint pointer {str(ptr)!r} cannot be read: {e}") from None
        if not name.startswith("manifest-") or "/" in name:
            raise CheckpointError(f"checkpoint pointer {str(ptr)!r} is corrupt: {name!r}")
        mpath = self.dir / name
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint manifest {str(mpath)!r} is missing") from None
        except (OSError, json.JSONDecodeError) as e:
            raise CheckpointError(f"checkpoint manifest {str(mpath)!r} is corrupt: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint manifest {str(mpath)!r} has an unknown format")
        for key in ("round", "identity", "meta", "arrays"):
            if key not in manifest:
                raise CheckpointError(f"checkpoint manifest {str(mpath)!r} lacks key {key!r}")
        if not isinstance(manifest["arrays"], dict) or not isinstance(manifest["round"], int):
            raise CheckpointError(f"checkpoint manifest {str(mpath)!r} is malformed")
        manifest["_file"] = name
        return manifest

    # -------------------------------------------------------------------------------- save / load
    def save(self, round: int, state: Mapping[str, Any]) -> None:
        """Commit ``state`` = {"meta": JSON mapping, "arrays": {name: ndarray}} as checkpoint ``round``."""
        if isinstance(round, bool) or not isinstance(round, (int, np.integer)) or round < 0:
            raise CheckpointError(f"checkpoint round must be a non-negative integer, got {round!r}")
        round = int(round)
        arrays = state.get("arrays", {})
        meta = state.get("meta", {})
        store = self.store
        if self._known is None:
            old = self._read_manifest() if self.exists() else None
            self._known = dict(old["arrays"]) if old else {}
        entries: dict[str, dict[str, Any]] = {}
        for name, arr in arrays.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise CheckpointError(f"checkpoint array name {name!r} must be a non-empty string without '/'")
            a = np.asarray(arr)
            digest = checksum(a)
            prev = self._known.get(name)
            if prev is not None and prev["checksum"] == digest:
                entries[name] = prev
                continue
            version = f"{name}-v{round}"
            store.write(version, a)
            entries[name] = {"version": version, "shape": list(a.shape), "dtype": a.dtype.str, "checksum": digest}
        manifest = {"format": FORMAT, "round": round, "identity": self.identity,
                    "meta": json.loads(json.dumps(meta, allow_nan=True)), "arrays": entries}
        mname = f"manifest-{round}.json"
        _write_json_atomic(self.dir / mname, manifest)
        atomic_write_text(self._pointer(), mname)  # the commit point
        self._known = entries
        self._collect(entries, keep_manifest=mname)
        _test_stop_after(round)

    def _collect(self, entries: Mapping[str, Mapping[str, Any]], keep_manifest: str) -> None:
        """Remove array versions and manifests the committed checkpoint no longer references."""
        live = {e["version"] for e in entries.values()}
        with os.scandir(self.dir) as it:  # not a zarr listing: it would warn about the manifest files
            for d in it:
                if d.is_dir() and d.name not in live and not d.name.startswith(".tmp-"):
                    shutil.rmtree(d.path, ignore_errors=True)
        for f in self.dir.glob("manifest-*.json"):
            if f.name != keep_manifest:
                f.unlink(missing_ok=True)

    def _check(self, manifest: Mapping[str, Any]) -> None:
        if self.identity and manifest["identity"] != self.identity:
            raise CheckpointError(f"checkpoint in {str(self.dir)!r} belongs to a different run: "
                                  + describe_mismatch(manifest["identity"], self.identity))

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint after checking pointer, manifest and identity; None if none."""
        manifest = self._read_manifest()
        if manifest is None:
            return None
        self._check(manifest)
        return int(manifest["round"])

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """(round, {"meta", "arrays"}) of the committed checkpoint, None if none; CheckpointError if corrupt."""
        manifest = self._read_manifest()
        if manifest is None:
            return None
        self._check(manifest)
        arrays: dict[str, np.ndarray] = {}
        for name, e in manifest["arrays"].items():
            try:
                version, shape, dtype, digest = e["version"], tuple(e["shape"]), np.dtype(e["dtype"]), e["checksum"]
            except (KeyError, TypeError) as exc:
                raise CheckpointError(f"checkpoint entry {name!r} is malformed: {exc}") from None
            if not (self.dir / version).is_dir():
                raise CheckpointError(f"checkpoint array {name!r} (version {version!r}) is missing")
            try:
                a = np.asarray(zarr.open_array(str(self.dir / version), mode="r")[...])
            except Exception as exc:  # zarr raises many types on damaged data
                raise CheckpointError(f"checkpoint array {name!r} cannot be read: {exc}") from None
            if a.shape != shape or a.dtype != dtype:
                raise CheckpointError(
                    f"checkpoint array {name!r} has shape {a.shape}/{a.dtype}, manifest says {shape}/{dtype}")
            if checksum(a) != digest:
                raise CheckpointError(f"checkpoint array {name!r} fails its checksum (corrupt data)")
            arrays[name] = a
        self._known = dict(manifest["arrays"])
        return manifest["round"], {"meta": manifest["meta"], "arrays": arrays}

    def clear(self) -> None:
        """Delete every checkpoint of this run."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self._store = None
        self._known = None


__all__ = ["FORMAT", "STOP_AFTER_ROUND_ENV", "RunCheckpoint", "checksum", "describe_mismatch"]
