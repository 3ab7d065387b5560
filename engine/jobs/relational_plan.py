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

from privcube.errors import ConfigError
from privcube.mechanisms.base import PlanSummary
from privcube.relational_config import COMPOSITION_NOTE, RelationalJob
from privcube.relational_graph import link_name
from privcube.relational_spec import LinkSpec


def _table_plan(name: str, job: RelationalJob, p: Mapping[str, Any]) -> PlanSummary:
    """The ResidualPlanner plan stage 1 runs for table ``name`` on its own budget."""
    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.workload import Workload

    domain = job.tables[name].domain
    k = min(int(p["table_marginals"]), len(domain))
    cliques = list(itertools.combinations(domain.attributes, k))
    return ResidualPlanner({"neighbours": "substitution"}).plan(Workload.marginals(domain, cliques), job.parts[name])


def _link_plan(link: LinkSpec, budget: Any, job: RelationalJob, p: Mapping[str, Any], links: int | None) -> dict[str, Any]:
    """The links stage's schedule for one link: candidates, measurements, ρ and count noise per release."""
    from privcube.mechanisms.relational.selection import GAIN_MIN_LINKS_PER_DEGREE, links_schedule

    self_ref = link.left == link.right
    d_sens = 2 * int(p["d_max"]) if self_ref else int(p["d_max"])
    m = int(links) if links else 1
    dom1, dom2 = job.tables[link.left].domain, job.tables[link.right].domain
    cand, sched, rho_deg = links_schedule(p, link.kind, self_ref, dom1, dom2, budget.rho, m)
    arrow = "<->" if link.kind == "many_to_many" else "->"
    out = {"link": f"{link.left}.{link.left_col} {arrow} {link.right}.{link.right_col}", "kind": link.kind,
           "rho": budget.rho, "rho_degrees": rho_deg, "candidates": len(cand), "alpha": sched.alpha,
           "em_epsilon": sched.eps_em, "d_max": int(p["d_max"]), "sensitivity_pairs": d_sens}
    if p["degrees"] == "preserve" and float(p["degree_share"]) > 0:
        out["degree_release"] = _degree_plan(p, link.kind, self_ref, budget.rho)
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
        rho_min = (1 - sched.alpha) * (budget.rho - rho_deg) / most if most else 0.0
        out.update({"measurements": f"at most {most}, chosen at run time from the public link count (max_noise "
                                    f"{p['max_noise']}); pass --links M to preview it",
                    "rho_per_measurement_min": rho_min,
                    "score": p["score"] if p["score"] != "auto" else
                    f"auto: gain from {math.ceil(GAIN_MIN_LINKS_PER_DEGREE * d_sens)} links (m / d_sens >= "
                    f"{GAIN_MIN_LINKS_PER_DEGREE:g}), aim below; pass --links M to preview it",
                    "count_noise_std_max": d_sens / math.sqrt(rho_min) if rho_min > 0 else math.inf})
    return out


def _degree_plan(p: Mapping[str, Any], kind: str, self_ref: bool, rho_links: float) -> str:
    """What the degree release will do; its bins depend on the public table sizes, which a plan does not read,
    so the sizes from which each form is used are stated instead."""
    from privcube.mechanisms.relational.degree_distributions import BIN_NOISE, degree_sigma

    d_max = int(p["d_max"])
    rho = float(p["degree_share"]) * rho_links
    one = kind == "one_to_many"
    sigma = degree_sigma(d_max, rho, self_ref, one_to_many=one)
    n_all = math.ceil(sigma * math.sqrt(d_max + 1) / BIN_NOISE)
    if one:
        n_min = math.ceil(sigma * math.sqrt(3) / BIN_NOISE)
        return (f"the children-per-parent histogram, rho {rho:.4g} (degree_share of the links budget, taken from "
                f"the measurements above): childless parents in a bin of their own, the rest in equal-width bins, "
                f"sigma {sigma:.4g} per bin, from {n_min} parents (3 bins; d_max + 1 = {d_max + 1} bins from "
                f"{n_all}); with fewer parents the count of parents without and with children, sigma "
                f"{math.sqrt(2) * d_max / math.sqrt(2 * rho):.4g} each (read together against the public number of "
                f"parents: {d_max / math.sqrt(2 * rho):.4g} on the parents with children); decided at run time from "
                "the public table sizes")
    n_min = math.ceil(sigma * math.sqrt(2) / BIN_NOISE)
    return (f"each side's links-per-record histogram, sigma {sigma:.4g} per bin, rho {rho:.4g} (degree_share of "
            f"the links budget), for a table of at least {n_min} rows (2 bins; d_max + 1 = {d_max + 1} "
            f"bins from {n_all} rows); decided at run time from the public table sizes: when it is released, the "
            "measurements above share the rest of the links budget; when neither table is that large, nothing "
            "is spent on it")


def _uninformative(sched: Any, p: Mapping[str, Any]) -> tuple[Any, str]:
    """The schedule a run follows when even one measurement cannot meet ``max_noise`` (public sizes and budget
    say so), and the warning it gives: one selection and one measurement with the links budget, or
    (``uninformative: random``) the random links, nothing measured."""
    from privcube.mechanisms.relational.selection import one_measurement

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
    from privcube.mechanisms.relational.parameters import check_params

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
