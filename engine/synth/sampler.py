"""Chunked record sampling and the ``synthesize`` entry point (post-processing only; spends no budget).

Chunk c of a run draws from ``noise.generator(*key, "chunk", c)``, so the output is a pure function of
(noise seed, key, n_records, chunk_size): the same on one process or on many Dask workers.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from privcube.domain import Domain
from privcube.errors import ConfigError, DataError
from privcube.privacy.noise import NoiseSource
from privcube.synth.consistency import project
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
               variances: Mapping[Clique, float] | None = None, total: float | None = None,
               client: Any = None) -> pd.DataFrame:
    """Synthetic records (DataFrame of codes) whose low-order marginals follow the given estimates.

    ``marginal_estimates`` maps cliques to (noisy) counts; ``estimator`` defaults to the consistency +
    Chow–Liu tree model. Randomness comes from ``noise`` (or a NoiseSource built from ``seed``). With a
    dask ``client`` the chunks are generated as parallel tasks on the cluster (same rows as serially).
    """
    if noise is None:
        noise = NoiseSource(seed)
    est = get_estimator(estimator)
    model = est.fit(marginal_estimates, domain, total=total, variances=variances)
    if client is not None:
        from privcube.graphs.synth_sampling import sample_records_parallel

        n_records = _check_int(n_records, "n_records", 0)
        chunk_size = _check_int(chunk_size, "chunk_size", 1)
        return sample_records_parallel(model, domain, n_records, noise=noise, key=key, chunk_size=chunk_size,
                                       client=client)
    return sample_records(model, domain, n_records, noise=noise, key=key, chunk_size=chunk_size)


def marginals_from_answers(answers: Sequence[Any], domain: Domain) -> tuple[dict[Clique, np.ndarray], dict[Clique, float]]:
    """(clique -> counts, clique -> per-cell variance) from a mechanism's answers: the ``published``
    (non-negative, consistent) estimate where the run has one, else the raw noisy ``estimate``.

    Takes the marginal groups (identity queries on every attribute) of any ``MechanismResult.answers``
    (ResidualPlanner, AIM+GReM, HDMM, …); other query groups (prefix, ranges, …) are skipped. Reading
    released answers is post-processing: nothing is charged.
    """
    est: dict[Clique, np.ndarray] = {}
    var: dict[Clique, float] = {}
    for a in answers:
        g = a.group
        if not getattr(g, "is_marginal", False) or not g.attributes:
            continue
        c = tuple(g.attributes)
        pub = getattr(a, "published", None)
        arr = np.asarray(a.estimate if pub is None else pub, dtype=float)
        if arr.size != domain.size(c):
            raise DataError(f"answers for {list(c)} have {arr.size} cells; the domain needs {domain.size(c)}")
        est[c] = arr.reshape(domain.shape_of(c))
        v = None if a.variance is None else np.asarray(a.variance, dtype=float)
        if v is not None and v.size and np.all(np.isfinite(v)):
            var[c] = float(np.mean(v))
    if not est:
        raise DataError("no marginal answers to synthesize from: the workload needs at least one marginal group "
                        "(identity queries), e.g. {kway: 2}")
    return est, var


def measured_marginals(answers: Sequence[Any], domain: Domain, cliques: Sequence[Sequence[str]]
                       ) -> tuple[dict[Clique, np.ndarray], dict[Clique, float]]:
    """Only the marginals an adaptive mechanism measured (its selection trace), plus every 1-way margin:
    each one projected from an answer that contains it (all answers of such a run come from the same
    residuals, so any holder gives the same estimate). Keeps the answers that only fill in unmeasured
    structure out of the model. Post-processing: nothing is charged."""
    est, var = marginals_from_answers(answers, domain)
    wanted = {domain.canonical(tuple(c)) for c in cliques if c} | {(a,) for c in est for a in c}
    out: dict[Clique, np.ndarray] = {}
    out_var: dict[Clique, float] = {}
    for w in sorted(wanted, key=len, reverse=True):
        if any(set(w) < set(o) for o in out):
            continue
        holder = next((c for c in sorted(est, key=len) if set(w) <= set(c)), None)
        if holder is None:
            continue
        cc = domain.canonical(holder)
        arr = np.transpose(est[holder], [holder.index(x) for x in cc]) if holder != cc else est[holder]
        out[w] = project(arr, cc, w)
        if holder in var:
            out_var[w] = var[holder] * domain.size(holder) / max(domain.size(w), 1)
    return out, out_var


def synthesize_from_answers(answers: Sequence[Any], domain: Domain, n_records: int, *, noise: NoiseSource | None = None,
                            seed: int | None = None, key: tuple = ("synth",), chunk_size: int = DEFAULT_CHUNK,
                            estimator: MarginalEstimator | str | None = None, total: float | None = None,
                            client: Any = None) -> pd.DataFrame:
    """Synthetic records from the answers of a finished run (e.g. ``MechanismResult.answers`` of
    ``residual-planner`` or ``aim-grem``): marginal groups → estimator → chunked sampling. Spends no budget."""
    est, var = marginals_from_answers(answers, domain)
    return synthesize(est, domain, n_records, noise=noise, seed=seed, key=key, chunk_size=chunk_size,
                      estimator=estimator, variances=var or None, total=total, client=client)


def add_labels(frame: pd.DataFrame, schema: Any) -> pd.DataFrame:
    """``frame`` plus a decoded ``<attr>_label`` column per schema attribute that has labels (categories, bin
    ranges, dates, named integer codes; plain integer codes get none)."""
    if schema is None:
        return frame
    out = frame.copy()
    for a in schema:
        if a.name not in out.columns or (a.kind == "integer" and a.labels_ is None):
            continue
        labels = np.asarray(a.labels(), dtype=object)
        codes = out[a.name].to_numpy()
        if codes.size and (codes.min() < 0 or codes.max() >= labels.size):
            raise DataError(f"column {a.name!r}: code outside [0, {labels.size}) cannot be decoded")
        out[f"{a.name}_label"] = labels[codes]
    return out


__all__ = ["synthesize", "synthesize_from_answers", "marginals_from_answers", "measured_marginals", "add_labels", "sample_records",
           "sample_chunk", "chunk_bounds", "DEFAULT_CHUNK"]
