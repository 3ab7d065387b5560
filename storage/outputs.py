"""The run directory: owner-only, written atomically, refusing to overwrite a finished run, and never
deleting or replacing a file privcube did not write.

Layout (the contract users and checks rely on)::

    DIR/.started        written when the run creates (or claims an empty) DIR: the run's identity
                        (mechanism, seed, config fingerprint), which ``--resume`` compares before any data
                        is read, checkpoint or not; removed once the run is complete
    DIR/ledger.json     budget, spent, charges
    DIR/config.yaml     the resolved config
    DIR/answers/        index.json + one Parquet file per workload query group (+ ``.privcube-files.json``)
    DIR/synthetic/      one Parquet file per synthetic table (``synthesize:`` and relational jobs only)
    DIR/store.zarr      tensors and checkpoints
    DIR/report.json     timings, sizes, expected errors
    DIR/.complete       written last: marks a finished run and lists every file and folder the run wrote

What privcube wrote, it records (:mod:`privcube.storage.ownership`): ``.started`` / ``.complete`` in a run
folder, ``.privcube-files.json`` in an answers folder and each published copy. ``--overwrite`` replaces a
finished run only when DIR holds nothing but what ``.complete`` lists (and ``report.html``), a published
copy only when its folder holds nothing but what its manifest lists; anything else is refused in one line,
before any data is read, ``--overwrite`` or not. A run folder holding files privcube did not write is
refused (by ``--resume`` too: it is not a run); an empty folder may be used, and what the run wrote into
it is removed again on bad input.

The config's ``output.answers`` / ``output.zarr`` (local paths or fsspec URLs) receive copies of
``answers/`` and of ``store.zarr`` (without its checkpoints) once everything else is written and
before the run is marked complete (``publish_outputs``). Before any data is read, a copy that would land on,
inside or around the run folder, the inputs or the other copy is refused (:mod:`privcube.storage.placement`),
and a destination that already holds a copy privcube published is refused unless the run replaces
(``--overwrite``) or resumes its own.

A run owns DIR while it runs: ``run_lock`` holds an exclusive ``flock`` on ``.DIR.lock`` beside it
(beside, so that it exists before DIR does and survives ``--overwrite`` moving DIR aside), taken before
any data is read; a second run on DIR is refused, naming it. A file of that name privcube did not
write (anything but a process id) is refused, not truncated. ``--out`` the file-system root or the home
folder is refused.

Everything in DIR is owner-only (folders 0o700, files 0o600): ``owner_only()`` sets the umask to
0o077 while a run writes (zarr and Parquet writers create files with the process umask), and
``RunDirectory.restrict_permissions`` tightens anything left over before the run is marked complete.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from privcube.core.atomic import atomic_path, atomic_write_bytes
from privcube.core.errors import RunDirectoryError
from privcube.storage.ownership import (
    COMPLETE_MARKER,
    RUN_ENTRIES,
    STARTED_MARKER,
    UNREADABLE,
    complete_record,
    legacy_run,
    read_json,
    run_folder_unowned,
    some,
    unowned_copy,
    write_manifest,
)

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


def write_parquet_files(frames: Sequence[tuple[Path, pd.DataFrame]], threads: int = 8) -> None:
    """``atomic_write_parquet`` of each ``(path, frame)``, on ``threads`` threads (hundreds of small files
    are bound by file-system round trips, which release the GIL); the first failure is raised once every
    write has ended (each file is atomic: complete or absent)."""
    if len(frames) <= 1:
        for path, frame in frames:
            atomic_write_parquet(path, frame)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(frames))) as pool:
        futures = [pool.submit(atomic_write_parquet, path, frame) for path, frame in frames]
    for f in futures:
        f.result()


class RunDirectory:
    """One run's output folder; ``identity`` (mechanism, seed, config fingerprint) is recorded in ``.started``."""

    def __init__(self, path: str | Path, identity: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.identity = None if identity is None else json.loads(json.dumps(dict(identity), default=str))
        self._created = False  # this run made the folder
        self._claimed = False  # the folder existed, empty, when this run took it: all in it is this run's

    # lifecycle --------------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return (self.path / COMPLETE_MARKER).exists()

    @property
    def started(self) -> bool:
        return self.path.exists() and any(self.path.iterdir())

    def state(self) -> str:
        """``absent``, ``not-a-folder``, ``empty``, ``finished``, ``run`` (a privcube run not finished) or
        ``foreign`` (files privcube did not write)."""
        p = self.path
        if not os.path.lexists(p):
            return "absent"
        if not p.is_dir():
            return "not-a-folder"
        names = [e.name for e in p.iterdir()]
        if not names:
            return "empty"
        if COMPLETE_MARKER in names:
            return "finished"
        if (p / STARTED_MARKER).is_file() or (set(names) <= RUN_ENTRIES and legacy_run(p)):
            return "run"
        return "foreign"

    def check_usable(self, resume: bool) -> None:
        """Refuse a finished run, a started run without ``resume``, a folder of files privcube did not
        write (with or without ``resume``), or a file in the way."""
        where = str(self.path)
        state = self.state()
        if state == "not-a-folder":
            raise RunDirectoryError(f"output {where!r} exists and is not a directory")
        if state == "finished":
            unowned = self.unowned()
            raise RunDirectoryError(
                f"output directory {where!r} holds a finished run; choose a new --out, or pass --overwrite to "
                "replace it" if not unowned else
                f"output directory {where!r} holds a finished run and {some(unowned)} privcube did not write "
                "(so --overwrite is refused too); choose a new --out")
        if state == "foreign":
            entries = sorted(e.name for e in self.path.iterdir())
            if resume:
                raise RunDirectoryError(
                    f"--resume: {where!r} is not a privcube run folder (it holds {some(entries)} privcube did "
                    "not write); nothing was changed: give the --out of the interrupted run")
            raise RunDirectoryError(
                f"output directory {where!r} holds {some(entries)} privcube did not write; a run is written to a "
                "new or empty folder: choose another --out")
        if state == "run" and not resume:
            raise RunDirectoryError(
                f"output directory {where!r} is not empty (an interrupted run?); "
                "pass --resume to continue it or choose a new --out")
        if resume and state in ("absent", "empty"):
            raise RunDirectoryError(f"--resume: {where!r} holds no run to resume (nothing was measured "
                                    "there); run without --resume")

    def unowned(self) -> list[str]:
        """Entries of a finished run folder privcube did not write (see ``ownership.run_folder_unowned``)."""
        return run_folder_unowned(self.path)

    def check_replaceable(self) -> None:
        """``--overwrite``: refuse, before anything is moved, a finished run folder holding other files."""
        unowned = self.unowned()
        if unowned:
            raise RunDirectoryError(
                f"--overwrite: output directory {str(self.path)!r} holds {some(unowned)} privcube did not write "
                "beside the finished run; privcube replaces only a run folder holding nothing else: move them "
                "out or choose a new --out")

    @contextlib.contextmanager
    def replacing(self) -> Iterator[None]:
        """``--overwrite`` of a finished run: move it aside (``.DIR.replaced-<ns>`` beside it), run, delete it
        once the new run is complete; if the new run fails, remove what it wrote and restore the old run."""
        backup = self.path.with_name(f".{self.path.name}.replaced-{time.time_ns()}")
        try:
            os.replace(self.path, backup)
        except OSError as e:
            raise RunDirectoryError(f"--overwrite: cannot move the finished run {str(self.path)!r} aside: "
                                    f"{e.strerror or e}") from None
        try:
            yield
        except BaseException:
            if os.path.lexists(self.path):
                shutil.rmtree(self.path, ignore_errors=True)  # the failed new run's folder (we hold the lock)
            os.replace(backup, self.path)
            raise
        shutil.rmtree(backup, ignore_errors=True)

    def recorded_identity(self) -> Any:
        """The identity ``.started`` records (None if there is none: a run folder from before the record)."""
        record = read_json(self.path / STARTED_MARKER)
        if record is UNREADABLE:
            raise RunDirectoryError(f"--resume: the run record {str(self.path / STARTED_MARKER)!r} is unreadable; "
                                    "choose a new --out")
        return record.get("identity") if isinstance(record, Mapping) else None

    def create(self) -> None:
        """Create the folder with owner-only permissions (or claim an empty one) and record ``.started``."""
        if not self.path.exists():
            try:
                self.path.mkdir(parents=True, mode=0o700)
            except OSError as e:
                raise RunDirectoryError(f"cannot create output directory {str(self.path)!r}: {e}") from None
            self._created = True
        elif not self._created and not self._claimed and self.path.is_dir() and not any(self.path.iterdir()):
            self._claimed = True
        try:
            os.chmod(self.path, 0o700)
        except OSError as e:
            raise RunDirectoryError(f"cannot secure output directory {str(self.path)!r}: {e.strerror or e}") from None
        if not os.access(self.path, os.W_OK):
            raise RunDirectoryError(f"output directory {str(self.path)!r} is not writable")
        if not (self.path / STARTED_MARKER).exists() and not self.finished:
            with self.writing("run record"):
                atomic_write_json(self.path / STARTED_MARKER, {"privcube_run": "started", "identity": self.identity})

    def _remove_own(self) -> None:
        """Remove what this run wrote: the folder it created, or everything in the empty folder it claimed."""
        if self._created and self.path.is_dir():
            shutil.rmtree(self.path, ignore_errors=True)
        elif self._claimed and self.path.is_dir():
            for entry in self.path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def discard_if_created(self) -> None:
        """Remove what this run wrote (bad input: write nothing partial): the folder if it created it, or
        the contents of the empty folder it was given; a folder that held anything is never touched."""
        self._remove_own()

    def discard_if_empty(self) -> None:
        """Like ``discard_if_created`` when no file but ``.started`` was written (a failed run that committed
        nothing: no checkpoint to resume from, nothing to keep)."""
        if (self._created or self._claimed) and self.path.is_dir() and not any(
                p.is_file() and p != self.path / STARTED_MARKER for p in self.path.rglob("*")):
            self._remove_own()

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
        """Write ``.complete`` (the identity and every file and folder the run wrote), then drop ``.started``."""
        atomic_write_json(self.path / COMPLETE_MARKER, complete_record(self.path, self.identity))
        (self.path / STARTED_MARKER).unlink(missing_ok=True)

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[None]:
        """Turn a failed write (OSError) of ``what`` into one ``RunDirectoryError`` line (see :func:`write_error`)."""
        try:
            yield
        except OSError as e:
            raise RunDirectoryError(write_error(self.path, e, what)) from None

    def has(self, name: str) -> bool:
        """Whether ``<run>/<name>`` exists (a file an interrupted attempt already wrote, on resume)."""
        return (self.path / name).exists()

    def write_folder(self, name: str, fill: Callable[[Path], Any]) -> Any:
        """``fill(staging)`` writes a hidden folder beside ``<run>/<name>``, which is then renamed into place
        (replacing an older one): a folder that exists is complete. Returns what ``fill`` returns."""
        import uuid

        folder = self.path / name
        staging = folder.parent / f".{folder.name}-{uuid.uuid4().hex[:8]}"
        try:
            out = fill(staging)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return out

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
                      labels: bool = True, keep_existing: bool = False, ci_level: float = 0.95) -> Path:
        """Write each GroupAnswer as Parquet plus ``answers/index.json`` (with each group's interval level
        and method: ``exact`` or a conservative ``bound``, see ``privcube.privacy.intervals``).

        ``keep_existing`` (resume): a group file already present was written atomically by the
        interrupted attempt, with the same noise, so it is complete and is not written again."""
        from privcube.privacy.intervals import interval_method

        folder = self.path / "answers"
        folder.mkdir(exist_ok=True, mode=0o700)
        index, frames = [], []
        for i, ans in enumerate(answers):
            g = ans.group
            fname = f"{answer_file_stem(i, g)}.parquet"
            if keep_existing and (folder / fname).exists():
                rows = pq.ParquetFile(folder / fname).metadata.num_rows
            else:
                frame = answer_frame(ans, domain, schema if labels else None, ci_level=ci_level)
                frames.append((folder / fname, frame))
                rows = len(frame)
            index.append({
                "ci": {"level": ci_level, "method": interval_method(ans)},  # exact | bound | none
                "attributes": list(g.attributes),
                "queries": g.query_types(),
                "weight": g.weight,
                "marginal": bool(g.is_marginal),
                "file": fname,
                "rows": int(rows),
            })
        write_parquet_files(frames)
        atomic_write_json(folder / "index.json", {"groups": index})
        write_manifest(folder, "answers")  # a published copy carries it: privcube may replace that folder only
        return folder

    def write_synthetic(self, tables: Mapping[str, pd.DataFrame]) -> Path:
        """Each frame to ``synthetic/<name>.parquet`` atomically (a name ``a/b`` goes to a subfolder ``a``)."""
        folder = self.path / "synthetic"
        folder.mkdir(exist_ok=True, mode=0o700)
        for name, frame in tables.items():
            target = self.path / synthetic_file(name)
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write_parquet(target, frame)
        return folder


# ------------------------------------------------------------------------------- ownership
LOCK_SUFFIX = ".lock"
_HELD: dict[str, list[Any]] = {}  # lock path -> [owning thread id, depth, fd]: re-entrant within one thread
_HELD_GUARD = threading.Lock()


def lock_path(out: str | Path) -> Path:
    """The lock file of run folder ``out``: ``.<name>.lock`` beside it (symlinks resolved), so it survives
    ``--overwrite`` moving the folder aside and exists before the folder does."""
    real = Path(os.path.realpath(os.fspath(out)))
    if not real.name:
        raise RunDirectoryError(f"output directory {os.fspath(out)!r} is the file-system root; give a folder of "
                                "its own for the run (a new or empty one)")
    return real.with_name(f".{real.name}{LOCK_SUFFIX}")


def check_out_location(out: str | Path, *, resume: bool = False) -> None:
    """Refuse, in one line and before anything is locked or written, an ``--out`` that can never be a run
    folder: the file-system root, the home folder, a file, or a folder holding files privcube did not write
    (``RunDirectory.check_usable`` repeats the last check under the lock)."""
    real = Path(os.path.realpath(os.fspath(out)))
    lock_path(out)  # the root
    with contextlib.suppress(RuntimeError, KeyError):
        if real == Path(os.path.realpath(Path.home())):
            raise RunDirectoryError(f"output directory {os.fspath(out)!r} is your home folder; give a folder of "
                                    "its own for the run (a new or empty one)")
    parent = real.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not os.path.lexists(real) and not parent.is_dir():
        raise RunDirectoryError(f"cannot create output directory {os.fspath(out)!r}: {str(parent)!r} is a file, "
                                "not a folder")
    rundir = RunDirectory(out)
    try:
        state = rundir.state()
    except OSError as e:
        raise RunDirectoryError(f"output directory {os.fspath(out)!r} cannot be read: {e.strerror or e}") from None
    if state in ("not-a-folder", "foreign"):
        rundir.check_usable(resume=resume)


@contextlib.contextmanager
def run_lock(out: str | Path) -> Iterator[Path]:
    """Own run folder ``out`` for the duration: an exclusive OS lock (``flock``) on its lock file.

    A second run on the same folder (another process, or another thread of this one) is refused with a
    ``RunDirectoryError`` naming the folder; the same thread may take the lock again (re-entrant). The
    kernel drops the lock when the process dies (SIGKILL included), so a stale lock file never blocks a
    ``--resume``; a released lock file is removed (while still locked, so no waiter locks a dead inode).
    """
    if isinstance(out, bytes) or not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise RunDirectoryError(f"the output directory must be a non-empty folder path, got {type(out).__name__} "
                                f"{out!r}"[:200])
    path = lock_path(out)
    key = str(path)
    me = threading.get_ident()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None and held[0] == me:
            held[1] += 1
            reentrant = True
        elif held is not None:
            raise _in_use(out, os.getpid())
        else:
            reentrant = False
    if reentrant:
        try:
            yield path
        finally:
            with _HELD_GUARD:
                _HELD[key][1] -= 1
        return
    created = _make_parents(path.parent, out)
    try:
        fd = _acquire(path, out)
    except BaseException:
        _remove_empty(created)
        raise
    with _HELD_GUARD:
        _HELD[key] = [me, 1, fd]
    try:
        yield path
    finally:
        with _HELD_GUARD:
            del _HELD[key]
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
        _remove_empty(created)


def _in_use(out: str | Path, pid: int | None) -> RunDirectoryError:
    who = f" (process {pid})" if pid else ""
    return RunDirectoryError(f"output directory {str(out)!r} is in use by another privcube run{who}; wait for it "
                             "to finish or choose another --out")


def _acquire(path: Path, out: str | Path) -> int:
    """Open and flock the lock file; retry if a releasing run unlinked it between our open and lock."""
    import fcntl

    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0),
                         0o600)  # never through a symlink planted in a shared folder
        except OSError as e:
            raise RunDirectoryError(f"cannot lock output directory {str(out)!r}: cannot create {str(path)!r} "
                                    f"({e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise _in_use(out, pid) from None
        except OSError as e:
            os.close(fd)
            raise RunDirectoryError(f"cannot lock output directory {str(out)!r} ({e.strerror or e}): its file "
                                    "system does not support file locks") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same and not _lock_file_of_privcube(fd):
            os.close(fd)
            raise RunDirectoryError(f"cannot lock output directory {str(out)!r}: {str(path)!r} exists and was not "
                                    "written by privcube (a lock file holds a process id); move it away or choose "
                                    "another --out")
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)  # the lock file was replaced while we waited: lock the current one
    raise RunDirectoryError(f"cannot lock output directory {str(out)!r}: its lock file keeps changing")


def _lock_file_of_privcube(fd: int) -> bool:
    """A regular file that is empty or holds a process id: a lock file (a killed run leaves one behind)."""
    import stat as stat_

    try:
        if not stat_.S_ISREG(os.fstat(fd).st_mode):
            return False
        text = os.pread(fd, 64, 0)
    except OSError:
        return False
    return len(text) < 32 and (not text.strip() or text.strip().isdigit())


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


def _make_parents(parent: Path, out: str | Path) -> list[Path]:
    """Create the missing folders above the run folder (owner-only); return them, deepest first."""
    missing = []
    p = parent
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as e:
            _remove_empty(missing)
            raise RunDirectoryError(f"cannot create output directory {str(out)!r}: {e.strerror or e}") from None
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove folders this run created above its run folder if nothing was put in them (deepest first)."""
    for d in folders:
        try:
            d.rmdir()
        except OSError:
            return


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
    """Refuse (before any data is read) a destination holding anything privcube did not publish there (even
    with ``replace``), or a copy privcube published unless ``replace``; a missing or empty folder is free."""
    for key, target in publish_targets(output).items():
        try:
            fs, path = _fs(target)
            if not fs.exists(path):
                _check_creatable(key, target, fs, path)
                continue
            if not fs.isdir(path):
                raise RunDirectoryError(f"output.{key} {target!r} exists and is a file, not a folder privcube "
                                        "published; choose another location")
            unowned, empty = unowned_copy(fs, path)
        except (OSError, ValueError, ImportError) as e:
            raise RunDirectoryError(f"output.{key} {target!r} cannot be checked: {e}") from None
        if unowned:
            raise RunDirectoryError(
                f"output.{key} {target!r} holds {some(unowned)} privcube did not write; privcube replaces only "
                "a folder it published (nothing else in it): choose a new or empty folder")
        if not empty and not replace:
            raise RunDirectoryError(f"output.{key} {target!r} already exists (a copy privcube published); choose "
                                    "another location, or pass --overwrite to replace it")


def _check_creatable(key: str, target: str, fs: Any, path: str) -> None:
    """A local destination that does not exist yet: its nearest existing parent is a writable folder."""
    from fsspec.implementations.local import LocalFileSystem

    if not isinstance(fs, LocalFileSystem):
        return
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise RunDirectoryError(f"output.{key} {target!r} cannot be created: {str(parent)!r} is not a writable "
                                "folder")


def publish_outputs(run_dir: Path, output: Mapping[str, Any]) -> dict[str, str]:
    """Copy a run's noisy answers (``answers/``) and tensor store (``store.zarr`` without its checkpoints)
    to ``output.answers`` / ``output.zarr``; returns {key: destination}.

    Each copy carries ``.privcube-files.json`` (what it holds). Local destinations are assembled beside the
    target and renamed into place (a reader sees the old copy or the new one); fsspec URLs (``s3://``,
    ``gs://``, ...) are uploaded after removing what was there. A destination is replaced only if it holds
    nothing but a copy privcube published (checked again just before). Exact counts are never in the run
    directory, so they are never in a published copy.
    """
    done = {}
    for key, target in publish_targets(output).items():
        try:
            _publish_one(run_dir / _PUBLISHED_FROM[key], target, key)
        except RunDirectoryError as e:
            raise RunDirectoryError(f"cannot publish output.{key}: {e}; the run is not marked complete (fix the "
                                    "cause, then rerun with --resume)") from None
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types
            reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise RunDirectoryError(f"cannot publish output.{key} to {target!r}: {reason}; the run is not marked "
                                    "complete (fix the cause, then rerun with --resume)") from None
        done[key] = target
    return done


def _check_replaceable_copy(fs: Any, path: str, target: str) -> None:
    """Just before a destination is replaced: it holds nothing privcube did not publish there."""
    unowned, _ = unowned_copy(fs, path)
    if unowned:
        raise RunDirectoryError(f"{target!r} now holds {some(unowned)} privcube did not write; it was left as it "
                                "is")


def _publish_one(source: Path, target: str, kind: str) -> None:
    """Copy one folder of the run directory (with its manifest) to a local path or an fsspec URL (nothing
    if it is absent)."""
    import tempfile

    from fsspec.implementations.local import LocalFileSystem

    if not source.exists():
        return
    fs, path = _fs(target)
    if isinstance(fs, LocalFileSystem):
        _publish_local(source, Path(path), kind, target)
        return
    staging = Path(tempfile.mkdtemp(prefix="privcube-publish-"))  # 0o700
    try:
        _copy_tree(source, staging / "copy")
        write_manifest(staging / "copy", kind)
        if fs.exists(path):
            if not fs.isdir(path):
                raise RunDirectoryError(f"{target!r} is now a file; it was left as it is")
            _check_replaceable_copy(fs, path, target)
            fs.rm(path, recursive=True)
        fs.put(str(staging / "copy"), path, recursive=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copy_tree(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, ignore=lambda d, names: [n for n in names if n in _NOT_PUBLISHED
                                                             and Path(d) == source])


def _publish_local(source: Path, target: Path, kind: str, shown: str) -> None:
    """Assemble the copy in a fresh hidden folder beside ``target``, move an older copy of privcube's into
    it, rename the copy into place, delete the hidden folder (with the older copy)."""
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.publish-", dir=target.parent))  # a new name, 0o700
    try:
        _copy_tree(source, stage / "copy")
        write_manifest(stage / "copy", kind)
        if os.path.lexists(target):
            if not target.is_dir() or target.is_symlink():
                raise RunDirectoryError(f"{shown!r} is now a file or link; it was left as it is")
            _check_replaceable_copy(_fs(str(target))[0], str(target), shown)
            os.replace(target, stage / "old")
        os.replace(stage / "copy", target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def answer_frame(ans: Any, domain: Any, schema: Any = None, ci_level: float = 0.95) -> pd.DataFrame:
    """Tidy table of one group's answers: attribute codes and labels (marginals) or ``query`` number and
    ``description`` (other groups), ``estimate``, ``variance``, ``published`` when post-processing ran, and the
    ``ci_low``/``ci_high`` interval at ``ci_level`` from the noise distribution of the release (no budget)."""
    from privcube.privacy.intervals import half_widths

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
    if ans.published is not None:  # non-negative, consistent estimate (post-processing, marginal groups)
        cols["published"] = np.asarray(ans.published, dtype=float).ravel()
    if ans.variance is not None:
        half, _ = half_widths(ans, ci_level)
        if half is not None:
            cols["ci_low"], cols["ci_high"] = est - half, est + half
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
    return f"group-{i:04d}-{safe_name(group.label())}"


def write_error(path: Path, e: OSError, what: str) -> str:
    """One line: which run directory could not be written, why, and what is kept."""
    reason = e.strerror or str(e) or type(e).__name__
    where = f" ({e.filename})" if getattr(e, "filename", None) else ""
    msg = (f"cannot write the {what} of run directory {str(path)!r}: {reason}{where}; the run is not marked "
           "complete and its last checkpoint is kept (fix the cause, then rerun with --resume)")
    return " ".join(msg.split())


def synthetic_file(name: str) -> str:
    """The run-folder path of synthetic output ``name``: ``synthetic/<name>.parquet``, each ``/``-separated
    part made a safe file name (``links/sessions.user_id`` -> ``synthetic/links/sessions.user_id.parquet``)."""
    parts = [safe_name(p) for p in name.split("/")]
    return "synthetic/" + "/".join(p if p.strip(".") else "_" for p in parts) + ".parquet"


def safe_name(s: str) -> str:
    """``s`` as a file-name part: letters, digits, ``-_.`` kept, anything else ``_``, at most 80 characters."""
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
