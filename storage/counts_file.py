"""The file ``privcube marginals --out F`` writes: exact counts as Parquet, marked as privcube's (issue 33:
nothing of the user's lost).

The Parquet footer carries the key ``privcube`` (``{"written_by": "privcube", "kind": "exact-marginals"}``),
so a later ``privcube marginals --out F`` can tell its own earlier output (replaced) from any other file
(refused unless ``--force``). Only the footer's key-value metadata is read, never a value of the file's data,
and messages name the file only. The file is written under a temporary name beside ``F`` and renamed.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privcube.core.errors import ConfigError

MARK_KEY = b"privcube"
MARK = {"written_by": "privcube", "kind": "exact-marginals"}


def written_by_privcube(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Parquet file ``privcube marginals`` wrote (its footer carries privcube's mark)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
        mark = json.loads(meta.get(MARK_KEY, b"null"))
    except Exception:  # noqa: BLE001 - not Parquet, unreadable, not JSON: not a file privcube marked
        return False
    return isinstance(mark, dict) and mark.get("written_by") == "privcube" and mark.get("kind") == MARK["kind"]


def check_counts_out(out: str | os.PathLike[str], inputs: Sequence[str], *, force: bool) -> Path:
    """Refuse, before any data is read, an ``--out`` that is a folder, lies in a missing folder, is (or lies
    inside) an input (``--force`` or not), or is an existing file privcube did not write (unless ``force``)."""
    from privcube.storage.placement import _location, _relation

    path = Path(out)
    shown = str(path)
    for i in inputs:
        rel = _relation(_location(path), _location(i))
        if rel in ("same", "inside"):
            what = "is the input" if rel == "same" else "is inside the input folder"
            raise ConfigError(f"marginals --out {shown!r} {what} {i!r}; write the counts elsewhere")
    if path.is_dir():
        raise ConfigError(f"marginals --out {shown!r} is a folder; give a file name such as "
                          f"{str(path / 'marginals.parquet')!r}")
    if not path.parent.is_dir():
        raise ConfigError(f"marginals --out {shown!r}: folder {str(path.parent)!r} does not exist")
    if (path.exists() or path.is_symlink()) and not force and not written_by_privcube(path):
        raise ConfigError(f"marginals --out {shown!r} exists and was not written by privcube marginals; it is left as "
                          "it is: give another file name, or add --force to replace it")
    return path


def write_counts(path: Path, frame: Any) -> None:
    """Write the counts ``frame`` to ``path`` atomically (temporary name beside it, then a rename), with
    privcube's mark in the Parquet footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from privcube.core.atomic import atomic_path

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), MARK_KEY: json.dumps(MARK).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


__all__ = ["MARK", "check_counts_out", "write_counts", "written_by_privcube"]
