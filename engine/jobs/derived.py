"""What a single-table run derives from its noisy answers while the cluster is up: ``published`` answers
(non-negative, consistent) and synthetic records. Post-processing only: nothing is charged."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

POSTPROCESS_TASK_CELLS = 20_000_000  # below this, reconstruction runs in process (seconds)


def postprocess(cfg: Any, mech: Any, result: Any, context: Any = None) -> dict[str, Any] | None:
    """Set ``published`` on every marginal answer (``postprocess``; None when off or no marginal group).
    Each cell counts with its marginal's variance (measured better than ResidualPlanner's per-residual σ²
    metric on adult15 and nltcs: benchmarks/postprocess_candidates.py); above POSTPROCESS_TASK_CELLS cells
    the per-clique chunks run as tasks of the run context's ``map`` (on the cluster when there is one).
    Post-processing: no charge."""
    from privcube.postprocess import marginal_answers, publish_model
    from privcube.postprocess.consistency import serial_map

    groups = marginal_answers(result.answers)
    if cfg.postprocess is None or not groups:
        return None
    mapper: Any = serial_map
    if context is not None and context.client is not None \
            and sum(np.size(a.estimate) for a in groups) > POSTPROCESS_TASK_CELLS:
        mapper = functools.partial(context.map, label="postprocess")
    report, model = publish_model(result.answers, cfg.domain, cfg.postprocess, map=mapper,
                                  residuals=getattr(result, "residuals", None) or None)
    if model is not None:
        result.model = model  # the synthesizer samples the same model (post-processing: no charge)
    return report


def write_records(cfg: Any, result: Any, rundir: Any, noise: Any, context: Any,
                  keep_existing: bool = False) -> dict[str, Any]:
    """``synthesize``: fit the estimator to the run's noisy marginal answers and write the sampled records
    to ``synthetic/records/`` (Parquet, one file per chunk, codes plus schema labels), chunks sampled in
    through the run context's ``map`` (on the cluster when there is one). Post-processing only: nothing is charged. Written into a
    hidden folder and renamed into place (``RunDirectory.write_folder``), so a folder that exists is
    complete (kept on resume)."""
    from privcube.core.context import local_map
    from privcube.synth.estimator import get_estimator
    from privcube.synth.records import write_records as write_record_chunks
    from privcube.synth.sampler import marginals_from_answers, measured_marginals

    spec = cfg.synthesize or {}
    trace = (result.report or {}).get("trace")
    if trace:  # adaptive run: the measured marginals (its public selection trace) and the 1-way margins
        est, var = measured_marginals(result.answers, cfg.domain, [r.get("clique") or [] for r in trace])
    else:
        est, var = marginals_from_answers(result.answers, cfg.domain)
    total = float(np.mean([float(np.sum(m)) for m in est.values()]))  # noisy N: each marginal sums to it
    rows = max(0, int(round(total))) if spec["rows"] == "auto" else int(spec["rows"])
    name = "synthetic/records"
    info = {"path": name, "rows": rows, "estimator": spec["estimator"],
            "from_marginals": sorted("-".join(c) for c in est)}
    if keep_existing and rundir.has(name):
        info["files"] = len(list((rundir.path / name).glob("*.parquet")))
        return info
    fitted = getattr(result, "model", None)
    if fitted is not None and spec["estimator"] == "junction-tree":  # the published answers' own model
        from privcube.synth.jt_model import JunctionTreeModel

        model = JunctionTreeModel.from_beliefs(cfg.domain, fitted.tree, fitted.beliefs)
        names = cfg.domain.attributes
        info.update({"model": {"estimator": "junction-tree", "input": "the post-processing model (pgm)",
                               "cells": int(fitted.tree.cells),
                               "cliques": [[names[i] for i in c] for c in fitted.tree.cliques]},
                     "from_marginals": sorted("-".join(names[i] for i in c) for c in fitted.tree.cliques),
                     "budget_spent": 0.0})
    else:
        options = {"max_cells": spec["max_cells"]} if spec["estimator"] == "junction-tree" else {}
        estimator = get_estimator(spec["estimator"], **options)
        model = estimator.fit(est, cfg.domain, total=max(total, 1.0), variances=var or None)
        info.update({"model": getattr(estimator, "info", {}), "budget_spent": 0.0})

    def sample(staging: Path) -> int:
        return write_record_chunks(model, cfg.domain, rows, staging, noise=noise, schema=cfg.schema,
                                   key=("synthesize", "records"), chunk_size=spec["chunk_size"],
                                   map=context.map if context is not None else local_map)

    info["files"] = rundir.write_folder(name, sample)
    return info


__all__ = ["POSTPROCESS_TASK_CELLS", "postprocess", "write_records"]
