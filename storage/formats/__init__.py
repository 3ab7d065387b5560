"""Input formats as plug-ins: the registry of every format privcube reads, by config name (``data.format``).

A format is a small :class:`~privcube.storage.formats.base.InputFormat` class (xarray's
``BackendEntrypoint`` is the model); the built-in ones are listed below as import strings and imported on
first use. Another package adds one under the entry-point group ``privcube.input_formats``; a script or a
test adds one with ``FORMATS.register(name, "module:Class")``. Without ``data.format`` the format is
guessed from the file names (:func:`guess_format`), so configs that name no format read as before.
"""
from __future__ import annotations

from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.plugins import Registry

#: config name -> "module:Class"; the guess from a file name tries them in this order
FORMATS = Registry("input format", "privcube.input_formats", {
    "parquet": "privcube.storage.formats.parquet:ParquetFormat",
    "csv": "privcube.storage.formats.csv:CSVFormat",
    "arrow": "privcube.storage.formats.arrow:ArrowFormat",
    "dataframe": "privcube.storage.formats.frame:FrameFormat",
})
#: what a path without a suffix any format claims is read as (a folder of Parquet files, a dataset)
DEFAULT_FORMAT = "parquet"


def get_format(name: str, key: str = "data.format") -> Any:
    """The format registered as ``name`` (an instance); a ConfigError naming ``key`` lists the known ones."""
    return FORMATS.get(name, key)()


def guess_format(path: Any) -> Any:
    """The first registered format whose ``guess_can_open(path)`` holds, or None (formats that do not import
    are skipped: a broken plug-in does not stop the others)."""
    for name in FORMATS.names():
        try:
            fmt = FORMATS.get(name, "data.format")
        except ConfigError:
            continue
        if fmt.guess_can_open(path):
            return fmt()
    return None


def loaded_formats() -> list[Any]:
    """Instances of the formats imported so far (the ones an input of this process was read with)."""
    return [cls() for cls in FORMATS.loaded()]


__all__ = ["DEFAULT_FORMAT", "FORMATS", "get_format", "guess_format", "loaded_formats"]
