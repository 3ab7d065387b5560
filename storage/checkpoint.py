"""Atomic, validated checkpoints of an iterative mechanism inside the run's zarr store.

A checkpoint is a *base* (a full snapshot, written by ``save``) plus an append-only *log* of small
per-round records (written by ``append``), so a round costs O(what changed in it), not O(state) or
O(rounds so far). Layout under ``<store>/checkpoint/`` (a zarr v3 subgroup; the other files beside the
arrays are not zarr nodes, so this module never lists the subgroup through zarr)::

    <name>-v<round>        one zarr array per saved array version of the base (written via TensorStore)
    meta-<base>-<hash>.json  the base's JSON meta (trace, ledger, ...), BLAKE2-checksummed by the manifest
    log-<round>.rec        one record per appended round: a JSON header line (round, meta, array names,
                           dtypes, shapes, and the checksum of the previous record -- or of the base meta
                           for the first one) followed by the raw C-order array bytes; rounds committed
                           together by ``background()`` are consecutive records of one file (named by
                           the last round)
    manifest-<round>.json  round, identity, base round, meta file + checksum, log head (round, checksum,
                           count), and per base array: version, shape, dtype, checksum
    CURRENT                the name of the committed manifest (replaced atomically with os.replace)

``save`` (a compaction) writes only base arrays whose content changed since the last save (checksum),
the meta file, then a new manifest, then switches ``CURRENT``; only after the switch are unreferenced
versions, meta files, log records and manifests removed. ``append`` writes one record and a small
manifest (the base's array table is spliced in pre-serialised; it does not grow with the rounds), then
switches ``CURRENT``. Every file is written to a temporary name, fsynced and renamed, and nothing the
committed manifest references is ever modified, so a crash at any point leaves the previous checkpoint
intact. ``should_compact`` tells the caller when the log has grown past the base (``compact_ratio``) or
past ``max_log`` records. ``load`` validates the pointer, the manifest, the identity, every base array
(shape, dtype, BLAKE2 checksum), the meta file and the whole record chain, and raises
:class:`~privcube.core.errors.CheckpointError` on any mismatch; ``check_identity`` does the cheap part
(pointer, manifest, identity) so a resume can be refused before any data is read. Checkpoints written in
the v1 format (a full snapshot per round, meta inline) are still loaded.

``background()`` (a context manager, opt-in) moves the file writes of ``append`` -- and of ``save`` of
arrays the caller promises not to modify (``frozen=True``) -- to one writer thread, in order: the
record, its checksum chain and the bookkeeping ``should_compact`` reads are still computed by the caller,
so decisions and file contents are exactly those of the synchronous path; only the fsyncs overlap the
caller's next round. A commit is still atomic, and a crash leaves the last commit the thread finished
(a resume then repeats the later rounds with the same keyed noise, as after any crash between rounds).
Leaving the context waits for every queued commit and raises the first write error; so does ``wait``.

Checkpoints hold only noisy state (residual estimates, precisions, marginal estimates, noisy
measurements, synthetic tables and links, the ledger and the trace); exact counts are recomputed from the
data on resume. Both job kinds use it: a single-table run under ``<run>/store.zarr/checkpoint``, a relational
run under ``<run>/checkpoint`` (a zarr group of its own: that run writes no tensor store).
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from privcube.core.atomic import atomic_write_bytes, atomic_write_text
from privcube.core.errors import CheckpointError
from privcube.storage.zarr_store import TensorStore

FORMAT = "privcube-checkpoint-v2"
FORMAT_V1 = "privcube-checkpoint-v1"
RECORD_MAGIC = b"privcube-checkpoint-record-v1\n"
DEFAULT_MAX_LOG = 1000          # compact after this many log records (bounds load and replay time)
DEFAULT_COMPACT_RATIO = 1.0     # compact when the log holds more bytes than this times the base
MIN_BASE_BYTES = 1 << 20        # small bases count as 1 MiB (no compaction every few rounds)


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
            parts.append("the job config differs (data paths, domain or schemas, workload or links, privacy, "
                         "mechanism options or noise_sampler changed)")
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


def _digest(data: bytes) -> str:
    """BLAKE2b-128 of raw file bytes (meta files and log records)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file, fsync, os.replace)."""
    atomic_write_text(path, json.dumps(data, allow_nan=True))


def _write_unreferenced(files: list[tuple[Path, bytes]]) -> None:
    """Write new files that no committed manifest references yet (owner-only), then fsync them all.

    No temporary name is needed: until the pointer switch nothing reads these names, so a torn write
    is harmless and a retry simply overwrites it. On error the partial files are removed.
    """
    fds: list[int] = []
    try:
        for path, data in files:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            fds.append(fd)
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        for fd in fds:
            os.fsync(fd)
    except BaseException:
        for path, _ in files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    finally:
        for fd in fds:
            os.close(fd)


def encode_record(round: int, prev: Mapping[str, Any], meta: Mapping[str, Any],
                  arrays: Mapping[str, np.ndarray]) -> bytes:
    """One log record: magic, a JSON header line, then the arrays' raw C-order bytes in header order."""
    parts: list[bytes] = []
    spec = []
    for name, arr in arrays.items():
        if not isinstance(name, str) or not name:
            raise CheckpointError(f"checkpoint record array name {name!r} must be a non-empty string")
        a = np.asarray(arr)
        if not a.flags.c_contiguous:
            a = a.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        if a.dtype.kind not in "biuf" or a.dtype.byteorder == ">":
            raise CheckpointError(f"checkpoint record array {name!r} has unsupported dtype {a.dtype}")
        spec.append([name, a.dtype.str, list(a.shape)])
        parts.append(a.tobytes())
    header = json.dumps({"round": int(round), "prev": dict(prev), "meta": meta, "arrays": spec}, allow_nan=True)
    return RECORD_MAGIC + header.encode("utf-8") + b"\n" + b"".join(parts)


def split_records(data: bytes, where: str) -> list[tuple[bytes, dict[str, Any]]]:
    """The records of one log file, in order, each with its own bytes: one record, or the records of
    rounds committed together (written back to back by ``background()``'s writer)."""
    out = []
    start = 0
    while True:
        end = data.find(b"\n", start + len(RECORD_MAGIC)) if data.startswith(RECORD_MAGIC, start) else -1
        if end < 0:
            return [(data[start:], decode_record(data[start:], where))]  # raises the precise error
        try:
            spec = json.loads(data[start + len(RECORD_MAGIC):end].decode("utf-8"))["arrays"]
            size = sum((int(np.prod(shape, dtype=np.int64)) if shape else 1) * np.dtype(dt).itemsize
                       for _, dt, shape in spec)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
            raise CheckpointError(f"checkpoint log record {where!r} is corrupt: {e}") from None
        stop = min(end + 1 + size, len(data))
        one = data[start:stop]
        out.append((one, decode_record(one, where)))
        if stop >= len(data):
            return out
        start = stop


def decode_record(data: bytes, where: str) -> dict[str, Any]:
    """Parse a record written by :func:`encode_record` (CheckpointError naming ``where`` if malformed)."""
    if not data.startswith(RECORD_MAGIC):
        raise CheckpointError(f"checkpoint log record {where!r} is corrupt (bad magic)")
    end = data.find(b"\n", len(RECORD_MAGIC))
    if end < 0:
        raise CheckpointError(f"checkpoint log record {where!r} is corrupt (no header)")
    try:
        header = json.loads(data[len(RECORD_MAGIC):end].decode("utf-8"))
        rnd, prev, meta, spec = header["round"], header["prev"], header["meta"], header["arrays"]
        arrays: dict[str, np.ndarray] = {}
        off = end + 1
        for name, dtype, shape in spec:
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            n = count * dt.itemsize
            if off + n > len(data):
                raise ValueError("truncated array data")
            arrays[name] = np.frombuffer(data, dtype=dt, count=count, offset=off).reshape(shape).copy()
            off += n
        if off != len(data):
            raise ValueError("trailing bytes")
        if not isinstance(rnd, int) or not isinstance(prev, dict) or not isinstance(meta, dict):
            raise ValueError("malformed header")
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint log record {where!r} is corrupt: {e}") from None
    return {"round": rnd, "prev": prev, "meta": meta, "arrays": arrays}


def _read_bytes(path: Path, what: str) -> bytes:
    """The bytes of checkpoint file ``path``; a missing or unreadable one is a CheckpointError naming it."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {what} {str(path)!r} is missing") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint {what} {str(path)!r} cannot be read: {e}") from None


@dataclass
class _Append:
    """The file writes of one ``append``: its record, its manifest, and the manifest it supersedes."""

    record: tuple[Path, bytes]
    manifest: tuple[Path, bytes]
    pointer: Path
    old: Path | None


def _commit_appends(batch: list[_Append]) -> None:
    """Commit consecutive appends as one: their records back to back in one file named by the last round
    (``load`` splits it; each record keeps its own checksum and back link), the last manifest, one
    pointer switch, the superseded manifest removed: three fsyncs however many rounds. The intermediate
    manifests are never referenced, so they are not written."""
    last = batch[-1]
    records = last.record if len(batch) == 1 else (last.record[0], b"".join(j.record[1] for j in batch))
    _write_unreferenced([records, last.manifest])
    atomic_write_text(last.pointer, last.manifest[0].name)  # the commit point
    first = batch[0].old
    if first is not None and first != last.manifest[0]:
        first.unlink(missing_ok=True)


class _Committer:
    """One writer thread running queued commit jobs in order; appends queued back to back are committed
    together (fewer fsyncs when the caller is faster than the disk). The first error skips the rest."""

    COALESCE = True

    def __init__(self) -> None:
        self.jobs: collections.deque[Callable[[], None] | _Append] = collections.deque()
        self.cond = threading.Condition()
        self.busy = False
        self.closing = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._work, name="privcube-checkpoint-writer", daemon=True)
        self.thread.start()

    def _take(self) -> list[Callable[[], None] | _Append] | None:
        with self.cond:
            while not self.jobs and not self.closing:
                self.cond.wait()
            if not self.jobs:
                return None
            batch = [self.jobs.popleft()]
            while self.COALESCE and isinstance(batch[0], _Append) and self.jobs and isinstance(self.jobs[0], _Append):
                batch.append(self.jobs.popleft())
            self.busy = True
            return batch

    def _work(self) -> None:
        while (batch := self._take()) is not None:
            try:
                if self.error is None:
                    if isinstance(batch[0], _Append):
                        _commit_appends(batch)  # type: ignore[arg-type]
                    else:
                        batch[0]()  # type: ignore[operator]
            except BaseException as e:  # noqa: BLE001 - handed to the caller by check()
                self.error = e
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def check(self) -> None:
        """Raise the first error of a finished job (the caller's next checkpoint call sees it)."""
        if self.error is not None:
            raise self.error

    def submit(self, job: Callable[[], None] | _Append) -> None:
        """Queue ``job`` after every job submitted before it."""
        self.check()
        with self.cond:
            self.jobs.append(job)
            self.cond.notify_all()

    def wait(self) -> None:
        """Block until every queued job has run; raise the first error."""
        with self.cond:
            while self.jobs or self.busy:
                self.cond.wait()
        self.check()

    def close(self) -> None:
        """Run what is queued, then stop the thread (errors stay in ``error``)."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join()


class RunCheckpoint:
    """Checkpoint of one run: ``save`` (full snapshot) or ``append`` (log record) per round, ``load()`` to resume."""

    def __init__(self, path: str | os.PathLike[str], identity: Mapping[str, Any] | None = None, *,
                 max_log: int = DEFAULT_MAX_LOG, compact_ratio: float = DEFAULT_COMPACT_RATIO,
                 folder: str = "checkpoint", enclosing_store: bool = True) -> None:
        """Checkpoints under ``<path>/<folder>``; ``identity`` must match on load (mechanism, seed, ...).

        ``max_log`` and ``compact_ratio`` set when :meth:`should_compact` asks for a new base.
        ``enclosing_store``: ``path`` is the run's zarr store and the checkpoint one of its subgroups
        (single-table runs); False: the checkpoint folder is a zarr group of its own (relational runs).
        """
        p = str(path)
        if "://" in p:
            raise CheckpointError(f"checkpoint path {p!r}: atomic checkpoints need a local filesystem path")
        if isinstance(max_log, bool) or not isinstance(max_log, int) or max_log < 0:
            raise CheckpointError(f"max_log must be a non-negative integer, got {max_log!r}")
        if not (isinstance(compact_ratio, (int, float)) and compact_ratio >= 0):
            raise CheckpointError(f"compact_ratio must be a non-negative number, got {compact_ratio!r}")
        if not folder or "/" in folder or folder in (".", ".."):
            raise CheckpointError(f"checkpoint folder {folder!r} must be a plain folder name")
        self.root = Path(p)
        self.dir = self.root / folder
        self.enclosing_store = bool(enclosing_store)
        self.identity = json.loads(json.dumps(dict(identity or {}), default=str))
        self.max_log = max_log
        self.compact_ratio = float(compact_ratio)
        self._store: TensorStore | None = None
        self._known: dict[str, dict[str, Any]] | None = None  # name -> manifest entry of the last save
        self._head: dict[str, Any] | None = None  # what append needs about the committed checkpoint
        self._writer: _Committer | None = None  # set inside background()

    # ------------------------------------------------------------------------------------ helpers
    @property
    def store(self) -> TensorStore:
        """The zarr subgroup holding array versions (created on first use)."""
        if self._store is None:
            self.root.mkdir(parents=True, exist_ok=True)
            if self.enclosing_store:
                TensorStore(self.root)  # make sure the parent group exists
            self._store = TensorStore(self.dir)
        return self._store

    @contextlib.contextmanager
    def background(self) -> Iterator[RunCheckpoint]:
        """Within the block, commits are written on a writer thread, in order (see the module docstring).

        Leaving it waits for every queued commit, then raises the first write error (if the block itself
        raised, that exception propagates and a write error is chained to nothing: the block's wins). After
        a write error the in-memory bookkeeping is dropped, so the next call re-reads the committed state.
        """
        if self._writer is not None:  # nested: the outer block owns the thread
            yield self
            return
        self._writer = _Committer()
        failed = True
        try:
            yield self
            failed = False
        finally:
            writer, self._writer = self._writer, None
            writer.close()
            if writer.error is not None:
                self._known, self._head = None, None
                if not failed:
                    raise writer.error

    def wait(self) -> None:
        """Wait until every commit queued by ``background()`` is on disk; raise the first write error."""
        if self._writer is not None:
            self._writer.wait()

    def _run(self, job: Callable[[], None]) -> None:
        """Run a commit job now, or queue it on the writer thread inside ``background()``."""
        if self._writer is None:
            job()
        else:
            self._writer.submit(job)

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
        if not isinstance(manifest, dict) or manifest.get("format") not in (FORMAT, FORMAT_V1):
            raise CheckpointError(f"checkpoint manifest {str(mpath)!r} has an unknown format")
        keys = ("round", "identity", "meta", "arrays") if manifest["format"] == FORMAT_V1 else \
            ("round", "identity", "base", "meta_file", "log", "arrays")
        for key in keys:
            if key not in manifest:
                raise CheckpointError(f"checkpoint manifest {str(mpath)!r} lacks key {key!r}")
        if not isinstance(manifest["arrays"], dict) or not isinstance(manifest["round"], int):
            raise CheckpointError(f"checkpoint manifest {str(mpath)!r} is malformed")
        if manifest["format"] == FORMAT:
            mf, log = manifest["meta_file"], manifest["log"]
            if not (isinstance(manifest["base"], int) and isinstance(mf, dict) and isinstance(log, dict)
                    and isinstance(mf.get("file"), str) and mf["file"].startswith("meta-") and "/" not in mf["file"]
                    and isinstance(log.get("count"), int) and log["count"] >= 0
                    and (log["count"] == 0 or isinstance(log.get("head"), int))):
                raise CheckpointError(f"checkpoint manifest {str(mpath)!r} is malformed")
        manifest["_file"] = name
        return manifest

    def _set_head(self, manifest: Mapping[str, Any], log_bytes: int | None = None) -> None:
        """Remember what ``append`` needs about the committed checkpoint ``manifest`` (v2 only)."""
        if manifest.get("format") != FORMAT:
            self._head = None  # a v1 checkpoint: the next save starts a v2 base
            return
        log = manifest["log"]
        if log_bytes is None:
            log_bytes = 0
            r = log.get("head")
            for _ in range(log["count"]):  # sizes only; load() verifies the contents
                p = self.dir / f"log-{r}.rec"
                try:
                    log_bytes += p.stat().st_size
                    with open(p, "rb") as f:
                        f.readline()  # the magic line
                        r = json.loads(f.readline())["prev"]["round"]
                except (OSError, ValueError, KeyError, TypeError):
                    break
        self._head = {
            "round": int(manifest["round"]), "base": int(manifest["base"]), "file": manifest["_file"],
            "meta_file": dict(manifest["meta_file"]), "arrays_json": json.dumps(manifest["arrays"]),
            "base_bytes": sum(int(np.prod(e["shape"], dtype=np.int64)) * np.dtype(e["dtype"]).itemsize
                              for e in manifest["arrays"].values()),
            "log_head": log.get("head"), "log_checksum": log.get("checksum"), "log_count": int(log["count"]),
            "log_bytes": int(log_bytes),
        }

    def _commit(self, round: int, manifest_text: str) -> str:
        """Write ``manifest-<round>.json`` and switch CURRENT to it (the commit point); return its name."""
        mname = f"manifest-{round}.json"
        atomic_write_text(self.dir / mname, manifest_text)
        atomic_write_text(self._pointer(), mname)  # the commit point
        return mname

    # -------------------------------------------------------------------------------- save / load
    def save(self, round: int, state: Mapping[str, Any], frozen: bool = False) -> None:
        """Commit ``state`` = {"meta": JSON mapping, "arrays": {name: ndarray}} as checkpoint ``round`` (a new base).

        ``frozen``: the caller will not modify the arrays afterwards, so inside ``background()`` they may be
        written on the writer thread; otherwise queued commits are awaited and the save runs here.
        """
        if isinstance(round, bool) or not isinstance(round, (int, np.integer)) or round < 0:
            raise CheckpointError(f"checkpoint round must be a non-negative integer, got {round!r}")
        round = int(round)
        if not frozen:
            self.wait()
        elif self._writer is not None:
            self._writer.check()
        arrays = state.get("arrays", {})
        meta = state.get("meta", {})
        store = self.store
        if self._known is None:
            self.wait()
            old = self._read_manifest() if self.exists() else None
            self._known = dict(old["arrays"]) if old else {}
        entries: dict[str, dict[str, Any]] = {}
        writes: list[tuple[str, np.ndarray]] = []
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
            writes.append((version, a))
            entries[name] = {"version": version, "shape": list(a.shape), "dtype": a.dtype.str, "checksum": digest}
        meta_bytes = json.dumps(meta, allow_nan=True).encode("utf-8")
        digest = _digest(meta_bytes)  # content in the name: never overwrites a committed meta file
        meta_ref = {"file": f"meta-{round}-{digest[:12]}.json", "checksum": digest}
        manifest = {"format": FORMAT, "round": round, "identity": self.identity, "base": round,
                    "meta_file": meta_ref, "log": {"head": None, "checksum": None, "count": 0}, "arrays": entries}
        manifest_text = json.dumps(manifest, allow_nan=True)
        mname = f"manifest-{round}.json"

        def commit() -> None:
            for version, a in writes:
                store.write(version, a)
            atomic_write_bytes(self.dir / meta_ref["file"], meta_bytes)
            self._commit(round, manifest_text)
            self._collect(entries, keep_manifest=mname, keep_meta=meta_ref["file"])

        if frozen:
            self._run(commit)
        else:
            commit()
        self._known = entries
        manifest["_file"] = mname
        self._set_head(manifest, log_bytes=0)

    def should_compact(self, extra_bytes: int = 0, state_bytes: int | None = None) -> bool:
        """Whether the next round should be a ``save`` (new base) rather than an ``append``.

        True when there is no committed v2 checkpoint to append to, when the log has ``max_log``
        records, or when after ``extra_bytes`` more it would hold more than ``compact_ratio`` x the
        size of a full snapshot (``state_bytes``, default the base's stored bytes; at least 1 MiB).
        Compacting then costs at most ``1/compact_ratio`` x the log written since the last one.
        """
        if self._head is None:
            self.wait()
            manifest = self._read_manifest() if self.exists() else None
            if manifest is None:
                return True
            self._set_head(manifest)
            if self._head is None:
                return True
        h = self._head
        size = h["base_bytes"] if state_bytes is None else int(state_bytes)
        return (h["log_count"] >= self.max_log
                or h["log_bytes"] + int(extra_bytes) > self.compact_ratio * max(size, MIN_BASE_BYTES))

    def append(self, round: int, record: Mapping[str, Any]) -> None:
        """Commit ``record`` = {"meta": JSON mapping, "arrays": {name: ndarray}} as log round ``round``.

        The record is appended to the committed checkpoint (which must exist, in the v2 format, at an
        earlier round); ``load`` returns it in order in ``state["log"]``. Costs one record file, a
        manifest whose size does not grow with the rounds, and the pointer switch.
        """
        if isinstance(round, bool) or not isinstance(round, (int, np.integer)) or round < 0:
            raise CheckpointError(f"checkpoint round must be a non-negative integer, got {round!r}")
        round = int(round)
        if self._head is None:
            self.wait()
            manifest = self._read_manifest() if self.exists() else None
            if manifest is not None:
                self._set_head(manifest)
            if self._head is None:
                raise CheckpointError("checkpoint append needs a committed (v2) checkpoint to append to; save first")
        h = self._head
        if round <= h["round"]:
            raise CheckpointError(f"checkpoint append: round {round} is not after the committed round {h['round']}")
        prev = ({"round": h["log_head"], "checksum": h["log_checksum"]} if h["log_count"]
                else {"round": h["base"], "checksum": h["meta_file"]["checksum"]})
        data = encode_record(round, prev, json.loads(json.dumps(record.get("meta", {}), allow_nan=True)),
                             record.get("arrays", {}))
        digest = _digest(data)
        log = {"head": round, "checksum": digest, "count": h["log_count"] + 1}
        small = json.dumps({"format": FORMAT, "round": round, "identity": self.identity, "base": h["base"],
                            "meta_file": h["meta_file"], "log": log}, allow_nan=True)
        mname = f"manifest-{round}.json"  # a later round than the committed one: not referenced yet
        job = _Append((self.dir / f"log-{round}.rec", data),
                      (self.dir / mname, (small[:-1] + ', "arrays": ' + h["arrays_json"] + "}").encode()),
                      self._pointer(), self.dir / h["file"])
        if self._writer is None:
            _commit_appends([job])
        else:
            self._writer.submit(job)
        h.update(round=round, file=mname, log_head=round, log_checksum=digest, log_count=log["count"],
                 log_bytes=h["log_bytes"] + len(data))

    def _collect(self, entries: Mapping[str, Mapping[str, Any]], keep_manifest: str, keep_meta: str | None = None) -> None:
        """Remove array versions, meta files, log records and manifests the committed checkpoint no longer references."""
        live = {e["version"] for e in entries.values()}
        with os.scandir(self.dir) as it:  # not a zarr listing: it would warn about the manifest files
            for d in it:
                if d.is_dir() and d.name not in live and not d.name.startswith(".tmp-"):
                    shutil.rmtree(d.path, ignore_errors=True)
        for f in self.dir.glob("manifest-*.json"):
            if f.name != keep_manifest:
                f.unlink(missing_ok=True)
        for f in self.dir.glob("meta-*.json"):
            if f.name != keep_meta:
                f.unlink(missing_ok=True)
        for f in self.dir.glob("log-*.rec"):
            f.unlink(missing_ok=True)

    def _check(self, manifest: Mapping[str, Any]) -> None:
        if self.identity and manifest["identity"] != self.identity:
            raise CheckpointError(f"checkpoint in {str(self.dir)!r} belongs to a different run: "
                                  + describe_mismatch(manifest["identity"], self.identity))

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint after checking pointer, manifest and identity; None if none."""
        self.wait()
        manifest = self._read_manifest()
        if manifest is None:
            return None
        self._check(manifest)
        return int(manifest["round"])

    def _read_log(self, manifest: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        """(base meta, log records in round order, log bytes) of a v2 manifest, every checksum verified."""
        mf = manifest["meta_file"]
        mpath = self.dir / mf["file"]
        raw = _read_bytes(mpath, "meta file")
        if _digest(raw) != mf.get("checksum"):
            raise CheckpointError(f"checkpoint meta file {str(mpath)!r} fails its checksum (corrupt data)")
        try:
            meta = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"checkpoint meta file {str(mpath)!r} is corrupt: {e}") from None
        log = manifest["log"]
        records: list[dict[str, Any]] = []
        nbytes = 0
        r, want = log.get("head"), log.get("checksum")
        pending: list[tuple[bytes, dict[str, Any]]] = []  # the earlier records of the file being walked
        path = self.dir
        for _ in range(log["count"]):
            if not pending:
                path = self.dir / f"log-{r}.rec"
                data = _read_bytes(path, "log record")
                try:
                    pending = split_records(data, str(path))
                except CheckpointError:
                    if _digest(data) == want:  # written like this: the parse error says more
                        raise
                    raise CheckpointError(f"checkpoint log record {str(path)!r} fails its checksum (corrupt data)") \
                        from None
            data, rec = pending.pop()
            if _digest(data) != want:
                raise CheckpointError(f"checkpoint log record {str(path)!r} fails its checksum (corrupt data)")
            if rec["round"] != r:
                raise CheckpointError(f"checkpoint log record {str(path)!r} is corrupt: it holds round {rec['round']}")
            nbytes += len(data)
            records.append(rec)
            prev = rec["prev"]
            r, want = prev.get("round"), prev.get("checksum")
            if not isinstance(r, int) or r >= rec["round"]:
                raise CheckpointError(f"checkpoint log record {str(path)!r} is corrupt: bad back link {prev!r}")
        if pending:
            raise CheckpointError(f"checkpoint log record {str(path)!r} is corrupt: it holds more records than the log")
        if log["count"] and (r != manifest["base"] or want != mf.get("checksum")):
            raise CheckpointError(f"checkpoint log in {str(self.dir)!r} does not lead back to its base "
                                  f"(round {manifest['base']}): corrupt")
        records.reverse()
        return meta, [{"round": x["round"], "meta": x["meta"], "arrays": x["arrays"]} for x in records], nbytes

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """(round, {"meta", "arrays", "log"}) of the committed checkpoint, None if none; CheckpointError if corrupt.

        ``meta``/``arrays`` are the base (the last ``save``); ``log`` lists the records appended since,
        in round order, each {"round", "meta", "arrays"} (empty for a checkpoint just saved).
        """
        self.wait()
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
            if not isinstance(version, str) or "/" in version or not (self.dir / version).is_dir():
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
        if manifest["format"] == FORMAT_V1:
            meta, log, nbytes = manifest["meta"], [], 0
        else:
            meta, log, nbytes = self._read_log(manifest)
        self._known = dict(manifest["arrays"])
        self._set_head(manifest, log_bytes=nbytes)
        return manifest["round"], {"meta": meta, "arrays": arrays, "log": log}

    def clear(self) -> None:
        """Delete every checkpoint of this run."""
        self.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        self._store = None
        self._known = None
        self._head = None


__all__ = ["DEFAULT_COMPACT_RATIO", "DEFAULT_MAX_LOG", "FORMAT", "FORMAT_V1", "RECORD_MAGIC", "RunCheckpoint",
           "checksum", "decode_record", "describe_mismatch", "encode_record", "split_records"]
