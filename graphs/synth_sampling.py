"""Chunked record generation as Dask graphs (a lazy DataFrame, a Parquet dataset written by the workers):
one task per chunk, same rows as the serial sampler. The run folder's records are written by
``privcube.synth.records.write_records`` through the run context's ``map``; this module only builds graphs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.privacy.noise import NoiseSource
from privcube.synth.estimator import SamplingModel
from privcube.synth.records import add_labels, chunk_bounds, sample_chunk
from privcube.synth.sampler import DEFAULT_CHUNK


def _chunk_frame(model: SamplingModel, n: int, noise: NoiseSource, key: tuple, chunk: int,
                 columns: list[str]) -> pd.DataFrame:
    """One chunk as a DataFrame of codes."""
    return pd.DataFrame(sample_chunk(model, n, noise, key, chunk), columns=columns)


def sample_records_dask(model: SamplingModel, domain: Domain, n_records: int, *, noise: NoiseSource,
                        key: tuple = ("synth",), chunk_size: int = DEFAULT_CHUNK) -> Any:
    """A lazy dask DataFrame with one partition per chunk; ``.compute()`` equals ``sample_records``."""
    import dask
    import dask.dataframe as dd

    cols = list(domain.attributes)
    meta = pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in cols})
    parts = [dask.delayed(_chunk_frame)(model, b - a, noise, key, c, cols)
             for c, (a, b) in enumerate(chunk_bounds(int(n_records), int(chunk_size)))]
    if not parts:
        return dd.from_pandas(meta, npartitions=1)
    return dd.from_delayed(parts, meta=meta)


def sample_records_parallel(model: SamplingModel, domain: Domain, n_records: int, *, noise: NoiseSource,
                            key: tuple = ("synth",), chunk_size: int = DEFAULT_CHUNK, client: Any = None) -> pd.DataFrame:
    """Generate all chunks in parallel (on ``client`` or the threaded scheduler) and concatenate in order."""
    ddf = sample_records_dask(model, domain, n_records, noise=noise, key=key, chunk_size=chunk_size)
    out = client.compute(ddf).result() if client is not None else ddf.compute(scheduler="threads")
    return out.reset_index(drop=True)


def _labelled_chunk(model: SamplingModel, n: int, noise: NoiseSource, key: tuple, chunk: int, columns: list[str],
                    schema: Any) -> pd.DataFrame:
    """One chunk of codes plus its decoded label columns."""
    return add_labels(_chunk_frame(model, n, noise, key, chunk, columns), schema)


def write_records_parquet(model: SamplingModel, domain: Domain, n_records: int, path: str | Path, *,
                          noise: NoiseSource, schema: Any = None, key: tuple = ("synth",),
                          chunk_size: int = DEFAULT_CHUNK, client: Any = None) -> Path:
    """Generate ``n_records`` in parallel chunks and write them as a Parquet dataset (one file per chunk).

    Each task samples its chunk and decodes the schema's labels (``<attr>_label``: categories, bin ranges)
    next to the codes, so no chunk passes through the driver. Rows equal ``sample_records`` in order.
    Runs on ``client`` when given, else on the threaded scheduler; returns the folder written.
    """
    import dask
    import dask.dataframe as dd

    cols = list(domain.attributes)
    # dtypes as the chunks will have them (label columns: whatever pandas makes of decoded text)
    meta = add_labels(pd.DataFrame({c: np.zeros(1, dtype=np.int64) for c in cols}), schema).iloc[:0]
    bounds = chunk_bounds(int(n_records), int(chunk_size)) or [(0, 0)]
    parts = [dask.delayed(_labelled_chunk)(model, b - a, noise, key, c, cols, schema)
             for c, (a, b) in enumerate(bounds)]
    ddf = dd.from_delayed(parts, meta=meta)
    out = Path(path)
    job = ddf.to_parquet(str(out), write_index=False, compute=False, name_function=lambda i: f"part-{i:05d}.parquet")
    if client is not None:
        client.compute(job).result()
    else:
        job.compute(scheduler="threads")
    return out


__all__ = ["sample_records_dask", "sample_records_parallel", "write_records_parquet"]
