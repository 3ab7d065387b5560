"""Checkpoints of a relational run (stage 1 tables, stage 2 link iterations), kept by ``storage.checkpoint``.

``RelationalCheckpoint(folder, identity)`` is the object ``run_relational`` saves to and resumes from:
``save(round, {"meta", "arrays"})`` after every stage step, ``load()`` -> ``(round, {"meta", "arrays"})``,
``check_identity()`` and ``exists()``. It adapts the run's one checkpoint mechanism
(:class:`~privcube.storage.checkpoint.RunCheckpoint`: atomic commit, checksums, identity check) with the
checkpoint folder as a zarr group of its own (a relational run writes no tensor store): every ``save`` is
a new base, arrays whose content did not change are not written again. The meta is stored as JSON,
values JSON cannot hold written as text (as the relational job always stored them). Everything stored
is differentially private (synthetic tables, synthetic links, Gaussian releases) or public (the ledger's
charges).
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class RelationalCheckpoint:
    """``save(round, {"meta", "arrays"})`` after every stage step, ``load()`` to resume."""

    def __init__(self, path: str | os.PathLike[str], identity: Mapping[str, Any]) -> None:
        """Checkpoints in folder ``path`` that must carry ``identity`` (mechanism, seed, config hash)."""
        from privcube.storage.checkpoint import RunCheckpoint

        folder = Path(path)
        self.dir = folder
        self.run_checkpoint = RunCheckpoint(folder.parent, identity, folder=folder.name, enclosing_store=False)
        self.identity = self.run_checkpoint.identity

    def exists(self) -> bool:
        """Whether a committed checkpoint exists."""
        return self.run_checkpoint.exists()

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint after checking pointer, format and identity; None if none."""
        return self.run_checkpoint.check_identity()

    def save(self, round: int, state: Mapping[str, Any]) -> None:
        """Commit ``state`` = {"meta": JSON mapping, "arrays": {name: ndarray}} as round ``round``."""
        meta = json.loads(json.dumps(state.get("meta", {}), allow_nan=True, default=str))
        self.run_checkpoint.save(int(round), {"meta": meta, "arrays": dict(state.get("arrays", {}))})

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """(round, {"meta", "arrays"}) of the committed checkpoint, None if none; CheckpointError if corrupt."""
        loaded = self.run_checkpoint.load()
        if loaded is None:
            return None
        round_, state = loaded
        return round_, {"meta": state["meta"], "arrays": state["arrays"]}


__all__ = ["RelationalCheckpoint"]
