"""Contribution bounding for a person-level privacy unit: at most K rows per id, out of core.

``open_with_id`` reads the schema's columns plus the id column (files or an in-memory frame) and encodes
the attributes as usual; ``truncate_per_id`` shuffles the rows by id (a dask shuffle, on disk when the
data do not fit) and keeps, for every id, the K rows with the smallest keyed hash (SipHash with a secret
key from the run's noise source) of (id, encoded row). The choice is a uniformly random-looking subset
that depends on nothing but the person's own rows -- not on how many rows they have beyond K, nor on any
other person, nor on row positions (positions shift when another person is added or removed, which would
change other people's choices and break the K-row bound). Rows of one person with identical codes are
interchangeable, so ties are harmless. Errors name columns, never values or ids.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.errors import DataError
from privcube.storage.ingest import EncodedTable, Where, empty_codes, encode_frame, open_input, value_error
from privcube.storage.schema import Schema, load_schema

#: name of the id column carried next to the codes until truncation drops it
ID_COLUMN = "__privcube_unit_id__"


def _with_id(part: pd.DataFrame, schema: Schema, id_column: str, parse_text: bool, source: str | None = None,
             positional: bool = False) -> pd.DataFrame:
    """Codes of one raw partition plus its ids as strings (so CSV and Parquet ids hash alike); errors name the
    column, ``source`` and the rule, never an id or a value."""
    ids = part[id_column]
    na = ids.isna().to_numpy()
    if na.any():
        raise value_error(id_column, "the privacy_unit.id column has missing values; every row needs a person id",
                          ids, na, Where(source, positional))
    codes = encode_frame(part[list(schema.names)], schema, parse_text=parse_text, source=source, positional=positional)
    codes[ID_COLUMN] = ids.astype(str).to_numpy(dtype=object)
    return codes


def _meta(schema: Schema) -> pd.DataFrame:
    meta = empty_codes(schema)
    meta[ID_COLUMN] = pd.Series([], dtype=object)
    return meta


def open_with_id(source: Any, schema: Schema | Any, id_column: str, *, frame: Any = None,
                 fmt: str | None = None) -> EncodedTable:
    """The encoded table with the person id as an extra column ``ID_COLUMN`` (lazy). ``source`` is a path,
    glob, URL or list of them (format ``fmt``, else guessed); or ``frame`` (pandas/polars DataFrame given in
    Python)."""
    from privcube.storage.formats.frame import FrameFormat

    schema = load_schema(schema)
    names = list(schema.names)
    if id_column in names:
        raise DataError(f"privacy_unit.id column {id_column!r} is also an attribute of the schema; the person id "
                        "must not be one of the measured attributes")
    label, positional, text = "the DataFrame", True, False
    if frame is not None:
        from privcube.storage.formats.frame import as_pandas

        frame = as_pandas(frame)
        available = FrameFormat().columns(frame, None)
    else:
        info = open_input(source, columns=[*names, id_column], fmt=fmt)
        available, label, positional, text = info.available, info.label, False, info.format.text_values
    absent = [c for c in [*names, id_column] if c not in available]
    if absent:
        what = "privacy_unit.id column" if absent[0] == id_column else "column"
        raise DataError(f"{what} {absent[0]!r} is missing from the data; it has columns {available[:30]}")
    cols = [*names, id_column]
    raw = FrameFormat().open(frame, cols) if frame is not None else info.read(cols)
    encoded = raw.map_partitions(_with_id, schema, id_column, text, label, positional, meta=_meta(schema))
    return EncodedTable(encoded, schema, str(source) if frame is None else "<DataFrame>")


def row_hashes(codes: pd.DataFrame, names: Sequence[str], hash_key: str) -> np.ndarray:
    """Keyed SipHash-2-4 (pandas' hash_array with a 16-byte key) of (id, codes) per row, as uint64."""
    text = codes[ID_COLUMN].astype(str)
    for n in names:
        text = text + "\x1f" + codes[n].astype(str)
    return pd.util.hash_array(text.to_numpy(dtype=object), hash_key=hash_key, categorize=False)


def _keep_k(part: pd.DataFrame, names: list[str], k: int, hash_key: str) -> pd.DataFrame:
    """Within one partition holding all rows of its ids: the k rows per id with the smallest hashes."""
    if part.empty:
        return part[names]
    h = row_hashes(part, names, hash_key)
    ordered = part.assign(_h=h).sort_values([ID_COLUMN, "_h"], kind="stable")
    keep = ordered.groupby(ID_COLUMN, sort=False).cumcount().to_numpy() < k
    return ordered.loc[keep, names].reset_index(drop=True)


def truncate_per_id(table: EncodedTable, max_rows: int, hash_key: str) -> EncodedTable:
    """At most ``max_rows`` rows per id (see the module docstring); the id column is dropped."""
    import logging

    # p2p shuffles log their start and end at WARNING on the scheduler; routine here, not a warning
    logging.getLogger("distributed.shuffle._scheduler_plugin").setLevel(logging.ERROR)
    names = list(table.schema.names)
    frame = table.frame.shuffle(on=ID_COLUMN)  # all rows of an id in one partition (out of core)
    kept = frame.map_partitions(_keep_k, names, int(max_rows), hash_key, meta=empty_codes(table.schema))
    return EncodedTable(kept, table.schema, table.source)


def hash_key_from(noise: Any) -> str:
    """A secret 16-character key for the row hashes, from the run's noise source (reproducible when the
    run is seeded, 95 bits of the OS CSPRNG otherwise; never written anywhere)."""
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
    draws = noise.generator("privacy_unit", "truncation").integers(0, alphabet.size, 16)
    return "".join(alphabet[draws])


__all__ = ["ID_COLUMN", "hash_key_from", "open_with_id", "row_hashes", "truncate_per_id"]
