"""`privcube report`: a self-contained report.html with inline SVG plots, written by `privcube run` too."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.report import render_report, write_report
from privcube.report.rundata import synthetic_marginal

CHROMIUM = Path("/usr/bin/chromium")
EVIL = "$x$<script>alert(1)</script>&\"'"  # a category name that must reach the page as typed, escaped
SCHEMA = {"attributes": [
    {"name": "sex", "type": "categorical", "categories": ["F", EVIL]},
    {"name": "age", "type": "numeric", "bins": [0, 18, 40, 65, 120]},
    {"name": "job", "type": "integer", "size": 3},
]}


def _data(folder: Path, n: int = 3000) -> None:
    rng = np.random.default_rng(3)
    sex = rng.choice(["F", EVIL], n)
    age = np.where(sex == "F", rng.uniform(0, 60, n), rng.uniform(30, 110, n))
    job = (age > 50).astype(int) + rng.integers(0, 2, n)
    pd.DataFrame({"sex": sex, "age": age, "job": job}).to_parquet(folder / "d.parquet", index=False)
    (folder / "schema.yaml").write_text(yaml.safe_dump(SCHEMA))


def _job(folder: Path, mechanism: dict, workload: list, synthesize: dict | None = None) -> Path:
    _data(folder)
    cfg = {"data": {"path": "d.parquet", "schema": "schema.yaml"}, "mechanism": mechanism, "workload": workload,
           "privacy": {"epsilon": 5, "delta": 1e-6}, "cluster": {"type": "threads"}}
    if synthesize:
        cfg["synthesize"] = synthesize
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(folder: Path, mechanism: dict, workload: list, synthesize: dict | None = None) -> Path:
    res = api.run(_job(folder, mechanism, workload, synthesize), folder / "out", seed=5, quiet=True)
    write_report(res.out_dir)
    return res.out_dir


@pytest.fixture(scope="module")
def rp_run(tmp_path_factory) -> Path:
    """ResidualPlanner over 1- and 2-way marginals with synthetic records."""
    return _run(tmp_path_factory.mktemp("rp"), {"name": "residual-planner"}, [{"kway": 1}, {"kway": 2}],
                {"rows": 2500})


@pytest.fixture(scope="module")
def aim_run(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("aim"), {"name": "aim-grem"}, [{"kway": 2}])


def _html(run: Path) -> str:
    return (run / "report.html").read_text()


def _svg(html: str, name: str) -> str:
    """The inline SVG element whose aria-label is ``name``."""
    m = re.search(rf'<svg class="plot" role="img" aria-label="{re.escape(name)}".*?</svg>', html, flags=re.S)
    assert m, f"no SVG plot {name!r}"
    return m.group(0)


def _svg_texts(svg: str) -> list[str]:
    import html as h

    return [h.unescape(t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)]


def _bar_lengths(svg: str, prefix: str, axis: int) -> list[float]:
    """Drawn lengths of the bars ``<prefix>-bar-<i>`` in SVG user units (axis 0: width, 1: height)."""
    out = []
    for i in range(10_000):
        m = re.search(rf'<g id="{re.escape(prefix)}-bar-{i}">\s*<path d="([^"]+)"', svg)
        if not m:
            break
        pts = np.array([[float(v) for v in p.split()] for p in re.findall(r"[ML]\s*([-0-9.e]+ [-0-9.e]+)", m.group(1))])
        out.append(float(np.ptp(pts[:, axis])))
    return out


def _assert_self_contained(html: str) -> None:
    assert not re.search(r"""(?:src|href|srcset|action|poster|data)\s*=\s*["']?\s*(?:https?:|//|file:|ftp:)""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?\s*(?:https?:|//)", html, re.I)
    assert "@import" not in html and "<script" not in html.lower() and "<link" not in html.lower()
    assert "<iframe" not in html.lower() and "<object" not in html.lower()
    for src in re.findall(r"""<img[^>]*src\s*=\s*["']([^"']*)""", html, re.I):
        assert src.startswith("data:image/"), src
    assert "default-src 'none'" in html  # the page itself forbids any fetch (CSP)


def test_report_is_self_contained_with_inline_svg_plots(rp_run):
    html = _html(rp_run)
    _assert_self_contained(html)
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert len(re.findall(r'<svg class="plot"', html)) >= 3
    assert "<?xml" not in html and "<metadata>" not in html  # prolog and RDF metadata stripped
    assert (rp_run / "report.html").stat().st_mode & 0o077 == 0  # owner-only, like the rest of the run


def test_strings_are_escaped(rp_run):
    html = _html(rp_run)
    assert "<script>alert(1)</script>" not in html
    assert "$x$&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in html  # the label is shown as typed, escaped


def test_expected_rmse_plot_has_one_labelled_bar_per_group(rp_run):
    html = _html(rp_run)
    plan = json.loads((rp_run / "report.json").read_text())["expected_error"]
    svg = _svg(html, "rmse")
    assert len(re.findall(r'id="rmse-bar-\d+"', svg)) == len(plan["groups"]) == 3 + 3
    texts = _svg_texts(svg)
    for g in plan["groups"]:
        assert g["label"] in texts
        assert f"{g['rmse']:.4g}" in html  # the table lists each group's expected RMSE
    assert "1-way" in texts and "2-way" in texts  # legend by order of the marginal
    widths = _bar_lengths(svg, "rmse", 0)  # bar lengths are proportional to the plan's RMSE
    np.testing.assert_allclose(np.array(widths) / widths[0],
                               [g["rmse"] / plan["groups"][0]["rmse"] for g in plan["groups"]], rtol=1e-3)


def test_budget_split_adds_up_to_the_ledger(rp_run):
    """ρ per residual (p_τ/2σ_τ², from the plan's σ²) sums to what the mechanism charged the ledger."""
    html = _html(rp_run)
    plan = json.loads((rp_run / "report.json").read_text())["expected_error"]
    ledger = json.loads((rp_run / "ledger.json").read_text())
    svg = _svg(html, "budget")
    assert len(re.findall(r'id="budget-bar-\d+"', svg)) == len(plan["measurements"]) == 7
    m = re.search(r"items summing to ([0-9.e+-]+) \(ledger: ([0-9.e+-]+) spent\)", html)
    assert m, "budget note missing"
    assert float(m.group(1)) == pytest.approx(ledger["spent"]["rho"], rel=1e-5)
    assert {"sex", "age", "job", "sex,age", "(total)"} <= set(_svg_texts(svg))


def test_ledger_table_lists_every_charge(aim_run):
    html = _html(aim_run)
    ledger = json.loads((aim_run / "ledger.json").read_text())
    section = html[html.index('<section id="ledger">'):]
    section = section[: section.index("</section>")]
    rows = re.findall(r"<tr><td>(\d+)</td><td>(.*?)</td><td>(.*?)</td>", section)
    assert len(rows) == len(ledger["charges"]) >= 5
    for (i, label, rho), c in zip(rows, ledger["charges"]):
        assert label == c["label"]
        assert float(rho) == pytest.approx(c["rho"], rel=1e-3)
    assert f"{ledger['spent']['rho']:.4g}" in section and "not for releases" in section  # seeded run


def test_aim_grem_selection_trace(aim_run):
    html = _html(aim_run)
    trace = json.loads((aim_run / "report.json").read_text())["mechanism_report"]["trace"]
    svg = _svg(html, "trace")
    assert len(re.findall(r'id="trace-select-bar-\d+"', svg)) == len(trace)
    assert len(re.findall(r'id="trace-measure-bar-\d+"', svg)) == len(trace)
    texts = _svg_texts(svg)
    for row in trace:  # each round is labelled with the marginal it selected
        label = "(final: spread)" if row.get("final_round") == "spread" else ",".join(row["clique"])
        assert f"{row['round']}: {label}" in texts
    section = html[html.index('<section id="trace">'):]
    assert section.count("<tr><td>") >= len(trace)
    if any(r["annealed"] for r in trace):
        assert "budget annealed after this round" in texts
    assert "no data-free plan" in html and 'id="budget"' not in html  # adaptive: no plan, trace is the split


def test_published_marginals_beside_synthetic_records(rp_run):
    html = _html(rp_run)
    index = json.loads((rp_run / "answers" / "index.json").read_text())["groups"]
    svg = _svg(html, "marginal-0")
    first = next(g for g in index if g["attributes"] == ["sex"])  # one-way marginals come first
    assert len(re.findall(r'id="marginal-0-published-bar-\d+"', svg)) == first["rows"] == 2
    assert len(re.findall(r'id="marginal-0-synthetic-bar-\d+"', svg)) == 2
    assert {"F", EVIL} <= set(_svg_texts(svg))  # schema labels on the cells
    assert "spend no budget" in html


def test_synthetic_marginal_counts_the_records(rp_run):
    files = sorted((rp_run / "synthetic" / "records").glob("*.parquet"))
    rec = pd.concat([pd.read_parquet(f) for f in files])
    got = synthetic_marginal(files, ["age", "job"], (4, 3))
    want = rec.groupby(["age", "job"]).size().unstack(fill_value=0).reindex(index=range(4), columns=range(3),
                                                                             fill_value=0)
    np.testing.assert_array_equal(got, want.to_numpy())
    assert got.sum() == 2500


def test_published_column_and_intervals_are_used_when_present(rp_run, tmp_path):
    """Answer files with `published` and `ci_low`/`ci_high` (added by other features) are plotted from those."""
    run = tmp_path / "run"
    shutil.copytree(rp_run, run)
    index = json.loads((run / "answers" / "index.json").read_text())["groups"]
    g = next(x for x in index if x["attributes"] == ["sex"])
    frame = pd.read_parquet(run / "answers" / g["file"])
    frame["published"] = np.array([11.0, 22.0])
    frame["ci_low"], frame["ci_high"] = frame["published"] - 3, frame["published"] + 4
    frame.to_parquet(run / "answers" / g["file"], index=False)
    html = render_report(run)
    assert "sex: published answers vs synthetic records" in _svg_texts(_svg(html, "marginal-0"))
    assert "with their confidence intervals" in html
    heights = _bar_lengths(_svg(html, "marginal-0"), "marginal-0-published", 1)
    assert heights[1] / heights[0] == pytest.approx(22 / 11, rel=1e-3)  # drawn from `published`, not `estimate`
    svg = _svg(html, "marginal-0")
    whiskers = re.search(r'<g id="LineCollection_1">(.*?)</g>', svg, flags=re.S).group(1)
    spans = [abs(float(a) - float(b)) for a, b in re.findall(r'd="M [-0-9.e]+ ([-0-9.e]+)\s*L [-0-9.e]+ ([-0-9.e]+)', whiskers)]
    np.testing.assert_allclose(np.array(spans) / np.array(heights), [7 / 11, 7 / 22], rtol=1e-3)  # ci_high - ci_low
    assert "published estimate" not in " ".join(_svg_texts(_svg(html, "marginal-0")))


def test_plan_is_recomputed_when_the_run_did_not_store_it(rp_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(rp_run, run)
    rep = json.loads((run / "report.json").read_text())
    stored = rep.pop("expected_error")
    (run / "report.json").write_text(json.dumps(rep))
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace("d.parquet", "gone.parquet"))
    html = render_report(run)
    assert "recomputed from the saved config" in html
    assert len(re.findall(r'id="rmse-bar-\d+"', _svg(html, "rmse"))) == len(stored["groups"])
    assert f"{stored['rmse']:.6g}" in html


def test_nonprivate_evaluation_is_labelled(tmp_path):
    from relational_files import _o2m_files

    cfg = _o2m_files(tmp_path)
    cfg["mechanism"]["evaluate_nonprivate"] = True
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    res = api.run(tmp_path / "job.yaml", tmp_path / "out", seed=1, quiet=True)
    html = render_report(res.out_dir)
    ev = res.report["nonprivate_evaluation"]
    section = html[html.index('<section id="nonprivate">'):]
    assert "NON-PRIVATE" in section[:400] and "do not publish" in section
    assert "average_cross_error_pct" in _svg_texts(_svg(html, "nonprivate"))
    assert f"{ev['average_cross_error_pct']:,.3f}".rstrip("0").rstrip(".") in section
    assert _svg(html, "budget")  # relational: ρ per ledger charge (tables, links)
    _assert_self_contained(html)


def _section(html: str, anchor: str) -> str:
    start = html.index(f'<section id="{anchor}">')
    return html[start:html.index("</section>", start)]


def test_relational_report_sections(tmp_path):
    """The relational page: privacy split per part, the DP error labelled DP, iterations with the relinked
    share, degrees, warnings; NON-PRIVATE keys another part adds (floor, baselines, distributions) rendered
    generically, each in its own table."""
    from relational_files import _o2m_files

    cfg = _o2m_files(tmp_path)
    cfg["mechanism"]["evaluate_nonprivate"] = True
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    out = api.run(tmp_path / "job.yaml", tmp_path / "out", seed=1, quiet=True).out_dir
    rep = json.loads((out / "report.json").read_text())
    led = json.loads((out / "ledger.json").read_text())
    # keys the evaluation may carry (written here by hand: the renderer must show whatever is present)
    rep["nonprivate_evaluation"].update({"floor_pct": 12.5, "random_links_pct": 61.25,
                                         "per_workload": [{"workload": "a|b", "error_pct": 3.5}],
                                         "degree_distribution": {"real": [5, 4, 1], "synthetic": [6, 3, 1]}})
    rep["warnings"] = ["the schema of table 'x' was inferred from the private data"]
    (out / "report.json").write_text(json.dumps(rep))
    html = render_report(out)
    split = _section(html, "privacy-split")
    for part in ("parents", "children", "links"):
        assert f"<td>{part}</td>" in split
    assert len(re.findall(r'id="parts-bar-\d+"', split)) == 3
    dp = _section(html, "dp-error")
    assert "DIFFERENTIALLY PRIVATE" in dp and "average_l1_vs_noisy_pct" in dp
    its = _section(html, "iterations")
    n_its = len(rep["mechanism_report"]["iterations"])
    assert n_its >= 1 and "relinked share" in its and len(re.findall(r'-bar-\d+"', its)) == n_its
    assert "d_max_respected" in _section(html, "degrees") and "degree.d_max" in _section(html, "degrees")
    assert "inferred from the private data" in _section(html, "warnings")
    assert html.index('id="warnings"') < html.index('id="overview"')
    npv = _section(html, "nonprivate")
    assert "NON-PRIVATE" in npv[:600] and "<td>floor_pct</td>" in npv and "<td>random_links_pct</td>" in npv
    assert "<h4>per_workload</h4>" in npv and "<th>error_pct</th>" in npv and "<td>a|b</td>" in npv
    assert "<h4>degree_distribution.real</h4>" in npv and "<h4>degree_distribution.synthetic</h4>" in npv
    assert "NON-PRIVATE" not in html[:html.index('<section id="nonprivate">')].split("</nav>")[1]  # only there
    assert led["composition"]["parts"]["links"]["spent"]["rho"] > 0
    _assert_self_contained(html)


def test_no_nonprivate_section_without_the_option(rp_run):
    assert "NON-PRIVATE" not in _html(rp_run)


def test_many_groups_are_capped_and_fast(tmp_path):
    """465 two-way groups: the RMSE plot shows the 60 largest, the table all; rendering takes seconds."""
    rng = np.random.default_rng(0)
    cols = {f"x{i:02d}": rng.integers(0, 3, 500) for i in range(31)}
    pd.DataFrame(cols).to_parquet(tmp_path / "d.parquet")
    (tmp_path / "dom.json").write_text(json.dumps({k: 3 for k in cols}))
    cfg = {"data": {"path": "d.parquet", "domain": "dom.json"}, "mechanism": {"name": "residual-planner"},
           "workload": [{"kway": 2}], "privacy": {"rho": 1.0}, "cluster": {"type": "threads"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    res = api.run(tmp_path / "job.yaml", tmp_path / "out", seed=1, quiet=True)
    t0 = time.perf_counter()
    html = render_report(res.out_dir)
    print(f"report of 465 groups rendered in {time.perf_counter() - t0:.2f} s")  # measured, not asserted
    svg = _svg(html, "rmse")
    assert len(re.findall(r'id="rmse-bar-\d+"', svg)) == 60
    assert "Showing the 60 of 465 groups with the largest expected RMSE" in html
    groups = res.report["expected_error"]["groups"]
    worst = sorted(groups, key=lambda g: -g["rmse"])[:60]
    assert set(t for t in _svg_texts(svg) if t.startswith("x")) == {g["label"] for g in worst}
    assert len(re.findall(r'id="budget-bar-\d+"', _svg(html, "budget"))) == 60
    assert "All 465 groups" in html


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True, timeout=300)


def test_privcube_run_writes_the_report_and_report_command_rewrites_it(tmp_path):
    job = _job(tmp_path, {"name": "residual-planner"}, [{"kway": 2}])
    r = cli("run", str(job), "--out", str(tmp_path / "out"), "--seed", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    page = tmp_path / "out" / "report.html"
    assert page.exists() and f"report: {page}" in r.stdout
    _assert_self_contained(page.read_text())
    page.unlink()
    r = cli("report", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert page.exists() and _svg(page.read_text(), "rmse")
    from privcube.cli import main

    assert main(["run", str(job), "--out", str(tmp_path / "quiet"), "--seed", "1", "--quiet", "--no-report"]) == 0
    assert not (tmp_path / "quiet" / "report.html").exists() and (tmp_path / "quiet" / "ledger.json").exists()


def test_report_command_has_help():
    from privcube.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["report", "--help"])
    assert e.value.code == 0


def test_one_strategy_budget_is_stated_not_plotted(tmp_path):
    run = _run(tmp_path, {"name": "hdmm", "restarts": 1}, [{"kway": 2}])
    html = _html(run)
    assert 'id="budget"' in html and 'aria-label="budget"' not in html
    assert "The whole budget" in html and "one measurement (hdmm; from the ledger charge)" in html
    assert len(re.findall(r'id="rmse-bar-\d+"', _svg(html, "rmse"))) == 3


def test_report_of_a_missing_or_unfinished_run_is_one_line(tmp_path):
    r = cli("report", str(tmp_path / "nothing"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr
    (tmp_path / "half").mkdir()
    r = cli("report", str(tmp_path / "half"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a finished run" in r.stderr


def test_a_failed_report_does_not_lose_the_run(tmp_path, monkeypatch, capsys):
    """Rendering fails (injected): `privcube run` still exits 0 with a complete run and one warning line."""
    import privcube.report as report
    from privcube.cli import main

    def broken(run_dir):  # noqa: ANN001, ANN202
        raise RuntimeError("plotting backend exploded\nsecond line")

    monkeypatch.setattr(report, "write_report", broken)
    job = _job(tmp_path, {"name": "residual-planner"}, [{"kway": 1}])
    assert main(["run", str(job), "--out", str(tmp_path / "out"), "--seed", "1", "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report.html was not written" in err[0] and "privcube report" in err[0]
    assert (tmp_path / "out" / ".complete").exists() and not (tmp_path / "out" / "report.html").exists()


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'chromium-profile'}", "--hide-scrollbars"]
    return subprocess.run([str(CHROMIUM), *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless Chromium not installed (/usr/bin/chromium; "
                                                  "Debian package 'chromium', installed by .ci/run as root)")
def test_report_renders_in_headless_chromium(aim_run, tmp_path):
    page = (aim_run / "report.html").resolve().as_uri()
    dom = _chromium("--dump-dom", page, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<svg class="plot"') == _html(aim_run).count('<svg class="plot"') >= 3
    assert "AIM+GReM selection trace" in dom.stdout and "trace-select-bar-0" in dom.stdout
    shot = tmp_path / "shot.png"
    r = _chromium(f"--screenshot={shot}", "--window-size=1200,1800", page, tmp=tmp_path)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.shape[:2] == (1800, 1200)
    ink = (pixels.sum(axis=2) < 600).mean()  # non-white pixels: text, tables and plots were painted
    blue = ((pixels[..., 2] > 150) & (pixels[..., 0] < 110)).mean()  # the plots' blue bars
    assert ink > 0.02 and blue > 0.002, (ink, blue)
