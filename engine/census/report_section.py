"""What the report page (``privcube report``) shows for a census run: each level's units, share of the budget and
expected error per cell after the hierarchical fit beside the level measured alone (issue 35 item 8)."""
from __future__ import annotations

from typing import Any

from privcube.report.figures import PALETTE, hbar
from privcube.report.markup import esc, figure, num, section, table


def levels(run: Any) -> str:
    """The "levels" section: a table and a plot of expected RMSE per cell by level, fitted and alone."""
    lv = run.report.get("levels") if run.report.get("mechanism") == "census" else None
    if not isinstance(lv, dict) or not lv:
        return ""
    rows = [[esc(name), esc(info.get("units")), num(info.get("share")), num(info.get("rho")), num(info.get("rmse")),
             num(info.get("rmse_alone")), esc(", ".join(",".join(t) or "(total)" for t in info.get("tables", [])))]
            for name, info in lv.items()]
    labels, values, colors = [], [], []
    for name, info in lv.items():
        labels += [f"{name}: hierarchical fit", f"{name}: level alone"]
        values += [float(info.get("rmse", 0.0)), float(info.get("rmse_alone", 0.0))]
        colors += [PALETTE[0], PALETTE[1]]
    svg = hbar("census-levels", labels, values, title="Expected error per cell by level",
               xlabel="expected RMSE per cell (counts, before non-negativity and rounding)", colors=colors)
    inv = run.report.get("invariants", {}).get("published_exactly") or []
    note = ("Each level is measured unit by unit (ResidualPlanner; one charge per level, parallel over its units); "
            "every residual is then fitted over the whole tree, so children sum exactly to their parent. "
            + (f"Published exactly (public facts, not protected): {', '.join(inv)}." if inv else ""))
    body = table(["level", "units", "share", "rho", "expected RMSE (fitted)", "expected RMSE (alone)", "tables"],
                 rows) + figure(svg, "Expected RMSE per published cell, from the public map and the noise scales "
                                     "(no data)")
    return section("levels", "Levels", body, note)


def report_sections(run: Any) -> dict[str, str]:
    """The page's census sections by anchor."""
    return {"levels": levels(run)}


#: what the generic report shows for a census run (privcube.report.rundata.register_kind)
RUN_SECTIONS = {"plan_note": "census: the expected errors by level are in the Levels section (`privcube plan "
                             "RUN/config.yaml` prints them too)", "draw": report_sections}

__all__ = ["RUN_SECTIONS", "levels", "report_sections"]
