"""The dataset budget file: an append-only log of JSON records, each sealed by a checksum chain, under an
OS lock.

One line per record: ``<JSON object>\\t<sha256 hex>\\n``, where the checksum is SHA-256 of the previous
line's checksum, a newline and this line's JSON text (the first line chains from a fixed tag). Editing,
removing, reordering or corrupting any record breaks the chain at that line, and the file is then refused
in one line naming the file and the line (never silently read past). Records are only ever appended: each
append is one ``write`` of the whole line on a file opened for appending, then ``fsync``; a line cut short by
a crash is refused the same way (the accounting layer never guesses what it said).

Every read-modify-append runs under ``flock`` on the file (exclusive; shared for a read-only ``show``), so
two processes charging one budget see each other's records: the second waits for the first, then reads its
reservation before deciding. The kernel drops the lock when a process dies.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from privcube.core.errors import BudgetError

CHAIN_START = "privcube-budget-v1"
#: a budget file is small (a few hundred bytes a run); anything far larger is not one
MAX_BYTES = 256 * 2**20


def _seal(previous: str, text: str) -> str:
    return hashlib.sha256(f"{previous}\n{text}".encode()).hexdigest()


def _where(path: Path) -> str:
    return f"budget file {str(path)!r}"


class BudgetStore:
    """Append-only, checksummed records of one dataset budget file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    # ------------------------------------------------------------------------------------ creating
    def create(self, header: Mapping[str, Any]) -> None:
        """Write a new file holding ``header`` as its first record; an existing file is never replaced."""
        p = self.path
        if not p.parent.is_dir():
            raise BudgetError(f"{_where(p)}: folder {str(p.parent)!r} does not exist")
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        except FileExistsError:
            raise BudgetError(f"{_where(p)} exists: a dataset has one budget, which is never reset or replaced "
                              "(give another path for another dataset)") from None
        except OSError as e:
            raise BudgetError(f"{_where(p)} cannot be created: {e.strerror or e}") from None
        with os.fdopen(fd, "ab") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            fh.write(self._line(CHAIN_START, header)[0])
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(p.parent)

    # ------------------------------------------------------------------------------------- reading
    @contextlib.contextmanager
    def locked(self, *, write: bool = True) -> Iterator[Session]:
        """The file under its lock (exclusive for ``write``, else shared), its records read and verified."""
        p = self.path
        try:
            fh = open(p, "r+b" if write else "rb")  # noqa: SIM115 - held for the block
        except FileNotFoundError:
            raise BudgetError(f"{_where(p)} does not exist: create it with `privcube budget init {p} --epsilon E "
                              "--delta D`") from None
        except IsADirectoryError:
            raise BudgetError(f"{_where(p)} is a folder, not a budget file") from None
        except OSError as e:
            raise BudgetError(f"{_where(p)} cannot be opened: {e.strerror or e}") from None
        with fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            records, last = self._verify(fh)
            yield Session(self, fh, records, last)

    def read(self) -> list[dict[str, Any]]:
        """The verified records (shared lock)."""
        with self.locked(write=False) as s:
            return list(s.records)

    def _verify(self, fh: Any) -> tuple[list[dict[str, Any]], str]:
        p = self.path
        size = os.fstat(fh.fileno()).st_size
        if size > MAX_BYTES:
            raise BudgetError(f"{_where(p)} holds {size} bytes, far more than a budget file does; refused")
        fh.seek(0)
        data = fh.read()
        if not data:
            raise BudgetError(f"{_where(p)} is empty (not made by `privcube budget init`); refused")
        lines = data.split(b"\n")
        if lines[-1] != b"":
            raise BudgetError(f"{_where(p)}: line {len(lines)} is incomplete (a write cut short?); the file is "
                              "refused: restore it from a backup")
        records: list[dict[str, Any]] = []
        previous = CHAIN_START
        for number, raw in enumerate(lines[:-1], start=1):
            try:
                text, _, digest = raw.decode("utf-8").rpartition("\t")
            except UnicodeDecodeError:
                text, digest = "", ""
            if not text or digest != _seal(previous, text):
                raise BudgetError(f"{_where(p)}: record {number} fails its checksum (edited or corrupted); the "
                                  "file is refused: a budget's records are never changed, restore it from a backup")
            try:
                rec = json.loads(text)
            except json.JSONDecodeError:  # pragma: no cover - a sealed line was written by us as JSON
                raise BudgetError(f"{_where(p)}: record {number} is not a record; the file is refused") from None
            if not isinstance(rec, dict) or "type" not in rec or (number == 1) != (rec.get("type") == "budget"):
                raise BudgetError(f"{_where(p)}: record {number} is not what a budget file holds there; refused")
            records.append(rec)
            previous = digest
        return records, previous

    @staticmethod
    def _line(previous: str, record: Mapping[str, Any]) -> tuple[bytes, str]:
        text = json.dumps(dict(record), sort_keys=True, separators=(",", ":"), allow_nan=False)
        digest = _seal(previous, text)
        return f"{text}\t{digest}\n".encode(), digest


class Session:
    """The records of a locked budget file, and appending to it (only while the lock is held)."""

    def __init__(self, store: BudgetStore, fh: Any, records: list[dict[str, Any]], last: str) -> None:
        self.store, self._fh, self.records, self._last = store, fh, records, last

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one sealed record (one write, then fsync)."""
        line, digest = BudgetStore._line(self._last, record)
        fd = self._fh.fileno()
        os.lseek(fd, 0, os.SEEK_END)
        written = os.write(fd, line)
        if written != len(line):  # pragma: no cover - a regular file takes small writes whole
            raise BudgetError(f"{_where(self.store.path)}: a record could not be written whole")
        os.fsync(fd)
        self.records.append(json.loads(line.split(b"\t")[0]))
        self._last = digest


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["BudgetStore", "CHAIN_START", "Session"]
