"""What a relational run writes besides its tables: ``report.json`` and the link files.

``report.json`` labels what is differentially private and what is not: ``dp_error_measured_workloads``
(the synthetic links against the noisy releases; post-processing of DP outputs) and, only with
``evaluate_nonprivate: true``, ``nonprivate_evaluation`` (against the real data, NOT private, labelled so).
``warnings`` collects what the user must know before releasing (a schema inferred from the data, an
uninformative links budget). The link files hold (child key, parent key) pairs, the same links as the
children's foreign-key columns: ``synthetic/links.parquet`` for the two-table forms and
``synthetic/links/<name>.parquet`` per link of a schema graph (``<child>.<fk>`` for a foreign key,
``<left>.<key>-<right>.<key>`` for a link table). Nothing here reads private data.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from privcube.relational.config import RelationalJob

PRIVACY_NOTE = ("everything here is differentially private or public under the paper's bounded-DP model "
                "(table sizes n1, n2 and the link count m); 'nonprivate_evaluation' appears only with "
                "evaluate_nonprivate: true and is NOT private")
DP_LABEL = ("DIFFERENTIALLY PRIVATE: error of the synthetic links on the measured cross-table workloads, against "
            "the noisy releases (post-processing of DP outputs; no budget spent)")
NONPRIVATE_LABEL = ("NON-PRIVATE: computed from the real data because evaluate_nonprivate is true; NOT "
                    "differentially private, do not publish")
LINKS_FOLDER = "links"


def link_file_name(name: str) -> str:
    """The synthetic output name of a schema graph's link ``name`` (its ``privacy.links`` key):
    ``synthetic/links/<child>.<fk>.parquet`` for a foreign key, ``links/<left>.<key>-<right>.<key>`` for a
    link table."""
    return f"{LINKS_FOLDER}/{name}"


def graph_link_frames(job: RelationalJob, res: Any) -> dict[str, pd.DataFrame]:
    """Per link of a schema graph, its pairs: a foreign key's (``<child>.<key>``, ``<parent>.<key>``) read off
    the synthetic child's key and FK columns (so they agree with them by construction); a link table's
    (``<left>.<key>``, ``<right>.<key>``) synthetic pairs. Sorted by the first column, then the second."""
    from privcube.relational.schema_graph import link_name

    out = {}
    for f in job.fks:
        name = link_name(f)
        lcol, rcol = f"{f.left}.{job.keys[f.left]}", f"{f.right}.{job.keys[f.right]}"
        if f.kind == "one_to_many":
            child = res.tables[f.left]
            pairs = pd.DataFrame({lcol: child[job.keys[f.left]].to_numpy(np.int64),
                                  rcol: child[f.left_col].to_numpy(np.int64)})
        else:
            ids = np.asarray(res.pairs[name], dtype=np.int64).reshape(-1, 2)
            pairs = pd.DataFrame({lcol: ids[:, 0], rcol: ids[:, 1]})
        out[link_file_name(name)] = pairs.sort_values([lcol, rcol], ignore_index=True)
    return out


TRUNCATE_WARNING = (
    "truncate: true: each record's links beyond d_max were dropped (first come) before anything was measured; "
    "the DP guarantee covers the truncated data (as in the paper), and the number of links kept, published as "
    "the link count (and, for a two-table foreign key, as the synthetic child rows), depends on the private "
    "degrees: to publish only the input's sizes, take d_max from a public bound the data meets and truncate: false")


def schema_warnings(job: RelationalJob) -> list[str]:
    """One warning per table whose schema carries ``inferred_from_data: true``, and one when ``truncate: true``
    (stated whether or not anything was dropped: the warning itself must not depend on the private degrees)."""
    from privcube.privacy.budget import budget_warnings
    from privcube.relational.schema_graph import link_name
    from privcube.storage.schema import inferred_warnings

    out = inferred_warnings({n: t.schema for n, t in job.tables.items()})
    for name, part in (getattr(job, "parts", None) or {}).items():  # a large delta of any part (public rule)
        out += budget_warnings(part, f"privacy {name}")
    names = [link_name(f) for f in job.fks] if job.multi else ["links"]
    truncating = [n for n in names if job.link_params(n).get("truncate")]
    if truncating and job.multi and len(truncating) < len(names):
        out.append(f"link(s) {truncating}: " + TRUNCATE_WARNING)
    elif truncating:
        out.append(TRUNCATE_WARNING)
    return out + bound_warnings(job)


def bound_warnings(job: RelationalJob) -> list[str]:
    """One warning per foreign key whose d_max exceeds the distinct rows its child's domain holds
    (``RelationalJob.bound_notes``: public, from the schemas and the config)."""
    return list(job.bound_notes().values())


def dp_error(fit: Any) -> dict[str, Any] | None:
    """The mechanism's DP fit report (``dp_cross_error``) under its DP label."""
    return {"label": DP_LABEL, **fit} if isinstance(fit, Mapping) else None


def two_table_report(job: RelationalJob, res: Any, noise: Any) -> dict[str, Any]:
    """``report.json`` of the two-table (or self-referential) forms, without timings."""
    mech_report = dict(res.report)
    ev = mech_report.pop("nonprivate_evaluation", None)
    lk = job.links
    warnings = schema_warnings(job) + [str(w) for w in mech_report.get("warnings") or []]
    report: dict[str, Any] = {
        "mechanism": "relational",
        "kind": lk.kind,
        "privacy_note": PRIVACY_NOTE,
        **({"warnings": warnings} if warnings else {}),
        "dp_error_measured_workloads": dp_error(mech_report.get("dp_cross_error")),
        "cross_table_error": mech_report.get("dp_cross_error"),  # the earlier name, kept
        "sizes": {"rows_synthetic": {n: int(len(f)) for n, f in res.tables.items()},
                  "links_synthetic": int(len(res.links))},
        "outputs": {"links": "synthetic/links.parquet"},
        "noise": noise.to_dict(),
        "mechanism_report": mech_report,
    }
    if lk.left == lk.right:
        report["self_referential"] = mech_report.get("self_referential")
    if isinstance(ev, Mapping):
        report["nonprivate_evaluation"] = {"label": NONPRIVATE_LABEL, **ev}
    return report


def graph_report(job: RelationalJob, res: Any, ledger_dict: Mapping[str, Any], noise: Any) -> dict[str, Any]:
    """``report.json`` of a schema graph: per table and per link (budget, ρ spent, DP error, link file)."""
    parts = ledger_dict["composition"]["parts"]
    links, warnings, evaluation = [], schema_warnings(job), {}
    for lk in res.links:
        rep = dict(lk.get("mechanism_report") or {})
        ev = rep.pop("nonprivate_evaluation", None)
        if isinstance(ev, Mapping):
            evaluation[lk["from"]] = dict(ev)
        warnings += [f"link {lk['from']}: {w}" for w in rep.get("warnings") or []]
        ends = {k: lk[k] for k in ("from", "to", "left", "right") if k in lk}
        links.append({**ends, "kind": lk.get("kind", "one_to_many"), "budget": lk["budget"],
                      "spent": parts[lk["from"]]["spent"], "file": f"synthetic/{link_file_name(lk['from'])}.parquet",
                      "dp_error_measured_workloads": dp_error(lk.get("dp_cross_error")), "mechanism_report": rep})
    report: dict[str, Any] = {
        "mechanism": "relational",
        "kind": "schema_graph",
        "privacy_note": PRIVACY_NOTE,
        **({"warnings": warnings} if warnings else {}),
        "tables": {n: {"rows_synthetic": int(len(f)), "key": job.keys[n],
                       **({"public": True, "note": "released as given (privacy.tables: public): the real rows' "
                           "codes in a random order (sorted by codes, then shuffled by the run's noise source) with "
                           "keys 0..n-1 in that order, so neither a row's position nor its key tells which input "
                           "row it was; no budget spent"} if n in res.public else
                          {"budget": job.parts[n].to_dict(), "spent": parts[n]["spent"]})}
                   for n, f in res.tables.items()},
        "links": links,
        "sizes": {"rows_synthetic": {n: int(len(f)) for n, f in res.tables.items()},
                  "links_synthetic": {lk["from"]: _link_count(lk, res) for lk in links}},
        "dp_error_measured_workloads": {lk["from"]: lk["dp_error_measured_workloads"] for lk in links},
        "cross_table_error": {lk["from"]: lk.get("dp_cross_error") for lk in res.links},  # the earlier name, kept
        "public_tables": list(res.public),
        "noise": noise.to_dict(),
    }
    if evaluation:
        report["nonprivate_evaluation"] = {"label": NONPRIVATE_LABEL, **evaluation}
    return report


def _link_count(lk: Mapping[str, Any], res: Any) -> int:
    """Synthetic links of one link of a graph: a link table's pairs, else one per child row."""
    if lk["from"] in getattr(res, "pairs", {}):
        return int(len(res.pairs[lk["from"]]))
    return int(len(res.tables[lk["from"].split(".")[0]]))


__all__ = ["DP_LABEL", "bound_warnings", "LINKS_FOLDER", "NONPRIVATE_LABEL", "PRIVACY_NOTE", "dp_error", "graph_link_frames",
           "graph_report", "link_file_name", "schema_warnings", "two_table_report"]
