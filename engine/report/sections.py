"""The report's sections, each built from a :class:`RunData` into escaped HTML with inline SVG plots."""
from __future__ import annotations

import json
import math
from typing import Any

from privcube.report import figures
from privcube.report.markup import compact, esc, figure, num, section, table
from privcube.report.rundata import RunData

MAX_BARS = 60  # bars per plot (groups, measurements, charges): the rest are in the tables
MAX_ROWS = 2000  # rows per table
COLORS_BY_K = {0: figures.PALETTE[7], 1: figures.PALETTE[2], 2: figures.PALETTE[0], 3: figures.PALETTE[1]}


def group_label(g: dict[str, Any]) -> str:
    """A query group's name: its label or attributes (after its level, ``by``, for tables by geographic unit), plus
    non-identity query types."""
    label = g.get("label") or ",".join(g.get("attributes") or []) or "(total)"
    if g.get("by"):
        label = f"{g['by']}: {label}"
    queries = g.get("queries") if isinstance(g.get("queries"), dict) else {}
    kinds = [f"{a}:{q}" for a, q in queries.items() if q != "identity"]
    return f"{label} [{' '.join(kinds)}]" if kinds else str(label)


def _k_color(g: dict[str, Any]) -> str:
    return COLORS_BY_K.get(len(g.get("attributes") or []), figures.PALETTE[4])


def expected_error(run: RunData) -> str:
    """Expected RMSE per query group from the data-free plan (largest first when groups are capped)."""
    plan = run.plan
    if not plan or not plan.get("groups"):
        return section("expected-error", "Expected error per query group", "",
                       note=f"No plan: {run.plan_note or 'the run stored none'}.")
    groups = [g for g in plan["groups"] if isinstance(g.get("rmse"), (int, float))]
    shown = groups if len(groups) <= MAX_BARS else sorted(groups, key=lambda g: -g["rmse"])[:MAX_BARS]
    cap = "" if len(shown) == len(groups) else \
        f" Showing the {len(shown)} of {len(groups)} groups with the largest expected RMSE; all are in the table."
    ks = sorted({len(g.get("attributes") or []) for g in shown})
    legend = {COLORS_BY_K.get(k, figures.PALETTE[4]): f"{k}-way" for k in ks} if len(ks) > 1 else None
    svg = figures.hbar("rmse", [group_label(g) for g in shown], [g["rmse"] for g in shown],
                       title=f"Expected RMSE per query group ({plan.get('mechanism', run.mechanism)})",
                       xlabel="expected RMSE (noise standard deviation per answer)",
                       colors=[_k_color(g) for g in shown], legend=legend)
    extra = sorted({k for g in groups for k, v in g.items() if "half" in k and isinstance(v, (int, float))})
    header = ["group", "attributes", "expected RMSE", "answers", "weight", *extra]
    rows = [[esc(group_label(g)), compact(list(g.get("attributes") or [])), num(g["rmse"]),
             num(g.get("cells", g.get("rows", g.get("num_queries")))), num(g.get("weight")),
             *[num(g.get(k)) for k in extra]] for g in groups[:MAX_ROWS]]
    more = f"<p class='note'>{len(groups) - MAX_ROWS} more groups not listed.</p>" if len(groups) > MAX_ROWS else ""
    note = (f"Overall expected RMSE {plan.get('rmse', float('nan')):.6g} over all answers; from the plan, "
            f"which depends on the workload, domain and budget only (no data).{cap}")
    if run.plan_note:
        note += f" Plan {run.plan_note}."
    body = figure(svg, "Expected noise per answer of each group, before any data was read.") + \
        f"<details><summary>All {len(groups)} groups</summary>{table(header, rows)}{more}</details>"
    return section("expected-error", "Expected error per query group", body, note=note)


def _measurement_rho(run: RunData) -> tuple[list[str], list[float], str] | None:
    """ρ per residual measurement of a batch plan (ResidualPlanner p_τ/2σ², QuerySmasher 1/2σ²)."""
    meas = [m for m in (run.plan or {}).get("measurements") or [] if "residual" in m and m.get("sigma2")]
    if len(meas) < 2:
        return None
    domain = (run.config.get("resolved") or {}).get("domain") or {}
    lattice = run.config.get("noise_sampler") == "discrete"
    p_tau = run.sections["residual_rho"] == "p_tau" and not lattice  # the mechanism says how ρ is read
    labels, rho = [], []
    for m in meas:
        tau = list(m["residual"])
        if "rho" in m:
            r = float(m["rho"])
        elif p_tau and all(a in domain for a in tau):
            r = math.prod((domain[a] - 1) / domain[a] for a in tau) / (2 * m["sigma2"])  # p_∅ = 1
        else:
            r = 1.0 / (2 * m["sigma2"])
        labels.append(",".join(tau) or "(total)")
        rho.append(r)
    how = "ρ_τ = p_τ/(2σ_τ²), p_τ = Π(n_i−1)/n_i" if p_tau else "ρ = 1/(2σ²) per measurement"
    mech = run.config.get("mechanism") if isinstance(run.config.get("mechanism"), dict) else {}
    if mech.get("neighbours") == "substitution":
        how += "; these are add/remove shares: with substitution neighbours the ledger's ρ is the joint cost"
    return labels, rho, f"residual measurement of the plan ({how})"


def _charge_rho(run: RunData) -> tuple[list[str], list[float], str] | None:
    """ρ per ledger charge label (summed over charges that share a label)."""
    by: dict[str, float] = {}
    for c in run.ledger.get("charges") or []:
        if isinstance(c.get("rho"), (int, float)):
            by[str(c.get("label"))] = by.get(str(c.get("label")), 0.0) + float(c["rho"])
    return (list(by), list(by.values()), "ledger charge") if by else None


def budget_split(run: RunData) -> str:
    """How the budget is divided: ρ per measurement (batch plans) or per ledger charge."""
    if run.sections["budget"] != "budget":
        return ""  # the mechanism's own section (e.g. AIM+GReM's selection trace) is the split
    split = _measurement_rho(run) or _charge_rho(run)
    if split is None:
        return ""
    labels, rho, what = split
    if len(rho) == 1:
        return section("budget", "Budget split", "", note=f"The whole budget (ρ = {rho[0]:.6g}) goes to one "
                                                           f"measurement ({labels[0]}; from the {what}).")
    order = list(range(len(rho)))
    if len(order) > MAX_BARS:
        order = sorted(order, key=lambda i: -rho[i])[:MAX_BARS]
    total = float(sum(rho))
    cap = "" if len(order) == len(rho) else f" Showing the {len(order)} of {len(rho)} with the largest ρ."
    svg = figures.hbar("budget", [labels[i] for i in order], [rho[i] for i in order],
                       title="Budget split (ρ, zCDP)", xlabel="ρ", colors=[figures.PALETTE[1]] * len(order))
    spent = (run.ledger.get("spent") or {}).get("rho")
    items = "labels (the charges that share a label summed)" if what == "ledger charge" else "items"
    note = f"ρ per {what}: {len(rho)} {items} summing to {total:.6g}" + \
        (f" (ledger: {spent:.6g} spent)." if isinstance(spent, (int, float)) else ".") + cap
    return section("budget", "Budget split", figure(svg, "Privacy budget (zCDP ρ) given to each measurement."),
                   note=note)


def ledger(run: RunData) -> str:
    """The privacy ledger: budget, spent, every charge, the privacy unit and noise source."""
    led = run.ledger
    budget, spent = led.get("budget") or {}, led.get("spent") or {}
    keys = ("rho", "epsilon", "delta")
    head = table(["", "ρ (zCDP)", "ε", "δ"], [[esc("budget"), *[num(budget.get(k)) for k in keys]],
                                              [esc("spent"), *[num(spent.get(k)) for k in keys]]], "summary")
    charges = list(led.get("charges") or [])
    rows = []
    for i, c in enumerate(charges[:MAX_ROWS]):
        rest = "; ".join(f"{esc(k)}={compact(v)}" for k, v in c.items() if k not in ("label", "rho", "epsilon", "delta"))
        rows.append([num(i + 1), esc(c.get("label", "")), num(c.get("rho")), num(c.get("epsilon")),
                     num(c.get("delta")), rest])
    more = f"<p class='note'>{len(charges) - MAX_ROWS} more charges not listed.</p>" if len(charges) > MAX_ROWS else ""
    extra = ""
    unit = led.get("privacy_unit") or run.config.get("privacy_unit")
    if unit:
        extra += f"<p><b>Privacy unit:</b> {compact(unit)}</p>"
    noise = led.get("noise") or {}
    if noise.get("seeded"):
        extra += ("<p class='warn'>Seeded noise (seed recorded in the outputs): reproducible, so anyone with the "
                  "seed can subtract the noise. For tests and experiments, <b>not for releases</b>.</p>")
    if led.get("composition"):
        text = json.dumps(led["composition"], indent=2, default=str)
        extra += f"<details><summary>Composition</summary><pre>{esc(text)}</pre></details>"
    body = head + extra + table(["#", "charge", "ρ", "ε", "δ", "details"], rows, "ledger") + more
    return section("ledger", "Privacy ledger", body,
                   note=f"{len(charges)} charge{'' if len(charges) == 1 else 's'} against the budget, as saved in "
                        "ledger.json.")


def nonprivate(run: RunData) -> str:
    """Realised errors against the real data: only when the run asked for them, labelled NON-PRIVATE. Every
    key present is shown: scalars in a table (and a bar plot), each nested mapping or list in a table of its own."""
    ev = run.report.get("nonprivate_evaluation") or run.mechanism_report.get("nonprivate_evaluation")
    if not isinstance(ev, dict):
        return ""
    shown = {k: v for k, v in ev.items() if k != "label"}
    vals = {k: float(v) for k, v in shown.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    label = ev.get("label") or "NON-PRIVATE — computed from the real data (evaluate_nonprivate: true)."
    body = (f"<div class='nonprivate'><p class='banner'>{esc(label)} Not differentially private: do not publish "
            "this section.</p>")
    if vals:
        svg = figures.hbar("nonprivate", list(vals), list(vals.values()), title="NON-PRIVATE realised errors",
                           xlabel="value (units as named)", colors=[figures.PALETTE[3]] * len(vals))
        body += figure(svg, "NON-PRIVATE: realised errors measured against the real data.")
    body += value_tables(shown, "NON-PRIVATE") + "</div>"
    return section("nonprivate", "NON-PRIVATE evaluation", body)


def value_tables(d: dict[str, Any], what: str, path: str = "", depth: int = 0) -> str:
    """``d`` as tables: its scalar keys in one (quantity, value), each nested mapping under a heading of its
    path (recursively, 4 levels), a list of mappings as rows, a list of scalars as (index, value) rows."""
    scalars = [[esc(k), compact(v)] for k, v in d.items() if not isinstance(v, (dict, list)) or depth >= 4]
    out = table([f"quantity ({what})", "value"], scalars) if scalars else ""
    for k, v in d.items():
        name = f"{path}.{k}" if path else str(k)
        if depth >= 4 or not isinstance(v, (dict, list)):
            continue
        out += f"<h4>{esc(name)}</h4>"
        if isinstance(v, dict):
            out += value_tables(v, what, name, depth + 1)
        elif v and all(isinstance(r, dict) for r in v):
            cols = list(dict.fromkeys(c for r in v for c in r))
            out += table(cols, [[compact(r.get(c)) for c in cols] for r in v[:MAX_ROWS]])
        else:
            out += table(["#", "value"], [[num(i), compact(x)] for i, x in enumerate(v[:MAX_ROWS])])
        if isinstance(v, list) and len(v) > MAX_ROWS:
            out += f"<p class='note'>{len(v) - MAX_ROWS} more rows not listed.</p>"
    return out


def warnings(run: RunData) -> str:
    """``report.json``'s ``warnings`` (e.g. a schema inferred from the data), first thing on the page."""
    items = [w for w in run.report.get("warnings") or [] if w]
    if not items:
        return ""
    body = "".join(f"<p class='warn'><b>Warning:</b> {esc(w)}</p>" for w in items)
    return section("warnings", "Warnings", body)


def overview(run: RunData) -> str:
    """Key facts: mechanism, privacy spent, sizes, timings, synthetic records."""
    spent = run.ledger.get("spent") or {}
    sizes = run.report.get("sizes") or {}
    timings = run.report.get("timings") or {}
    rows = [[esc("mechanism"), esc(run.mechanism)],
            [esc("privacy spent"), f"ε = {num(spent.get('epsilon'))}, δ = {num(spent.get('delta'))} "
                                   f"(ρ = {num(spent.get('rho'))})"]]
    rows += [[esc(k.replace("_", " ")), compact(v)] for k, v in sizes.items()]
    if run.plan and isinstance(run.plan.get("rmse"), (int, float)):
        rows.append([esc("expected RMSE (plan)"), num(run.plan["rmse"])])
    post = run.report.get("postprocess")
    if isinstance(post, dict) and post.get("method"):
        state = ("converged" if post.get("converged") else "stopped at the iteration cap") \
            if "converged" in post else ""
        rows.append([esc("published answers"), esc(f"{post['method']}: {state}, {post.get('iterations')} iterations, "
                                                   f"{post.get('time_s', 0):.2f} s") if state else esc(post["method"])])
    syn = run.report.get("synthetic_records")
    if isinstance(syn, dict):
        rows.append([esc("synthetic records"), f"{num(syn.get('rows'))} rows ({esc(syn.get('estimator', ''))}), "
                                               f"{esc(syn.get('path', ''))}"])
    if timings:
        rows.append([esc("timings (s)"), esc(", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in timings.items()
                                                       if isinstance(v, (int, float))))])
    return section("overview", "Overview", table([], rows, "summary"))
