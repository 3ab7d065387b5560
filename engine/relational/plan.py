"""``privcube plan`` of a relational job: what each part will measure, with what noise, on what budget.

Data-free: the tables' ResidualPlanner plans (all ``table_marginals``-way marginals, substitution
neighbours, as stage 1 runs them) and the links stage's schedule from public quantities (domains,
parameters, budget). The number of links m is public in the model but is not read here: a link
release's noise is stated per count cell, σ·m = d_max/√ρ_i (each link with its own d_max:
``privacy.links.<name>.d_max``, else the job's), which does not depend on m; with
``max_noise`` the number of measurements does, so it is given for the ``links`` count passed in
(``privcube plan --links M``) or stated as chosen at run time.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from privcube.core.errors import ConfigError
from privcube.mechanisms.base import PlanSummary
from privcube.relational.config import COMPOSITION_NOTE, RelationalJob
from privcube.relational.schema_graph import link_name
from privcube.relational.spec import LinkSpec


def _table_plan(name: str, job: RelationalJob, p: Mapping[str, Any]) -> PlanSummary:
    """The ResidualPlanner plan stage 1 runs for table ``name`` on its own budget."""
    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.core.workload import Workload

    domain = job.tables[name].domain
    k = min(int(p["table_marginals"]), len(domain))
    cliques = list(itertools.combinations(domain.attributes, k))
    return ResidualPlanner({"neighbours": "substitution"}).plan(Workload.marginals(domain, cliques), job.parts[name])


def _sibling_plan(link: LinkSpec, job: RelationalJob, p: Mapping[str, Any], rho_links: float) -> tuple[float, str | None]:
    """(ρ kept for it, what it does) of a foreign key's sibling step: when an earlier foreign key into the same
    parent table runs before it, its parents are made to overlap that link's as declared (``within``, no budget)
    or as the released count of parents with children in both says (``sibling_share`` of its budget; the upper
    end of ``auto`` without the public number of parents)."""
    from privcube.relational.stages.parameters import check_params
    from privcube.relational.stages.siblings import SIBLING_ERROR, sibling_rho, sibling_sensitivity

    if not job.multi or link.kind != "one_to_many" or p["degrees"] != "preserve":
        return 0.0, None
    earlier = [g for g in job.fks[:job.fks.index(link)] if g.kind == "one_to_many" and g.right == link.right]
    if not earlier:
        return 0.0, None
    if link.within:
        return 0.0, (f"declared within {link.within}: learned on the synthetic parents with children there (no "
                     "budget)")
    if p["sibling_share"] == 0:
        return 0.0, f"independent of {link_name(earlier[0])} (sibling_share 0)"
    anchor = link_name(earlier[0])
    d_a, d_l = int(check_params(job.link_params(anchor))["d_max"]), int(p["d_max"])
    delta = sibling_sensitivity(d_a, d_l)
    rho = sibling_rho(p["sibling_share"], d_a, d_l, rho_links, None)
    at = "; ".join(f"{n:,} parents: share {sibling_rho(p['sibling_share'], d_a, d_l, rho_links, n) / rho_links:.3g}, "
                   f"std {delta / math.sqrt(2 * sibling_rho(p['sibling_share'], d_a, d_l, rho_links, n)) / n:.3g}"
                   for n in PLAN_PARENTS)
    rule = (f"auto: the share that reads it with std {SIBLING_ERROR} of the parents, within 0.05 to 0.2"
            if p["sibling_share"] == "auto" else f"{float(p['sibling_share']):g}")
    return rho, (f"the parents with children in both {anchor} and this link, released (sensitivity d_max {d_a} + "
                 f"{d_l} = {delta:g}; sibling_share {rule}; rho at most {rho:.4g}); at {at}; this link's parents then "
                 "overlap the sibling's as released (whole child sets moved to the nearest codes)")


def _link_plan(link: LinkSpec, budget: Any, job: RelationalJob, p: Mapping[str, Any], links: int | None) -> dict[str, Any]:
    """The links stage's schedule for one link: candidates, measurements, ρ and count noise per release."""
    from privcube.relational.stages.selection import GAIN_MIN_LINKS_PER_DEGREE, links_schedule

    self_ref = link.left == link.right
    d_sens = 2 * int(p["d_max"]) if self_ref else int(p["d_max"])
    m = int(links) if links else 1
    dom1, dom2 = job.tables[link.left].domain, job.tables[link.right].domain
    rho_sib, sib_text = _sibling_plan(link, job, p, budget.rho)
    cand, sched, rho_deg = links_schedule(p, link.kind, self_ref, dom1, dom2, budget.rho, m, reserved=rho_sib)
    arrow = "<->" if link.kind == "many_to_many" else "->"
    out = {"link": f"{link.left}.{link.left_col} {arrow} {link.right}.{link.right_col}", "kind": link.kind,
           "rho": budget.rho, "rho_degrees": rho_deg, "candidates": len(cand), "alpha": sched.alpha,
           "em_epsilon": sched.eps_em, "d_max": int(p["d_max"]), "sensitivity_pairs": d_sens}
    if p["degrees"] == "preserve" and (p["degree_share"] == "auto" or float(p["degree_share"]) > 0):
        out["degree_release"] = _degree_plan(p, link.kind, self_ref, budget.rho)
    if sib_text:
        out["rho_siblings"] = rho_sib
        out["degree_release"] = (out.get("degree_release", "") + "; siblings: " + sib_text).lstrip("; ")
    if sched.first:  # the public measure-all test chose to measure the lowest-order candidates first
        stds = [d_sens / math.sqrt(r) for r in sched.first_rho if r > 0]
        out["measure_all"] = {"workloads": len(sched.first), "rho": float(sum(sched.first_rho)),
                              "count_noise_std": [min(stds), max(stds)] if stds else []}
    if links or p["max_noise"] is None:
        informative = sched.informative
        if not informative:  # as the run does: one measurement with the whole links budget, or random links
            sched, warning = _uninformative(sched, p)
            out.update({"em_epsilon": sched.eps_em, "warning": warning})
        cells = sorted(int(math.prod(w.sizes(dom1, dom2))) for w in cand)
        rho_each = sched.rho_measure(cells[len(cells) // 2]) if sched.n_sel and sched.T else 0.0  # median-sized
        # every release: measure-all's, then the draws (under max_noise a large workload costs more than one
        # unit, so fewer draws may fit: the count is an upper bound)
        out.update({"measurements": len(sched.first) + (sched.n_sel if sched.T else 0), "informative": informative,
                    "drawn": sched.n_sel if sched.T else 0,
                    "rho_per_measurement": rho_each, "score": sched.score,
                    "count_noise_std": d_sens / math.sqrt(rho_each) if rho_each > 0 else math.inf,
                    **({"links": int(links)} if links else {})})
    else:  # the count depends on m: bound it by the paper's equal split over the most measurements
        most = min(sched.T * sched.K, len(cand))
        rho_min = (1 - sched.alpha) * (budget.rho - rho_deg - rho_sib) / most if most else 0.0
        out.update({"measurements": f"at most {most}, chosen at run time from the public link count (max_noise "
                                    f"{p['max_noise']}); pass --links M to preview it",
                    "rho_per_measurement_min": rho_min,
                    "score": p["score"] if p["score"] != "auto" else
                    f"auto: gain from {math.ceil(GAIN_MIN_LINKS_PER_DEGREE * d_sens)} links (m / d_sens >= "
                    f"{GAIN_MIN_LINKS_PER_DEGREE:g}), aim below; pass --links M to preview it",
                    "count_noise_std_max": d_sens / math.sqrt(rho_min) if rho_min > 0 else math.inf})
    return out


#: parent counts at which the plan states a one-to-many degree release (the real count is public but not read)
PLAN_PARENTS = (1_000, 10_000, 100_000)


def _degree_plan(p: Mapping[str, Any], kind: str, self_ref: bool, rho_links: float) -> str:
    """What the degree release will do and how precisely: its share of the links budget and (one-to-many) the
    expected error of the share of parents with children it reads; both depend on the public table sizes,
    which a plan does not read, so they are stated at a few sizes, with the sizes from which each form is used."""
    from privcube.relational.stages.degree_histograms import BIN_NOISE, degree_sigma
    from privcube.relational.stages.selection import (
        DEGREE_ERROR,
        DEGREE_SHARE_RANGE,
        M2M_DEGREE_SHARE,
        degree_release,
        share_std,
    )

    d_max = int(p["d_max"])
    one = kind == "one_to_many"
    auto = p["degree_share"] == "auto"
    if one:
        at = []
        for n in PLAN_PARENTS:
            rho, bins = degree_release(p, kind, self_ref, rho_links, (n, n))
            std = share_std(d_max, rho, n, bins[1])
            at.append(f"{n:,} parents: share {rho / rho_links:.3g}, "
                      + (f"{bins[1]} bins" if bins[1] else "two values") + f", std {std:.3g} "
                      f"(mean |error| {math.sqrt(2 / math.pi) * std:.3g})")
        rule = (f"degree_share auto: the share of the links budget that reads the share of parents with children "
                f"with std {DEGREE_ERROR} (d_max / (sqrt(2 rho) N) for N parents), within "
                f"{DEGREE_SHARE_RANGE[0]:g} to {DEGREE_SHARE_RANGE[1]:g}; binned only when its zero bin reads that "
                "share as precisely" if auto else f"degree_share {float(p['degree_share']):g} of the links budget")
        return (f"the children-per-parent histogram ({rule}; taken from the measurements above): childless parents "
                "in a bin of their own and the rest in equal-width bins when the parents are many enough, else the "
                "count of parents without and with children (read together against the public number of "
                "parents); the expected error of the share of parents with children it reads, at "
                + "; ".join(at) + "; decided at run time from the public table sizes")
    rho = (M2M_DEGREE_SHARE if auto else float(p["degree_share"])) * rho_links
    sigma = degree_sigma(d_max, rho, self_ref)
    n_all = math.ceil(sigma * math.sqrt(d_max + 1) / BIN_NOISE)
    n_min = math.ceil(sigma * math.sqrt(2) / BIN_NOISE)
    return (f"each side's links-per-record histogram, sigma {sigma:.4g} per bin, rho {rho:.4g} (degree_share of "
            f"the links budget{f', {M2M_DEGREE_SHARE:g} under auto' if auto else ''}), for a table of at least "
            f"{n_min} rows (2 bins; d_max + 1 = {d_max + 1} bins from {n_all} rows); decided at run time from the "
            "public table sizes: when it is released, the measurements above share the rest of the links budget; "
            "when neither table is that large, nothing is spent on it")


def _uninformative(sched: Any, p: Mapping[str, Any]) -> tuple[Any, str]:
    """The schedule a run follows when even one measurement cannot meet ``max_noise`` (public sizes and budget
    say so), and the warning it gives: one selection and one measurement with the links budget, or
    (``uninformative: random``) the random links, nothing measured."""
    from privcube.relational.stages.selection import one_measurement

    msg = ("links budget too small for these table sizes and d_max: even one measurement of the smallest cross "
           "workload would be noisier than max_noise")
    if p["uninformative"] == "random":
        sched.T = 0
        return sched, msg + ("; the run releases the data-independent random links (nothing is measured; only the "
                             "degree release, if any, is charged)")
    return one_measurement(sched, p["shrinkage"]), msg + ("; the run makes one selection and one measurement with "
                                                          "the links budget (less the degree release, if any)")


def _count(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"plan: {what} must be a positive number of links, got {v!r}")
    return v


def _link_counts(links: int | Mapping[str, int] | None, names: list[str]) -> list[int | None]:
    """Each link's public link count: one number for every link, or one per link name (as under
    ``privacy.links``; a link not named is planned without its count)."""
    if links is None or not isinstance(links, Mapping):
        return [None if links is None else _count(links, "links")] * len(names)
    unknown = sorted(set(links) - set(names))
    if unknown:
        raise ConfigError(f"plan: links: unknown link(s) {unknown}; the links of this job are {names}")
    return [_count(links[n], f"links[{n!r}]") if n in links else None for n in names]


def plan_relational(job: RelationalJob, links: int | Mapping[str, int] | None = None) -> PlanSummary:
    """The data-free plan of a relational job (see the module docstring); post-processing is not planned."""
    from privcube.relational.stages.parameters import check_params

    p = check_params(job.params)
    tables = [n for n in job.tables if n not in job.public]
    plans = {n: _table_plan(n, job, p) for n in tables}
    groups = [{**g, "table": n} for n, pl in plans.items() for g in pl.groups]
    measurements = [{**m, "table": n} for n, pl in plans.items() for m in pl.measurements]
    fks = job.fks if job.multi else [job.links]
    link_budgets: Mapping[str, Any] = {link_name(f): job.parts[link_name(f)] for f in fks} if job.multi \
        else {"links": job.parts["links"]}
    counts = _link_counts(links, list(link_budgets) if job.multi else [link_name(job.links)])
    notes = job.bound_notes()
    link_plans = []
    for i, (name, b) in enumerate(link_budgets.items()):
        lp = _link_plan(fks[i], b, job, check_params(job.link_params(name)), counts[i])
        if name in notes:  # a bound the child's domain cannot reach: said beside the link's noise
            lp["warning"] = "; ".join(w for w in (lp.get("warning"), notes[name]) if w)
        link_plans.append(lp)
    squares = sum(g["rmse"] ** 2 * g["cells"] for g in groups)
    cells = sum(g["cells"] for g in groups)
    privacy = {**job.total.to_dict(), "composition": COMPOSITION_NOTE,
               "parts": {n: b.to_dict() for n, b in job.parts.items()},
               **({"public_tables": list(job.public)} if job.public else {})}
    return PlanSummary("relational", math.sqrt(squares / cells) if cells else 0.0, privacy, groups,
                       measurements + [{"link": lp["link"], **{k: v for k, v in lp.items() if k != "link"}}
                                       for lp in link_plans],
                       {"rmse_definition": "over the tables' marginal cells (stage 1); the links are not in it",
                        "tables": {n: {"rmse": pl.rmse, "marginals": len(pl.groups)} for n, pl in plans.items()},
                        "links": link_plans})


__all__ = ["plan_relational"]
