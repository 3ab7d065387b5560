"""The report page's sections for a relational run: privacy split by part, the DP error on the measured
workloads, the links' iterations (with the share of links re-optimised), degrees; per link for a schema
graph. Read from ``report.json`` and ``ledger.json`` only (post-processing; no budget).

The generic page (``privcube.report.page``) asks for them through :func:`report_sections`; they are drawn
with its markup and figures."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from privcube.report import figures
from privcube.report.markup import compact, esc, figure, num, section, table

if TYPE_CHECKING:
    from privcube.report.rundata import RunData

PUBLIC_DEGREE_KEYS = ("d_max", "truncated", "links_kept")  # the rest of report['degree'] is read off the real links


def _kv(d: dict[str, Any], header: tuple[str, str] = ("", "")) -> str:
    return table(list(header) if any(header) else [], [[esc(k), compact(v)] for k, v in d.items()], "summary")


def privacy_split(run: RunData) -> str:
    """Each part of the composed budget (tables, links): budget and spent, and the tighter zCDP reading."""
    comp = run.ledger.get("composition") if isinstance(run.ledger.get("composition"), dict) else {}
    parts = comp.get("parts") if isinstance(comp.get("parts"), dict) else {}
    if not parts:
        return ""
    rows = []
    for name, p in parts.items():
        b, s = p.get("budget") or {}, p.get("spent") or {}
        rows.append([esc(name), num(b.get("epsilon")), num(b.get("delta")), num(b.get("rho")), num(s.get("epsilon")),
                     num(s.get("delta")), num(s.get("rho"))])
    public = (run.report.get("public_tables") or [])
    rows += [[esc(n), esc("public: released as given (random order, new keys), no budget"), "", "", "", "", ""] for n in public]
    zc = comp.get("zcdp") or {}
    svg = figures.hbar("parts", list(parts), [float((p.get("spent") or {}).get("rho") or 0.0) for p in parts.values()],
                       title="ρ spent per part", xlabel="ρ (zCDP)", colors=[figures.PALETTE[1]] * len(parts))
    note = ("Basic composition of the parts' (ε, δ): the run is (Σε, Σδ)-DP; ρ adds too, and its tighter "
            f"(ε, δ) reading at the total δ is ε = {num(zc.get('epsilon'))}.")
    body = figure(svg, "zCDP ρ spent by each table and each link.") + \
        table(["part", "budget ε", "budget δ", "budget ρ", "spent ε", "spent δ", "spent ρ"], rows)
    return section("privacy-split", "Privacy split", body, note=note)


def dp_error(run: RunData) -> str:
    """``dp_error_measured_workloads``: DP (noisy releases vs synthetic links), labelled as such."""
    dp = run.report.get("dp_error_measured_workloads")
    if not isinstance(dp, dict) or not dp:
        return ""
    per_link = {k: v for k, v in dp.items() if isinstance(v, dict)} if run.report.get("kind") == "schema_graph" \
        else {"links": dp}
    label = next((v.get("label") for v in per_link.values() if v.get("label")), "DIFFERENTIALLY PRIVATE")
    body = ""
    for name, fit in per_link.items():
        body += f"<h3>{esc(name)}</h3>" + _kv({k: v for k, v in fit.items() if k != "label"},
                                              ("quantity (DP)", "value"))
    return section("dp-error", "DP error on the measured workloads", body, note=str(label))


def iterations(run: RunData) -> str:
    """Per link, the learning iterations: workloads selected and the share of links re-optimised."""
    body, total = "", 0
    for name, mr in link_reports(run):
        its = [r for r in mr.get("iterations") or [] if isinstance(r, dict)]
        if not its:
            continue
        total += len(its)
        share = [float(r.get("relinked_share") or 0.0) for r in its]
        svg = figures.hbar(f"relinked-{name}", [f"iteration {r.get('iteration', i)}" for i, r in enumerate(its)],
                           share, title=f"{name}: share of links re-optimised", xlabel="relinked share",
                           colors=[figures.PALETTE[0]] * len(its))
        rows = [[num(r.get("iteration")), compact(list(r.get("selected") or [])), num(r.get("relinked_share"))]
                for r in its]
        body += f"<h3>{esc(name)}</h3>" + figure(svg, "Share of the links re-optimised in each iteration.") + \
            table(["iteration", "workloads selected", "relinked share"], rows)
    if not body:
        return ""
    return section("iterations", "Link iterations", body,
                   note=f"{total} iteration(s); the relinked share is the fraction of links the slices revisited.")


def degrees(run: RunData) -> str:
    """Per link, the public degree settings (d_max, truncation), the degree preservation's outcome and, for a later
    sibling foreign key, how its parents were made to agree with the earlier one's."""
    body = ""
    for name, mr in link_reports(run):
        deg = mr.get("degree") if isinstance(mr.get("degree"), dict) else {}
        rows = {f"degree.{k}": deg[k] for k in PUBLIC_DEGREE_KEYS if k in deg}  # others: data-dependent
        if isinstance(mr.get("degrees"), dict):
            rows.update({f"degrees.{k}": v for k, v in mr["degrees"].items()})
        if isinstance(mr.get("siblings"), dict):  # a later foreign key into the same parent: how they agree
            rows.update({f"siblings.{k}": v for k, v in mr["siblings"].items()})
        if rows:
            body += f"<h3>{esc(name)}</h3>" + _kv(rows, ("degree", "value"))
    if not body:
        return ""
    return section("degrees", "Degrees", body, note="d_max is public input; the figures here are DP or public "
                   "(data-dependent degree statistics are shown only with evaluate_nonprivate, in the last section).")


def report_sections(run: RunData) -> dict[str, str]:
    """The page's relational sections by anchor (``privacy-split``, ``dp-error``, ``iterations``, ``degrees``);
    each is empty when the run has nothing to show there (a single-table run: all of them)."""
    return {"privacy-split": privacy_split(run), "dp-error": dp_error(run), "iterations": iterations(run),
            "degrees": degrees(run)}


def link_reports(run: RunData) -> list[tuple[str, dict[str, Any]]]:
    """(link name, its mechanism report) for each link of the run: one for the two-table forms, one per
    foreign key (``from``) of a schema graph."""
    if run.report.get("kind") == "schema_graph":
        return [(str(lk.get("from")), lk.get("mechanism_report") or {}) for lk in run.report.get("links") or []
                if isinstance(lk, dict)]
    return [("links", run.mechanism_report)] if run.mechanism_report else []


#: what the generic report shows for a relational run (privcube.report.rundata.register_kind)
RUN_SECTIONS = {"plan_note": "relational: the links are learned adaptively, so their error depends on the data; "
                             "the tables' data-free plan (expected RMSE per table and marginal) is what "
                             "`privcube plan RUN/config.yaml` prints",
                "draw": report_sections}


__all__ = ["RUN_SECTIONS", "degrees", "dp_error", "iterations", "link_reports", "privacy_split", "report_sections"]
