"""Chunked record sampling and the ``synthesize`` entry point (post-processing only; spends no budget).

Chunk c of a run draws from ``noise.generator(*key, "chunk", c)``, so the output is a pure function of
(noise seed, key, n_records, chunk_size): the same on one process or on many Dask workers. Chunks run
through a run context's ``map`` (privcube.synth.records); this module imports nothing of privcube.graphs.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, DataError
from privcube.privacy.noise import NoiseSource
from privcube.synth.consistency import project
from privcube.synth.estimator import MarginalEstimator, SamplingModel, get_estimator
from privcube.synth.records import Map, add_labels, chunk_bounds, sample_chunk, sample_codes

Clique = tuple[str, ...]

DEFAULT_CHUNK = 1_000_000


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise ConfigError(f"synth: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def sample_records(model: SamplingModel, domain: Domain, n_records: int, *, noise: NoiseSource,
                   key: tuple = ("synth",), chunk_size: int = DEFAULT_CHUNK, map: Map | None = None,  # noqa: A002
                   local_rows: int | None = None) -> pd.DataFrame:
    """``n_records`` rows of codes (columns = domain attributes), drawn chunk by chunk: in this process, or
    through ``map`` (a run context's, e.g. tasks on the cluster) for more than ``local_rows`` records
    (default ``records.LOCAL_ROWS``: below it the tasks cost more than they save)."""
    n_records = _check_int(n_records, "n_records", 0)
    chunk_size = _check_int(chunk_size, "chunk_size", 1)
    arr = sample_codes(model, domain, n_records, noise=noise, key=key, chunk_size=chunk_size, map=map,
                       local_rows=local_rows)
    return pd.DataFrame(arr, columns=list(domain.attributes))


def synthesize(marginal_estimates: Mapping[Clique, np.ndarray], domain: Domain, n_records: int, *,
               seed: int | None = None, noise: NoiseSource | None = None, key: tuple = ("synth",),
               chunk_size: int = DEFAULT_CHUNK, estimator: MarginalEstimator | str | None = None,
               variances: Mapping[Clique, float] | None = None, total: float | None = None,
               map: Map | None = None, local_rows: int | None = None) -> pd.DataFrame:  # noqa: A002
    """Synthetic records (DataFrame of codes) whose low-order marginals follow the given estimates.

    ``marginal_estimates`` maps cliques to (noisy) counts; ``estimator`` defaults to the junction-tree
    model. Randomness comes from ``noise`` (or a NoiseSource built from ``seed``). Chunks run through
    ``map`` (a run context's: tasks on the cluster) for more than ``local_rows`` records (default
    ``records.LOCAL_ROWS``; 0: every chunk through ``map``); the rows are the same either way.
    """
    if noise is None:
        noise = NoiseSource(seed)
    est = get_estimator(estimator)
    model = est.fit(marginal_estimates, domain, total=total, variances=variances)
    return sample_records(model, domain, n_records, noise=noise, key=key, chunk_size=chunk_size, map=map,
                          local_rows=local_rows)


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
    pos = {a: i for i, a in enumerate(domain.attributes)}  # a fixed order (not the set's, which varies by process)
    for w in sorted(wanted, key=lambda w: (-len(w), [pos[x] for x in w])):
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
                            map: Map | None = None, local_rows: int | None = None) -> pd.DataFrame:  # noqa: A002
    """Synthetic records from the answers of a finished run (e.g. ``MechanismResult.answers`` of
    ``residual-planner`` or ``aim-grem``): marginal groups → estimator → chunked sampling. Spends no budget."""
    est, var = marginals_from_answers(answers, domain)
    return synthesize(est, domain, n_records, noise=noise, seed=seed, key=key, chunk_size=chunk_size,
                      estimator=estimator, variances=var or None, total=total, map=map, local_rows=local_rows)


__all__ = ["synthesize", "synthesize_from_answers", "marginals_from_answers", "measured_marginals", "add_labels", "sample_records",
           "sample_chunk", "chunk_bounds", "DEFAULT_CHUNK"]
