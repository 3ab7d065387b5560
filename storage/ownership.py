"""What privcube wrote, and how it tells that from anything else (issue 33: a run deletes or replaces only
files it wrote).

A run folder records ``.started`` (the run's identity) when it is made and ``.complete`` (the identity and
every file and folder the run wrote) when it is finished; an answers folder and every published copy carry
a manifest of their files (``.privcube-files.json``, or for a zarr store its root group's attribute
``privcube_files``, since a file zarr does not know warns every reader). A folder counts as privcube's only
if everything in it is listed; a run folder written before these records is judged by its layout
(:func:`legacy_entry`, :func:`legacy_run`). Names only: no file's contents are read but privcube's own
records, and messages name files (never values from the data).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from privcube.core.atomic import atomic_write_bytes

COMPLETE_MARKER = ".complete"
STARTED_MARKER = ".started"
COPY_MANIFEST = ".privcube-files.json"  # in an answers folder and each published copy: what privcube wrote there
ZARR_MANIFEST_ATTR = "privcube_files"  # a zarr copy's manifest: an attribute of its root group (zarr.json)
#: the top-level entries of a run folder (anything else in it was not written by privcube)
RUN_ENTRIES = frozenset({STARTED_MARKER, COMPLETE_MARKER, "ledger.json", "config.yaml", "report.json",
                         "report.html", "answers", "synthetic", "store.zarr", "checkpoint"})
#: in a finished run folder besides what ``.complete`` lists (``report.html``: written by ``privcube report``)
AFTER_COMPLETE = frozenset({COMPLETE_MARKER, STARTED_MARKER, "report.html"})
_ANSWER_FILE = re.compile(r"group-\d{4}-[^/]*\.parquet")


UNREADABLE = object()  # read_json: a file that is there but is not JSON


def read_json(path: Path) -> Any:
    """The JSON in ``path``; None if there is no such file, ``UNREADABLE`` if it cannot be parsed."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return UNREADABLE


def tree_entries(root: str | Path) -> tuple[list[str], list[str]]:
    """``(files, folders)`` under ``root`` as sorted ``/``-separated relative paths; a symlink is a file
    (never followed)."""
    files: list[str] = []
    dirs: list[str] = []
    for cur, dnames, fnames in os.walk(root):
        rel = os.path.relpath(cur, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        for d in list(dnames):
            if os.path.islink(os.path.join(cur, d)):
                files.append(prefix + d)
                dnames.remove(d)
            else:
                dirs.append(prefix + d)
        files.extend(prefix + f for f in fnames)
    return sorted(files), sorted(dirs)


def _parents(files: Iterable[str]) -> set[str]:
    """Every folder above the given relative file paths."""
    return {f.rsplit("/", i)[0] for f in files for i in range(1, f.count("/") + 1)}


def listing(files: Sequence[str], dirs: Sequence[str]) -> dict[str, list[str]]:
    """A manifest's ``files`` and ``dirs`` (only the folders no listed file is inside: the rest follow)."""
    above = _parents(files)
    return {"files": list(files), "dirs": [d for d in dirs if d not in above]}


def unlisted(files: Iterable[str], dirs: Iterable[str], listed_files: set[str], listed_dirs: set[str]) -> list[str]:
    """Entries not in a manifest (a folder counts as listed when a listed file is inside it)."""
    listed = listed_dirs | _parents(listed_files)
    return [f for f in files if f not in listed_files] + [d + "/" for d in dirs if d not in listed]


def legacy_entry(rel: str, is_dir: bool) -> bool:
    """Whether ``rel`` fits the layout of a run folder written before ``.complete`` listed its files."""
    top, _, rest = rel.partition("/")
    if top not in RUN_ENTRIES:
        return False
    if not rest:
        return is_dir == (top in ("answers", "synthetic", "store.zarr", "checkpoint"))
    if top == "answers":
        return not is_dir and (rest in ("index.json", COPY_MANIFEST) or bool(_ANSWER_FILE.fullmatch(rest)))
    if top == "synthetic":
        return is_dir or rest.endswith(".parquet")
    return top in ("store.zarr", "checkpoint")


def legacy_run(path: Path) -> bool:
    """A run folder written before ``.started`` existed: a committed checkpoint, or privcube's resolved config."""
    if (path / "store.zarr" / "checkpoint" / "CURRENT").is_file() or (path / "checkpoint" / "CURRENT").is_file():
        return True
    try:
        cfg = yaml.safe_load((path / "config.yaml").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(cfg, Mapping) and "resolved" in cfg


def some(entries: Sequence[str]) -> str:
    """``3 entries ('a.txt', 'b', ...)``: how many, and the first few names (file names, never contents)."""
    shown = ", ".join(repr(e) for e in list(entries)[:3]) + (", ..." if len(entries) > 3 else "")
    return f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'} ({shown})"


def write_manifest(folder: Path, kind: str) -> None:
    """Record every file and folder in ``folder``, so that privcube can later tell a folder it wrote (and
    may replace) from one holding other files: ``<folder>/.privcube-files.json``, or for a zarr store the
    attribute ``privcube_files`` of its root group (a file zarr does not know would warn every reader)."""
    files, dirs = tree_entries(folder)
    record = {"written_by": "privcube", "kind": kind, **listing([f for f in files if f != COPY_MANIFEST], dirs)}
    root = folder / "zarr.json"
    if kind == "zarr" and root.is_file():
        meta = json.loads(root.read_bytes())
        meta.setdefault("attributes", {})[ZARR_MANIFEST_ATTR] = record
        atomic_write_bytes(root, json.dumps(meta, indent=2).encode())
        return
    atomic_write_bytes(folder / COPY_MANIFEST, (json.dumps(record, indent=2) + "\n").encode())


def manifest_of(fs: Any, path: str) -> Mapping[str, Any] | None:
    """The manifest of a destination folder (see :func:`write_manifest`), or None if it carries none."""
    base = path.rstrip("/")
    for name, pick in ((COPY_MANIFEST, lambda m: m),
                       ("zarr.json", lambda m: (m.get("attributes") or {}).get(ZARR_MANIFEST_ATTR))):
        try:
            record = pick(json.loads(fs.cat_file(f"{base}/{name}")))
        except (OSError, ValueError, AttributeError):  # absent, a folder, not JSON: no manifest there
            continue
        if isinstance(record, Mapping) and record.get("written_by") == "privcube" and isinstance(
                record.get("files"), list):
            return record
    return None


def copy_tree_of(fs: Any, path: str) -> tuple[list[str], list[str]]:
    """``(files, folders)`` under ``path`` on ``fs`` as ``/``-separated relative paths."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        return tree_entries(path)
    root = path.rstrip("/")
    files, dirs = [], []
    for name, info in fs.find(root, withdirs=True, detail=True).items():
        rel = name.rstrip("/")[len(root):].lstrip("/")
        if rel:
            (dirs if info.get("type") == "directory" else files).append(rel)
    return sorted(files), sorted(dirs)


def unowned_copy(fs: Any, path: str) -> tuple[list[str], bool]:
    """``(entries privcube did not write, empty)`` of an existing destination folder: everything, without
    its ``.privcube-files.json``; else what that manifest does not list."""
    files, dirs = copy_tree_of(fs, path)
    if not files and not dirs:
        return [], True
    manifest = manifest_of(fs, path)
    if manifest is None:
        return files + [d + "/" for d in dirs], False
    return unlisted(files, dirs, set(manifest["files"]) | {COPY_MANIFEST}, set(manifest.get("dirs") or [])), False


def run_folder_unowned(path: Path) -> list[str]:
    """Entries of a finished run folder privcube did not write: not listed in ``.complete`` (nor written
    after it, like ``report.html``); for a run folder from before the list: names outside its layout."""
    listed = read_json(path / COMPLETE_MARKER)
    files, dirs = tree_entries(path)
    if isinstance(listed, Mapping) and isinstance(listed.get("files"), list):
        return unlisted(files, dirs, set(listed["files"]) | AFTER_COMPLETE, set(listed.get("dirs") or []))
    return [f for f in files if not legacy_entry(f, False)] + [d + "/" for d in dirs if not legacy_entry(d, True)]


def complete_record(path: Path, identity: Any) -> dict[str, Any]:
    """``.complete`` of run folder ``path``: the run's identity and every file and folder in it now."""
    files, dirs = tree_entries(path)
    return {"complete": True, "identity": identity,
            **listing([f for f in files if f not in (COMPLETE_MARKER, STARTED_MARKER)], dirs)}


__all__ = ["AFTER_COMPLETE", "COMPLETE_MARKER", "COPY_MANIFEST", "RUN_ENTRIES", "STARTED_MARKER", "UNREADABLE",
           "ZARR_MANIFEST_ATTR", "complete_record", "copy_tree_of", "legacy_entry", "legacy_run", "listing",
           "manifest_of", "read_json", "run_folder_unowned", "some", "tree_entries", "unlisted", "unowned_copy",
           "write_manifest"]
