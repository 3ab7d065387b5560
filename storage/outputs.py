"""The run directory: owner-only, written atomically, refusing to overwrite a finished run.

Layout (the contract users and checks rely on)::

    DIR/ledger.json     budget, spent, charges
    DIR/config.yaml     the resolved config
    DIR/answers/        index.json + one Parquet file per workload query group
    DIR/synthetic/      one Parquet file per synthetic table (mechanisms that make records)
    DIR/store.zarr      tensors and checkpoints
    DIR/report.json     timings, sizes, expected errors
    DIR/.complete       written last: marks a finished run

The config's ``output.answers`` / ``output.zarr`` (local paths or fsspec URLs) receive copies of
``answers/`` and of ``store.zarr`` (without its checkpoints) once everything else is written and
before the run is marked complete (``publish_outputs``); a destination that already holds something
is refused before any data is read, unless the run replaces (``--overwrite``) or resumes its own.

Everything in DIR is owner-only (folders 0o700, files 0o600): ``owner_only()`` sets the umask to
0o077 while a run writes (zarr and Parquet writers create files with the process umask), and
``RunDirectory.restrict_permissions`` tightens anything left over before the run is marked complete.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from privcube.atomic import atomic_path, atomic_write_bytes
from privcube.errors import RunDirectoryError

COMPLETE_MARKER = ".complete"
OWNER_ONLY_UMASK = 0o077


@contextlib.contextmanager
def owner_only() -> Iterator[None]:
    """Set the process umask to 0o077 for the duration (files 0o600, folders 0o700), then restore it."""
    old = os.umask(OWNER_ONLY_UMASK)
    try:
        yield
    finally:
        os.umask(old)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=_json_default) + "\n").encode())


def atomic_write_parquet(path: Path, frame: pd.DataFrame) -> None:
    """Write a pandas frame as Parquet atomically."""
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)


class RunDirectory:
    """One run's output folder."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._created = False

    # lifecycle --------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return (self.path / COMPLETE_MARKER).exists()

    @property
    def started(self) -> bool:
        return self.path.exists() and any(self.path.iterdir())

    def check_usable(self, resume: bool) -> None:
        """Refuse a finished run, a started run without ``resume``, or a file in the way."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryError(f"output {str(self.path)!r} exists and is not a directory")
        if self.finished:
            raise RunDirectoryError(
                f"output directory {str(self.path)!r} holds a finished run; choose a new --out, or pass "
                "--overwrite to replace it"
            )
        if self.started and not resume:
            raise RunDirectoryError(
                f"output directory {str(self.path)!r} is not empty (an interrupted run?); "
                "pass --resume to continue it or choose a new --out"
            )
        if resume and not self.started:
            raise RunDirectoryError(f"--resume: {str(self.path)!r} holds no run to resume (nothing was measured "
                                    "there); run without --resume")

    def create(self) -> None:
        """Create the folder with owner-only permissions."""
        if not self.path.exists():
            try:
                self.path.mkdir(parents=True, mode=0o700)
            except OSError as e:
                raise RunDirectoryError(f"cannot create output directory {str(self.path)!r}: {e}") from None
            self._created = True
        try:
            os.chmod(self.path, 0o700)
        except OSError as e:
            raise RunDirectoryError(f"cannot secure output directory {str(self.path)!r}: {e.strerror or e}") from None
        if not os.access(self.path, os.W_OK):
            raise RunDirectoryError(f"output directory {str(self.path)!r} is not writable")

    def discard_if_created(self) -> None:
        """Remove the folder if this run created it (bad input: write nothing partial)."""
        if self._created and self.path.exists():
            shutil.rmtree(self.path, ignore_errors=True)

    def discard_if_empty(self) -> None:
        """Remove the folder if this run created it and no file was written into it (a failed run that
        committed nothing: no checkpoint to resume from, nothing to keep)."""
        if self._created and self.path.is_dir() and not any(p.is_file() for p in self.path.rglob("*")):
            shutil.rmtree(self.path, ignore_errors=True)

    def restrict_permissions(self) -> None:
        """chmod every folder in the run directory to 0o700 and every file to 0o600 (symlinks untouched)."""
        if not self.path.is_dir():
            return
        os.chmod(self.path, 0o700)
        for root, dirs, files in os.walk(self.path):
            for d in dirs:
                p = os.path.join(root, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
            for f in files:
                p = os.path.join(root, f)
                if not os.path.islink(p):
                    os.chmod(p, 0o600)

    def mark_complete(self) -> None:
        atomic_write_json(self.path / COMPLETE_MARKER, {"complete": True})

    @property
    def store_path(self) -> Path:
        return self.path / "store.zarr"

    # writers ----------------------------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> Path:
        p = self.path / name
        atomic_write_json(p, obj)
        return p

    def write_config(self, resolved: Mapping[str, Any]) -> Path:
        p = self.path / "config.yaml"
        atomic_write_bytes(p, yaml.safe_dump(_plain(resolved), sort_keys=False).encode())
        return p

    def write_answers(self, answers: Iterable[Any], domain: Any, schema: Any = None,
                      labels: bool = True, keep_existing: bool = False) -> Path:
        """Write each GroupAnswer as Parquet plus ``answers/index.json``.

        ``keep_existing`` (resume): a group file already present was written atomically by the
        interrupted attempt, with the same noise, so it is complete and is not written again."""
        folder = self.path / "answers"
        folder.mkdir(exist_ok=True, mode=0o700)
        index = []
        for i, ans in enumerate(answers):
            g = ans.group
            fname = f"{answer_file_stem(i, g)}.parquet"
            if keep_existing and (folder / fname).exists():
                rows = pq.ParquetFile(folder / fname).metadata.num_rows
            else:
                frame = answer_frame(ans, domain, schema if labels else None)
                atomic_write_parquet(folder / fname, frame)
                rows = len(frame)
            index.append({
                "attributes": list(g.attributes),
                "queries": g.query_types(),
                "weight": g.weight,
                "marginal": bool(g.is_marginal),
                "file": fname,
                "rows": int(rows),
            })
        atomic_write_json(folder / "index.json", {"groups": index})
        return folder

    def write_synthetic(self, tables: Mapping[str, pd.DataFrame]) -> Path:
        folder = self.path / "synthetic"
        folder.mkdir(exist_ok=True, mode=0o700)
        for name, frame in tables.items():
            atomic_write_parquet(folder / f"{_safe(name)}.parquet", frame)
        return folder


# ------------------------------------------------------------------------------- published copies
PUBLISH_KEYS = ("answers", "zarr")  # output.<key> -> the run directory's folder it copies
_PUBLISHED_FROM = {"answers": "answers", "zarr": "store.zarr"}
_NOT_PUBLISHED = ("checkpoint",)  # store.zarr/checkpoint: resume state, stays in the run directory


def publish_targets(output: Mapping[str, Any]) -> dict[str, str]:
    """``output.answers`` / ``output.zarr`` destinations given in the config (local paths or fsspec URLs)."""
    targets = {}
    for key in PUBLISH_KEYS:
        value = output.get(key)
        if value is None:
            continue
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            raise RunDirectoryError(f"output.{key} must be a path or URL, got {value!r}")
        targets[key] = os.fspath(value)
    return targets


def _fs(target: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(target)


def check_publish_targets(output: Mapping[str, Any], *, replace: bool) -> None:
    """Refuse (before any data is read) a destination that already holds something, unless ``replace``."""
    for key, target in publish_targets(output).items():
        try:
            fs, path = _fs(target)
            taken = fs.exists(path) and (not fs.isdir(path) or bool(fs.ls(path)))
        except (OSError, ValueError, ImportError) as e:
            raise RunDirectoryError(f"output.{key} {target!r} cannot be checked: {e}") from None
        if taken and not replace:
            raise RunDirectoryError(f"output.{key} {target!r} already exists; choose another location "
                                    "(or pass --overwrite)")


def publish_outputs(run_dir: Path, output: Mapping[str, Any]) -> dict[str, str]:
    """Copy a run's noisy answers (``answers/``) and tensor store (``store.zarr`` without its checkpoints)
    to ``output.answers`` / ``output.zarr``; returns {key: destination}.

    Local destinations are assembled beside the target and renamed into place (a reader sees the old
    copy or the new one); fsspec URLs (``s3://``, ``gs://``, ...) are uploaded after removing what was
    there. Exact counts are never in the run directory, so they are never in a published copy.
    """
    done = {}
    for key, target in publish_targets(output).items():
        try:
            _publish_one(run_dir / _PUBLISHED_FROM[key], target)
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types
            reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise RunDirectoryError(f"cannot publish output.{key} to {target!r}: {reason}; the run is not marked "
                                    "complete (fix the cause, then rerun with --resume)") from None
        done[key] = target
    return done


def _publish_one(source: Path, target: str) -> None:
    """Copy one folder of the run directory to a local path or an fsspec URL (nothing if it is absent)."""
    import tempfile

    from fsspec.implementations.local import LocalFileSystem

    if not source.exists():
        return
    fs, path = _fs(target)
    if isinstance(fs, LocalFileSystem):
        _publish_local(source, Path(path))
        return
    staging = Path(tempfile.mkdtemp(prefix="privcube-publish-"))  # 0o700
    try:
        _copy_tree(source, staging / "copy")
        if fs.exists(path):
            fs.rm(path, recursive=True)
        fs.put(str(staging / "copy"), path, recursive=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copy_tree(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, ignore=lambda d, names: [n for n in names if n in _NOT_PUBLISHED
                                                             and Path(d) == source])


def _publish_local(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.publish-{os.getpid()}")
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    shutil.rmtree(staged, ignore_errors=True)
    try:
        _copy_tree(source, staged)
        if target.exists():
            os.replace(target, old)
        os.replace(staged, target)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def answer_frame(ans: Any, domain: Any, schema: Any = None) -> pd.DataFrame:
    """Tidy table of one group's answers: attribute codes and labels (marginals) or ``query`` number and
    ``description`` (other groups), ``estimate``, ``variance`` and, when post-processing ran, ``published``."""
    g = ans.group
    est = np.asarray(ans.estimate, dtype=float).ravel()
    cols: dict[str, Any] = {}
    if g.is_marginal:
        shape = domain.shape_of(g.attributes)
        if int(np.prod(shape)) != est.size:
            raise ValueError(f"group {g.label()}: {est.size} estimates for {int(np.prod(shape))} cells")
        grids = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), dtype=int)
        for a, codes in zip(g.attributes, grids):
            cols[a] = codes.astype(np.int64)
    else:
        cols["query"] = np.arange(est.size, dtype=np.int64)
    cols["estimate"] = est
    if ans.variance is not None:
        var = np.broadcast_to(np.asarray(ans.variance, dtype=float).ravel(), est.shape)
        cols["variance"] = np.array(var)
    published = getattr(ans, "published", None)
    if published is not None:  # non-negative, consistent estimate (post-processing, marginal groups)
        cols["published"] = np.asarray(published).ravel()
    values = _value_labels(g.attributes, schema)
    if not g.is_marginal and est.size <= MAX_DESCRIBED_ROWS:
        cols = {"query": cols["query"], "description": g.row_descriptions(domain, values),
                **{k: v for k, v in cols.items() if k != "query"}}
    frame = pd.DataFrame(cols)
    if g.is_marginal:
        for a, labels in values.items():
            frame[f"{a}_label"] = np.asarray(labels, dtype=object)[frame[a].to_numpy()]
    return frame


#: groups with more queries than this get no per-row ``description`` column (strings cost memory)
MAX_DESCRIBED_ROWS = 1_000_000


def _value_labels(attributes: Iterable[str], schema: Any) -> dict[str, list[str]]:
    """Code labels (categories, bin ranges) of the attributes a rich schema labels; {} without one."""
    out: dict[str, list[str]] = {}
    if schema is None or not hasattr(schema, "labels"):
        return out
    for a in attributes:
        try:
            labels = schema.labels(a)
        except Exception:  # noqa: BLE001 - labels are a convenience
            continue
        if labels is not None and getattr(schema.attribute(a), "kind", "integer") != "integer":
            out[a] = list(labels)
    return out


def answer_file_stem(i: int, group: Any) -> str:
    """``group-NNNN-<label>``: the name of query group ``i``'s answers (Parquet file, zarr arrays)."""
    return f"group-{i:04d}-{_safe(group.label())}"


def _safe(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in s)[:80]


def _plain(o: Any) -> Any:
    if isinstance(o, Mapping):
        return {str(k): _plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")
