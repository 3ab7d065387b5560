"""The ``data`` section of a single-table config: where the rows are, in which format, and their schema.

``data``: ``path`` (a file, folder, glob or URL, a list of them, or from Python a pandas/polars DataFrame),
``format`` (an input format's name, see :mod:`privcube.storage.formats`; default: guessed from the file
names), ``schema`` (a rich schema, inline or a file) or ``domain`` (``{column: size}``, inline or a JSON
file), ``compress``. A top-level inline ``domain`` stands in for a schema when only planning. The storage
layer checks this section itself; the driver's config loader (:mod:`privcube.config`) calls it. Nothing
here reads private data.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, PrivcubeError
from privcube.core.params import REQUIRED, Param
from privcube.core.config_files import resolve_path
from privcube.storage.formats import FORMATS
from privcube.storage.formats.frame import is_frame

#: the keys of the ``data`` section (``tables``/``links``: a relational job's, see privcube.relational.config)
DATA_PARAMS: dict[str, Param] = {
    "path": Param(REQUIRED, "path | URL | list | DataFrame", "where the rows are: a file, folder, glob or fsspec "
                                                             "URL, a list of them, or from Python a DataFrame"),
    "format": Param(None, "input format name", "how the files are read: parquet, csv, arrow or a registered "
                                               "plug-in (default: guessed from the file names)"),
    "schema": Param(None, "mapping | path", "the rich schema (types, categories, bins) the columns are encoded by"),
    "domain": Param(None, "{column: size} | path", "integer-coded columns and their sizes (instead of a schema)"),
    "compress": Param(False, "bool", "count distinct rows once (fewer rows when many repeat)"),
    "tables": Param(None, "mapping", "a relational job's tables"),
    "links": Param(None, "mapping", "a relational job's links between its tables"),
}
DATA_KEYS = set(DATA_PARAMS)


@dataclass(frozen=True)
class DataSpec:
    """A checked ``data`` section: schema (None when only a domain is known), domain, the resolved path(s)
    (None for a DataFrame or a data-free plan) and the input format's name (None: guessed when read)."""

    schema: Any
    domain: Domain
    path: str | list[str] | None
    format: str | None


def parse_data(raw: Mapping[str, Any], base: Path, *, need_data: bool = True, frame: Any = None) -> DataSpec:
    """The ``data`` section of ``raw`` checked (keys, format, schema/domain, path), paths resolved against the
    config's folder ``base``; ``frame`` is a DataFrame given in Python in place of ``data.path``."""
    data = raw.get("data")
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError("data: expected a mapping with 'path' and 'schema' or 'domain'")
    data = dict(data or {})
    bad = set(data) - DATA_KEYS
    if bad:
        raise ConfigError(f"data: unknown key(s) {sorted(bad)}; known: {sorted(DATA_KEYS)}")
    fmt = check_format(data.get("format"), frame)
    schema, domain = resolve_schema(raw, data, base)
    path = None
    if "path" in data:
        path = data_paths(data["path"], base)
    elif frame is None and need_data:
        raise ConfigError("data.path is missing: a run needs the data's location")
    return DataSpec(schema, domain, path, fmt)


def check_format(name: Any, frame: Any = None) -> str | None:
    """``data.format``: a registered input format's name (one ConfigError line naming the key and the known
    formats otherwise), or None. A DataFrame given from Python is read as a DataFrame whatever the section
    names (the format describes ``data.path``, which the frame replaces)."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise ConfigError(f"data.format must be the name of an input format ({', '.join(FORMATS.names())}), got "
                          f"a {type(name).__name__}")
    fmt = FORMATS.get(name, "data.format")
    if frame is None and "in-memory" in fmt.abilities:
        raise ConfigError(f"data.format: {name!r} is a DataFrame given from Python (privcube.run(config, "
                          "data=frame)), not a file format; remove data.format or name the files' format")
    return name


def check_compress(raw: Mapping[str, Any]) -> bool:
    """``data.compress``: true or false (default false)."""
    data = raw.get("data") if isinstance(raw.get("data"), Mapping) else {}
    compress = data.get("compress", False)
    if not isinstance(compress, bool):
        raise ConfigError(f"data.compress must be true or false, got {compress!r}")
    return compress


def split_frame(source: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """``(config without the frame, frame or None)``: a DataFrame in ``data.path`` is taken out (shallowly)."""
    data = source.get("data")
    if not isinstance(data, Mapping) or not is_frame(data.get("path")):
        return dict(source), None
    rest = {k: v for k, v in data.items() if k != "path"}
    return {**source, "data": rest}, data["path"]


def data_paths(spec: Any, base: Path) -> str | list[str]:
    """``data.path``: one location (file, folder, glob, URL) or a non-empty list of them, resolved against
    ``base``; anything else is refused by its type only (never its contents, which may be data)."""
    if isinstance(spec, (str, os.PathLike)) and str(spec).strip():
        return resolve_path(os.path.expanduser(str(spec)), base)
    if isinstance(spec, (list, tuple)) and spec and all(
            isinstance(p, (str, os.PathLike)) and str(p).strip() for p in spec):
        paths = [resolve_path(os.path.expanduser(str(p)), base) for p in spec]
        return paths[0] if len(paths) == 1 else paths
    what = "an empty list" if isinstance(spec, (list, tuple)) and not spec else "an empty path" if isinstance(
        spec, (str, os.PathLike)) else (
        f"a list holding a {next(type(p).__name__ for p in spec if not isinstance(p, (str, os.PathLike)))}"
        if isinstance(spec, (list, tuple)) and any(not isinstance(p, (str, os.PathLike)) for p in spec)
        else f"a {type(spec).__name__}")
    raise ConfigError(f"data.path must be a path, URL or list of paths (or, from Python, a pandas or polars "
                      f"DataFrame), got {what}")


def resolve_schema(raw: Mapping[str, Any], data: Mapping[str, Any], base: Path) -> tuple[Any, Domain]:
    """Schema (or None) and Domain from data.schema, data.domain or a top-level inline domain."""
    from privcube.storage.schema import Schema, load_schema

    given = [k for k in ("schema", "domain") if k in data]
    if len(given) > 1:
        raise ConfigError("data: give either 'schema' or 'domain', not both")
    try:
        if given:
            spec = data[given[0]]
            if isinstance(spec, str):
                spec = resolve_path(spec, base)
            schema = load_schema(spec)
            if "domain" in raw:
                raise ConfigError("give the domain once: either data.schema/data.domain or top-level domain")
            return schema, schema.domain
        if "domain" in raw:
            spec = raw["domain"]
            if isinstance(spec, str):
                spec = resolve_path(spec, base)
                domain = Domain.load(spec)
            elif isinstance(spec, Mapping):
                domain = Domain.from_mapping(spec)
            else:
                raise ConfigError("domain: expected {attribute: size} or a path to a domain JSON")
            return Schema.from_domain(domain), domain
    except PrivcubeError:
        raise
    except (OSError, json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the schema/domain: {e}") from None
    raise ConfigError("no domain: give data.schema, data.domain or a top-level inline domain")


__all__ = ["DATA_KEYS", "DATA_PARAMS", "DataSpec", "check_compress", "check_format", "data_paths", "parse_data", "resolve_schema",
           "split_frame"]
