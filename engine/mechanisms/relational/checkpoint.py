"""Atomic, validated checkpoints of a relational run (stage 1 tables, stage 2 link iterations).

Layout under ``<run>/checkpoint/`` (the relational job's own; independent of ``storage.checkpoint``)::

    state-<round>.npz    the arrays of round ``round`` (synthetic codes, links si/sj, noisy releases)
    state-<round>.json   round, identity, JSON meta (ledger charges, selections, history), npz checksum
    CURRENT              the name of the committed JSON (replaced atomically: the commit point)

``save`` writes the npz, then the JSON, then switches ``CURRENT``; only then are older rounds removed,
so a crash at any point leaves the previous checkpoint intact. ``load`` validates pointer, identity and
the npz checksum (BLAKE2b) and raises :class:`~privcube.errors.CheckpointError` on any mismatch.
Everything stored is differentially private (synthetic tables, synthetic links, Gaussian releases) or
public (the ledger's charges).

Test hook (inert unless set): ``PRIVCUBE_TEST_STOP_AFTER_ROUND=k`` SIGKILLs the process right after
round ``k`` is committed (the same variable as ``storage.checkpoint``'s hook).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privcube.atomic import atomic_write_bytes, atomic_write_text
from privcube.errors import CheckpointError

FORMAT = "privcube-relational-checkpoint-v1"
STOP_AFTER_ROUND_ENV = "PRIVCUBE_TEST_STOP_AFTER_ROUND"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _mismatch(saved: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """One line naming what differs between two identities."""
    parts = []
    for k in sorted(set(saved) | set(current), key=str):
        a, b = saved.get(k), current.get(k)
        if a == b:
            continue
        if k == "seed":
            parts.append(f"seed: the checkpoint was written with {'--seed ' + str(a) if a is not None else 'no seed'}, "
                         f"this run has {'--seed ' + str(b) if b is not None else 'no seed'}")
        elif k == "config":
            parts.append("the job config differs (data, schemas, links, privacy or mechanism options changed)")
        else:
            parts.append(f"{k}: checkpoint has {a!r}, this run has {b!r}")
    return "; ".join(parts)


class RelationalCheckpoint:
    """``save(round, {"meta", "arrays"})`` after every stage step, ``load()`` to resume."""

    def __init__(self, path: str | os.PathLike[str], identity: Mapping[str, Any]) -> None:
        """Checkpoints in folder ``path`` that must carry ``identity`` (mechanism, seed, config hash)."""
        self.dir = Path(path)
        self.identity = json.loads(json.dumps(dict(identity), default=str))

    def exists(self) -> bool:
        """Whether a committed checkpoint exists."""
        return (self.dir / "CURRENT").exists()

    def _manifest(self) -> dict[str, Any] | None:
        ptr = self.dir / "CURRENT"
        if not ptr.exists():
            return None
        try:
            name = ptr.read_text(encoding="utf-8").strip()
            if not (name.startswith("state-") and name.endswith(".json")) or "/" in name:
                raise CheckpointError(f"checkpoint pointer {str(ptr)!r} is corrupt: {name!r}")
            manifest = json.loads((self.dir / name).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise CheckpointError(f"checkpoint in {str(self.dir)!r} cannot be read: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint in {str(self.dir)!r} has an unknown format")
        if manifest.get("identity") != self.identity:
            raise CheckpointError(f"checkpoint in {str(self.dir)!r} belongs to a different run: "
                                  + _mismatch(manifest.get("identity") or {}, self.identity))
        return manifest

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint after checking pointer, format and identity; None if none."""
        m = self._manifest()
        return None if m is None else int(m["round"])

    def save(self, round: int, state: Mapping[str, Any]) -> None:
        """Commit ``state`` = {"meta": JSON mapping, "arrays": {name: ndarray}} as round ``round``."""
        round = int(round)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in state.get("arrays", {}).items()})
        data = buf.getvalue()
        npz = f"state-{round}.npz"
        atomic_write_bytes(self.dir / npz, data)
        name = f"state-{round}.json"
        manifest = {"format": FORMAT, "round": round, "identity": self.identity, "arrays": npz,
                    "checksum": _digest(data), "meta": state.get("meta", {})}
        atomic_write_text(self.dir / name, json.dumps(manifest, allow_nan=True, default=str))
        atomic_write_text(self.dir / "CURRENT", name)  # the commit point
        for f in self.dir.glob("state-*"):
            if f.name not in (name, npz):
                f.unlink(missing_ok=True)
        want = os.environ.get(STOP_AFTER_ROUND_ENV)
        if want and want.strip().lstrip("-").isdigit() and int(want) == round:
            os.kill(os.getpid(), signal.SIGKILL)

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """(round, {"meta", "arrays"}) of the committed checkpoint, None if none; CheckpointError if corrupt."""
        m = self._manifest()
        if m is None:
            return None
        path = self.dir / str(m.get("arrays"))
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CheckpointError(f"checkpoint arrays {str(path)!r} cannot be read: {e}") from None
        if _digest(data) != m.get("checksum"):
            raise CheckpointError(f"checkpoint arrays {str(path)!r} fail their checksum (corrupt data)")
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return int(m["round"]), {"meta": m.get("meta", {}), "arrays": arrays}


__all__ = ["FORMAT", "RelationalCheckpoint", "STOP_AFTER_ROUND_ENV"]
