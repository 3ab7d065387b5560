"""Stage 1: each table synthesized on its own budget (ResidualPlanner on all k-way marginals, then the
single-table synthesizer), unless a DP synthetic table is supplied (which then spends nothing here)."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import CheckpointError
from privcube.core.context import RunContext, local_map
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.noise import NoiseSource
from privcube.relational.stages.composition import PrefixLedger, PrefixNoise
from privcube.relational.stages.resolved_links import table_codes


def synth_table(name: str, oracle: Any, n_real: int, domain: Domain, n_syn: int, budget: PrivacyBudget, ledger: Any,
                noise: NoiseSource, params: Mapping[str, Any], context: RunContext | None = None) -> np.ndarray:
    """ResidualPlanner on all k-way marginals (k = table_marginals) measured through ``oracle`` (the run's
    marginal engine over the table, as in a single-table job), then the single-table synthesizer (records in
    chunks through the context's ``map``: tasks on the cluster when there is one; the same rows either way).
    ``n_real`` is the table's public size."""
    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.synth.sampler import synthesize_from_answers
    from privcube.core.workload import Workload

    k = min(int(params["table_marginals"]), len(domain))
    cliques = list(itertools.combinations(domain.attributes, k))
    # the paper's adjacency changes one row's values (bounded DP): tables are accounted for substitution
    res = ResidualPlanner({"neighbours": "substitution"}).run(
        oracle, Workload.marginals(domain, cliques), budget,
        PrefixLedger(ledger, f"table:{name}"), PrefixNoise(noise, ("relational", "table", name)), context)
    cluster = context is not None and context.map is not local_map  # chunks are tasks wherever there are workers
    df = synthesize_from_answers(res.answers, domain, n_syn, noise=noise, key=("relational", "synth", name),
                                 chunk_size=int(params["chunk_size"]), estimator=params["estimator"],
                                 total=float(n_real), map=context.map if context is not None else None,
                                 local_rows=0 if cluster else None)
    return df[list(domain.attributes)].to_numpy().astype(np.int64)


def restore_tables(state: Mapping[str, Any] | None, need: list[str], tables: Mapping[str, tuple[Any, Domain]],
                   n_syn: Mapping[str, int]) -> dict[str, np.ndarray]:
    """The synthetic tables a checkpoint already holds (checked against this run's tables and sizes)."""
    out: dict[str, np.ndarray] = {}
    if state is None:
        return out
    for n in state["meta"].get("tables_done", []):
        if n not in need:
            raise CheckpointError(f"relational checkpoint holds table {n!r}, which this run does not synthesize")
        arr = np.asarray(state["arrays"][f"syn.{n}"], dtype=np.int64)
        out[n] = table_codes(arr, tables[n][1], f"checkpointed synthetic {n}")
        if out[n].shape[0] != n_syn[n]:
            raise CheckpointError(f"relational checkpoint: table {n!r} has {arr.shape[0]} rows, expected {n_syn[n]}")
    return out


def synthesize_tables(need: list[str], done: dict[str, np.ndarray], real: Mapping[str, tuple[Any, int, Domain]],
                      n_syn: Mapping[str, int], budgets: Mapping[str, PrivacyBudget], ledger: Any, noise: NoiseSource,
                      params: Mapping[str, Any], context: RunContext | None, save: Callable[[int, dict, dict], None],
                      progress: Callable[[str, float], None] | None) -> dict[str, np.ndarray]:
    """Synthesize every table in ``need`` not already in ``done`` (in order; committed after each).

    ``done`` is filled in place (the checkpoint's ``save`` reads it); ``real`` maps name → (a callable giving
    the table's marginal oracle, its public size, its domain).
    """
    for s, name in enumerate(need):
        if name in done:
            continue
        oracle, n_real, dom = real[name]
        done[name] = synth_table(name, oracle(), n_real, dom, n_syn[name], budgets[name], ledger, noise, params,
                                 context)
        save(s, {"stage": "tables"}, {})
        if progress is not None:
            progress(f"synthesize table {name}", 1.0)
    return done


__all__ = ["synth_table", "restore_tables", "synthesize_tables"]
