"""Small float64 arrays written as zarr v3 files directly: the same bytes zarr writes, without its per-array
machinery (metadata objects, dtype registry, one thread hop per file), which costs about 1 ms an array.

Only the simple case is taken: a local store, float64, every axis non-empty, one chunk holding the whole
array, and zarr's default codecs being ``bytes`` (little endian) then ``zstd``. The metadata document is
zarr's own (``ArrayV3Metadata.to_dict`` of a template built by zarr for the same dtype and rank, with the
shape, chunk shape, attributes and dimension names put in), dumped as zarr dumps it; the chunk is encoded by
numcodecs' Zstd with zarr's settings and, as zarr does with ``write_empty_chunks`` off, not written when
every value is +0.0 (the fill value, compared by bit pattern). ``tests/integration/test_store_direct.py`` checks every
file against zarr's own writes. Anything else goes through zarr (``fits``)."""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MAX_BYTES = 2**26  # TensorStore's one-chunk limit


def fits(array: np.ndarray, dims: Sequence[str] | None, local: bool) -> bool:
    """Whether ``array`` (with dimension names ``dims``) takes the direct path (see the module docstring)."""
    return (local and array.dtype == np.float64 and array.ndim >= 1 and all(array.shape)
            and array.size * 8 <= MAX_BYTES and _template(array.ndim, dims is not None) is not None)


@functools.lru_cache(maxsize=None)
def _template(ndim: int, named: bool) -> tuple[dict[str, Any], int, bool, int | None] | None:
    """zarr's metadata dict for a float64 array of rank ``ndim`` (with dimension names when ``named``), the
    zstd level and checksum, and the JSON indent; None when zarr's defaults are not bytes + zstd."""
    import zarr
    from zarr.core.config import config
    from zarr.storage import MemoryStore

    arr = zarr.create_array(store=MemoryStore(), shape=(1,) * ndim, chunks=(1,) * ndim, dtype="float64",
                            attributes={}, dimension_names=[f"d{i}" for i in range(ndim)] if named else None,
                            zarr_format=3)
    meta = arr.metadata.to_dict()
    codecs = meta.get("codecs")
    if (meta.get("fill_value") != 0.0 or meta.get("chunk_key_encoding") != {"name": "default", "configuration": {"separator": "/"}}
            or not isinstance(codecs, (list, tuple)) or len(codecs) != 2
            or codecs[0] != {"name": "bytes", "configuration": {"endian": "little"}} or codecs[1].get("name") != "zstd"
            or config.get("array.write_empty_chunks")):
        return None
    zstd = codecs[1]["configuration"]
    return meta, int(zstd["level"]), bool(zstd["checksum"]), config.get("json_indent")


def encode_array(array: np.ndarray, attrs: Mapping[str, Any] | None,
                 dims: Sequence[str] | None) -> list[tuple[str, bytes]]:
    """The files of ``array`` (``fits`` must hold) as a zarr v3 array folder: ``(relative path, bytes)``."""
    from numcodecs.zstd import Zstd

    named = dims is not None
    meta, level, checksum, indent = _template(array.ndim, named)  # type: ignore[misc]
    meta = {**meta, "chunk_grid": {**meta["chunk_grid"], "configuration": {}}}  # the parts changed are new
    shape = [int(n) for n in array.shape]
    meta["shape"] = shape
    meta["chunk_grid"]["configuration"]["chunk_shape"] = list(shape)
    meta["attributes"] = dict(attrs or {})
    if named:
        meta["dimension_names"] = list(dims)  # type: ignore[arg-type]
    files = [("zarr.json", json.dumps(meta, allow_nan=True, indent=indent).encode())]
    data = np.ascontiguousarray(array, dtype="<f8")
    if data.view(np.uint64).any():  # all +0.0 is the fill value: zarr writes no chunk
        files.append(("/".join(("c",) + ("0",) * array.ndim), Zstd(level=level, checksum=checksum).encode(data.tobytes())))
    return files


def write_arrays(folders: Sequence[tuple[str, list[tuple[str, bytes]]]], threads: int = 16) -> None:
    """Create each folder (it must not exist) with its files, on ``threads`` threads (file-system round
    trips dominate: a few hundred microseconds per create on a shared disk)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job: tuple[str, list[tuple[str, bytes]]]) -> None:
        folder, files = job
        os.mkdir(folder)
        for rel, data in files:
            path = os.path.join(folder, rel)
            if "/" in rel:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)

    if len(folders) <= 1:
        for job in folders:
            one(job)
        return
    with ThreadPoolExecutor(min(threads, len(folders))) as pool:
        for _ in pool.map(one, folders):  # re-raises the first failure
            pass


__all__ = ["encode_array", "fits", "write_arrays"]
