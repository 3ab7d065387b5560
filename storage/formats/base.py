"""What an input format is: a small class that lists, describes and reads the files of one file format.

Modelled on xarray's ``BackendEntrypoint``: a format says what it is (``name``, ``description``,
``suffixes``), what it can do (``abilities``, from :data:`ABILITIES`) and which files it can open
(:meth:`InputFormat.guess_can_open`); the ingest layer (:mod:`privcube.storage.ingest`) asks it for the
files of an input, their column names (headers or footers only) and a lazy dask DataFrame of raw columns,
and encodes that frame itself, so every format is validated and encoded by the same kernel. Errors name
the file and never a value.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pandas as pd

#: the abilities a format may declare, with what each means (the reference is generated from these)
ABILITIES: dict[str, str] = {
    "lazy": "read partition by partition: the input is never held in memory at once",
    "partitioned": "one input may be a folder or dataset of many files read natively (e.g. hive partitions)",
    "schema-from-file": "column names and types come from the file's metadata (footer, schema block)",
    "text-values": "values are text: numbers and dates are parsed from it (a header names the columns)",
    "remote": "reads fsspec URLs (s3://, gs://, https://, ...) as well as local paths",
    "in-memory": "the input is an object in this process (a DataFrame given in Python), not a file",
}


class InputFormat:
    """One input format. Subclasses set the class attributes and implement :meth:`columns`, :meth:`open` and
    :meth:`chunks`; the defaults list files by glob and read a folder as the list of its files."""

    #: the config name (``data: {format: NAME}``)
    name: ClassVar[str]
    #: how messages name the format ("CSV", "Parquet")
    label: ClassVar[str]
    #: one line for the reference documentation
    description: ClassVar[str] = ""
    #: file name endings (lower case) this format opens when ``data.format`` is not given
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: what it can do: a subset of :data:`ABILITIES`
    abilities: ClassVar[frozenset[str]] = frozenset()

    @property
    def text_values(self) -> bool:
        """Whether values arrive as text, so numbers are parsed (CSV); otherwise text in a number column is an error."""
        return "text-values" in self.abilities

    @classmethod
    def guess_can_open(cls, path: Any) -> bool:
        """Whether ``path`` looks like a file of this format (by its name only; nothing is opened)."""
        return isinstance(path, (str, bytes)) and str(path).lower().rstrip("/").endswith(cls.suffixes) \
            if cls.suffixes else False

    def files(self, target: Any, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Every data file ``target`` (a path, glob or list) names, as readers and messages name them."""
        import fsspec

        files = fsspec.open_files(target if isinstance(target, list) else [target], mode="rb",
                                  **dict(storage_options or {}))
        return [full_path(f.fs, f.path) for f in files]

    def folder_target(self, folder: str, names: Sequence[str]) -> Any:
        """What to read for a folder holding the files ``names`` (base names): by default those of them this
        format opens (every file when none has its suffix), as one path or a list."""
        mine = sorted(n for n in names if self.guess_can_open(n)) or sorted(
            n for n in names if not n.startswith((".", "_")))
        paths = [f"{folder.rstrip('/')}/{n}" for n in mine]
        return paths if len(paths) != 1 else paths[0]

    def columns(self, file: str, storage_options: Mapping[str, Any] | None) -> list[str]:
        """Column names of one file, as written (a name may repeat), from its header or metadata only; an empty
        or unreadable file is a DataError naming it."""
        raise NotImplementedError

    def dataset_columns(self, target: Any, storage_options: Mapping[str, Any] | None, source: str) -> list[str] | None:
        """The columns of the whole input when they differ from the files' (e.g. hive partition columns), else
        None; ``source`` names the input in a DataError."""
        return None

    def open(self, target: Any, columns: Sequence[str] | None, *, blocksize: Any = None,
             storage_options: Mapping[str, Any] | None = None, text_dtype: Any = "string") -> Any:
        """A lazy dask DataFrame of the raw ``columns`` (all when None) of every file of ``target``; a
        text-valued format gives text columns of ``text_dtype``."""
        raise NotImplementedError

    def chunks(self, file: str, columns: Sequence[str] | None,
               storage_options: Mapping[str, Any] | None, rows: int) -> Iterator[pd.DataFrame]:
        """One file's ``columns`` as pandas frames of at most ``rows`` rows, in file order (used to name the
        file and row of an error found later)."""
        raise NotImplementedError

    def reader_frame(self, filename: str) -> bool:
        """Whether a traceback frame in ``filename`` belongs to this format's reader (an error raised there
        while partitions are read is a damaged file, see :func:`privcube.storage.ingest.unreadable_input`)."""
        return False


def full_path(fs: Any, path: str) -> str:
    """A path readers and messages understand: plain for local files, with its protocol otherwise."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return path if "file" in protocols or "local" in protocols else fs.unstrip_protocol(path)


def source_str(path: Any) -> str:
    """Printable name of the input location."""
    if isinstance(path, (list, tuple)):
        return str(path[0]) + (f" (+{len(path) - 1} more)" if len(path) > 1 else "")
    return str(path)


def one_line(e: BaseException) -> str:
    """A reader's error text in one line, without Dask's wrapper and a repeated file name."""
    text = str(e) or type(e).__name__
    text = text.split("Original Message:", 1)[-1]
    text = " ".join(text.split())
    return text[:300]


__all__ = ["ABILITIES", "InputFormat", "full_path", "one_line", "source_str"]
