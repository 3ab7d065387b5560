"""Where a run's outputs may go: never on, inside or around something else the run uses (issue 33).

Checked before any data is read (``JobKind.check_outputs``): the run folder ``--out`` apart from the
inputs (data files or folders, schemas, domains, link tables: everything under the config's ``data``);
each published copy (``output.answers`` / ``output.zarr``) apart from the inputs, the run folder, its
lock file and the other copy. Locations are compared resolved (symlinks too); a glob by the folder above
its first wildcard; URLs by protocol and path.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privcube.core.errors import RunDirectoryError
from privcube.storage.outputs import lock_path, publish_targets


def _location(p: str | os.PathLike[str]) -> tuple[str, str]:
    """``(protocol, normalised path)`` to compare locations: local paths resolved (symlinks too), a glob
    by the folder above its first wildcard, URLs by protocol and path."""
    text = os.fspath(p)
    if "://" in text and not text.startswith("file://"):
        proto, _, rest = text.partition("://")
        return proto.lower(), "/" + rest.strip("/")
    text = text[len("file://"):] if text.startswith("file://") else text
    parts = Path(os.path.expanduser(text)).parts
    for i, part in enumerate(parts):
        if any(ch in part for ch in "*?["):
            parts = parts[:i]
            break
    return "file", os.path.realpath(os.path.join(*parts) if parts else ".")


def _relation(a: tuple[str, str], b: tuple[str, str]) -> str | None:
    """How location ``a`` lies to ``b``: ``same``, ``inside`` (a under b), ``contains`` (b under a) or None."""
    if a[0] != b[0]:
        return None
    if a[1] == b[1]:
        return "same"
    if a[1].startswith(b[1].rstrip("/") + "/"):
        return "inside"
    if b[1].startswith(a[1].rstrip("/") + "/"):
        return "contains"
    return None



def input_locations(resolved: Mapping[str, Any]) -> list[str]:
    """The data, schema, domain and link files or folders a resolved config reads (its ``data`` section,
    any depth, and a top-level ``domain`` path): no output may be, contain or lie inside one of them."""
    from privcube.storage.formats.frame import FRAME_PLACEHOLDER

    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if k in ("path", "schema", "domain", "paths"):
                    for item in (v if isinstance(v, (list, tuple)) else [v]):
                        if isinstance(item, (str, os.PathLike)) and str(item) and str(item) != FRAME_PLACEHOLDER:
                            found.append(os.fspath(item))
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    walk(resolved.get("data"))
    if isinstance(resolved.get("domain"), str):
        found.append(resolved["domain"])
    return list(dict.fromkeys(found))


_RELATION_WORDS = {"same": "is", "inside": "is inside", "contains": "contains"}
_INPUT_WORDS = {"same": "is the input", "inside": "is inside the input folder", "contains": "contains the input"}


def check_placement(run_dir: str | Path, output: Mapping[str, Any], inputs: Sequence[str]) -> None:
    """Refuse, before any data is read, outputs that would land on something else the run uses: the run
    folder inside, around or on an input (data, schema, links); an ``output.answers`` / ``output.zarr``
    copy on, inside or around the run folder (or its lock file), an input, or the other copy."""
    out = os.fspath(run_dir)
    here = _location(out)
    for i in inputs:
        rel = _relation(here, _location(i))
        if rel:
            raise RunDirectoryError(
                f"output directory {out!r} {_INPUT_WORDS[rel]} {i!r}; the run must go to a folder of its own, "
                "apart from the data and schema files")
    seen: dict[str, tuple[str, tuple[str, str]]] = {}
    lock = lock_path(out)
    for key, target in publish_targets(output).items():
        loc = _location(target)
        for i in inputs:
            rel = _relation(loc, _location(i))
            if rel:
                raise RunDirectoryError(
                    f"output.{key} {target!r} {_INPUT_WORDS[rel]} {i!r}; a published copy goes to a folder of its "
                    "own, apart from the data and schema files")
        rel = _relation(loc, here)
        if rel == "same":
            raise RunDirectoryError(f"output.{key} {target!r} is the run folder --out itself; a published copy "
                                    "goes to a folder of its own, outside the run folder")
        if rel:
            raise RunDirectoryError(f"output.{key} {target!r} {_RELATION_WORDS[rel]} the run folder --out {out!r}; "
                                    "a published copy goes to a folder of its own, outside the run folder")
        if _relation(loc, _location(lock)) in ("same", "inside"):
            raise RunDirectoryError(f"output.{key} {target!r} is the run's lock file {str(lock)!r}; choose another "
                                    "location")
        for other_key, (other, other_loc) in seen.items():
            if _relation(loc, other_loc):
                raise RunDirectoryError(f"output.{key} {target!r} and output.{other_key} {other!r} overlap (the same "
                                        "folder or one inside the other); give each copy a folder of its own")
        seen[key] = (target, loc)


__all__ = ["check_placement", "input_locations"]
