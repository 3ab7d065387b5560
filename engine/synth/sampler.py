"""Chunked record sampling and the ``synthesize`` entry point (post-processing only; spends no budget).

Chunk c of a run draws from ``noise.generator(*key, "chunk", c)``, so the output is a pure function of
(noise seed, key, n_records, chunk_size): the same on one process or on many Dask workers.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from privcube.domain import Domain
from privcube.errors import ConfigError
from privcube.privacy.noise import NoiseSource
from privcube.synth.estimator import MarginalEstimator, SamplingModel, get_estimator

Clique = tuple[str, ...]

DEFAULT_CHUNK = 1_000_000


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise ConfigError(f"synth: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def chunk_bounds(n_records: int, chunk_size: int) -> list[tuple[int, int]]:
    """[start, stop) of each chunk."""
    return [(s, min(s + chunk_size, n_records)) for s in range(0, n_records, chunk_size)]


def sample_chunk(model: SamplingModel, n: int, noise: NoiseSource, key: tuple, chunk: int) -> np.ndarray:
    """One chunk of ``n`` records from the stream (*key, 'chunk', chunk)."""
    return np.asarray(model.sample(n, noise.generator(*key, "chunk", chunk)), dtype=np.int64)


def sample_records(model: SamplingModel, domain: Domain, n_records: int, *, noise: NoiseSource,
                   key: tuple = ("synth",), chunk_size: int = DEFAULT_CHUNK) -> pd.DataFrame:
    """``n_records`` rows of codes (columns = domain attributes), drawn chunk by chunk in this process."""
    n_records = _check_int(n_records, "n_records", 0)
    chunk_size = _check_int(chunk_size, "chunk_size", 1)
    parts = [sample_chunk(model, b - a, noise, key, c) for c, (a, b) in enumerate(chunk_bounds(n_records, chunk_size))]
    arr = np.vstack(parts) if parts else np.zeros((0, len(domain)), dtype=np.int64)
    return pd.DataFrame(arr, columns=list(domain.attributes))


def synthesize(marginal_estimates: Mapping[Clique, np.ndarray], domain: Domain, n_records: int, *,
               seed: int | None = None, noise: NoiseSource | None = None, key: tuple = ("synth",),
               chunk_size: int = DEFAULT_CHUNK, estimator: MarginalEstimator | str | None = None,
               variances: Mapping[Clique, float] | None = None, total: float | None = None) -> pd.DataFrame:
    """Synthetic records (DataFrame of codes) whose low-order marginals follow the given estimates.

    ``marginal_estimates`` maps cliques to (noisy) counts; ``estimator`` defaults to the consistency +
    Chow–Liu tree model. Randomness comes from ``noise`` (or a NoiseSource built from ``seed``).
    """
    if noise is None:
        noise = NoiseSource(seed)
    est = get_estimator(estimator)
    model = est.fit(marginal_estimates, domain, total=total, variances=variances)
    return sample_records(model, domain, n_records, noise=noise, key=key, chunk_size=chunk_size)


__all__ = ["synthesize", "sample_records", "sample_chunk", "chunk_bounds", "DEFAULT_CHUNK"]
