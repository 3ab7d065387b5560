"""Issue 33 leftovers, through the real ``privcube`` command on real files: ``demo --out DIR`` replaces or
deletes only files the demo wrote; ``marginals --out F`` refuses a file privcube did not write (unless
``--force``) and writes atomically; ``plan`` shows the config warnings a run prints and keeps in report.json.
A refused command leaves every file byte for byte as it was, prints one line on stderr and exits 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube.demo import write_demo_data

from relational_files import _o2m_files  # noqa: E402


def cli(*args: object, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "privcube", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every file (bytes), folder (None) and symlink (its target) under ``root``, hidden ones included."""
    def state(p: Path) -> bytes | str | None:
        return os.readlink(p) if p.is_symlink() else None if p.is_dir() else p.read_bytes()

    return {p.relative_to(root).as_posix(): state(p) for p in sorted(root.rglob("*"))}


def one_error_line(r: subprocess.CompletedProcess) -> str:
    """Exit 2, exactly one stderr line ``privcube: error: ...``, no traceback; returns the line."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("privcube: error: "), r.stderr[-3000:]
    return lines[0]


# ---- 1. demo --out DIR: only the demo's own files are replaced or deleted -------------------------------

def test_demo_refuses_a_data_folder_it_did_not_write(tmp_path: Path) -> None:
    """The reported case: DIR/data holds the user's Parquet and no row marker; the demo used to delete it."""
    ws = tmp_path / "mine"
    (ws / "data").mkdir(parents=True)
    pd.DataFrame({"x": [1, 2, 3]}).to_parquet(ws / "data" / "people.parquet")
    before = snapshot(ws)
    msg = one_error_line(cli("demo", "--out", ws, "--rows", 1000, "--quiet"))
    assert "'data/people.parquet'" in msg and "did not write" in msg and "nothing was changed" in msg
    assert snapshot(ws) == before


@pytest.mark.parametrize("plant", ["top", "runs", "symlinked data"])
def test_demo_refuses_other_files_beside_its_own(tmp_path: Path, plant: str) -> None:
    """A demo folder the demo wrote, plus one thing of the user's (beside it, in runs/, or data/ being a link to
    the user's folder): a demo with another --rows (which replaces the data) is refused, nothing touched."""
    ws = tmp_path / "ws"
    demo = ws / "demo"
    write_demo_data(demo, 1000)
    if plant == "top":
        (demo / "keep.txt").write_text("mine\n")
        needle = "'keep.txt'"
    elif plant == "runs":
        (demo / "runs").mkdir()
        (demo / "runs" / "notes.md").write_text("mine\n")
        needle = "'runs/notes.md'"
    else:
        (ws / "theirs").mkdir()
        pd.DataFrame({"x": [7]}).to_parquet(ws / "theirs" / "part-000.parquet")
        for f in (demo / "data").iterdir():
            f.unlink()
        (demo / "data").rmdir()
        (demo / "data").symlink_to(ws / "theirs", target_is_directory=True)
        needle = "'data'"
    before = snapshot(ws)
    msg = one_error_line(cli("demo", "--out", demo, "--rows", 2000, "--quiet"))
    assert needle in msg and "did not write" in msg
    assert snapshot(ws) == before


def test_demo_refuses_a_folder_another_command_wrote(tmp_path: Path) -> None:
    """A folder with privcube's manifest of another kind (a published answers copy) is not the demo's."""
    ws = tmp_path / "copy"
    ws.mkdir()
    (ws / "group-0000-a.parquet").write_bytes(b"PAR1")
    (ws / ".privcube-files.json").write_text(json.dumps({"written_by": "privcube", "kind": "answers",
                                                          "files": ["group-0000-a.parquet"], "dirs": []}))
    before = snapshot(ws)
    msg = one_error_line(cli("demo", "--out", ws, "--rows", 1000, "--quiet"))
    assert "did not write" in msg and "'group-0000-a.parquet'" in msg
    assert snapshot(ws) == before


def test_demo_data_is_replaced_only_where_the_demo_wrote_it(tmp_path: Path) -> None:
    """Another --rows replaces the demo's parts and marker (and a temporary file a killed write left); the
    manifest lists exactly the demo's files; a folder from before the manifest (its demo-config.yaml reads
    this folder) is taken as the demo's."""
    demo = tmp_path / "demo"
    write_demo_data(demo, 1000)
    (demo / "data" / ".part-001.parquet.k1ll3d0x.tmp").write_bytes(b"half")
    first = pd.read_parquet(demo / "data")
    write_demo_data(demo, 2000)
    data = sorted(p.name for p in (demo / "data").iterdir())
    assert data == [".rows-2000", "part-000.parquet", "part-001.parquet", "part-002.parquet", "part-003.parquet"]
    assert len(pd.read_parquet(demo / "data")) == 2000 and len(first) == 1000
    record = json.loads((demo / ".privcube-files.json").read_text())
    assert record["written_by"] == "privcube" and record["kind"] == "demo"
    assert set(record["files"]) == {f"data/{n}" for n in data} | {"schema.yaml", "demo-config.yaml"}
    # a demo folder written before the manifest: recognised by its config, reused as it is
    (demo / ".privcube-files.json").unlink()
    (demo / "demo-config.yaml").write_text(yaml.safe_dump({"data": {"path": str(demo / "data"),
                                                                    "schema": str(demo / "schema.yaml")}}))
    before = snapshot(demo / "data")
    write_demo_data(demo, 2000)
    assert snapshot(demo / "data") == before and (demo / ".privcube-files.json").is_file()


def test_demo_runs_again_over_its_own_folder(tmp_path: Path) -> None:
    """End to end (one small demo, about 10 s): the demo replaces its own data of another size and runs."""
    demo = tmp_path / "demo"
    write_demo_data(demo, 2000)
    r = cli("demo", "--out", demo, "--rows", 1000, "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (demo / "data" / ".rows-1000").exists() and not (demo / "data" / ".rows-2000").exists()
    assert len(pd.read_parquet(demo / "data")) == 1000
    assert (demo / "runs" / "run-001" / ".complete").is_file()


# ---- 2. marginals --out F: an existing file privcube did not write is refused ---------------------------

@pytest.fixture()
def counts_input(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(3)
    (tmp_path / "parts").mkdir()
    frame = pd.DataFrame({"a": rng.integers(0, 3, 300), "b": rng.integers(0, 2, 300)})
    frame.iloc[:150].to_parquet(tmp_path / "parts" / "p0.parquet", index=False)
    frame.iloc[150:].to_parquet(tmp_path / "parts" / "p1.parquet", index=False)
    (tmp_path / "dom.json").write_text(json.dumps({"a": 3, "b": 2}))
    return {"ws": tmp_path, "parts": tmp_path / "parts", "dom": tmp_path / "dom.json",
            "counts": frame.groupby("a").size().reindex(range(3), fill_value=0)}


def marginals(inp: dict[str, Path], out: Path, *extra: object, attrs: str = "a") -> subprocess.CompletedProcess:
    return cli("marginals", inp["parts"], "--schema", inp["dom"], "--attrs", attrs, "--out", out, "--quiet", *extra)


def test_marginals_refuses_a_file_it_did_not_write(counts_input: dict) -> None:
    ws = counts_input["ws"]
    out = ws / "results.parquet"
    pd.DataFrame({"mine": [1.5, 2.5]}).to_parquet(out)  # a Parquet file of the user's, no privcube mark
    (ws / "notes.csv").write_text("a,b\n1,2\n")
    before = snapshot(ws)
    for target in (out, ws / "notes.csv"):
        msg = one_error_line(marginals(counts_input, target))
        assert repr(str(target)) in msg and "--force" in msg and "not written by privcube" in msg
    assert snapshot(ws) == before
    # --force replaces it, with the right counts
    r = marginals(counts_input, out, "--force")
    assert r.returncode == 0, r.stderr
    got = pd.read_parquet(out)
    assert list(got.columns) == ["a", "count"] and got["count"].tolist() == counts_input["counts"].tolist()


def test_marginals_replaces_its_own_file_atomically(counts_input: dict) -> None:
    """An earlier output of privcube marginals is replaced without --force (by a rename: no temporary file
    is left); a later command that fails keeps it byte for byte."""
    ws = counts_input["ws"]
    out = ws / "m.parquet"
    assert marginals(counts_input, out, attrs="b").returncode == 0
    assert marginals(counts_input, out).returncode == 0, "its own earlier file is replaced"
    assert pd.read_parquet(out)["count"].tolist() == counts_input["counts"].tolist()
    assert sorted(p.name for p in ws.iterdir()) == ["dom.json", "m.parquet", "parts"]
    before = snapshot(ws)
    msg = one_error_line(marginals(counts_input, out, attrs="a,zz"))
    assert "zz" in msg
    assert snapshot(ws) == before


def test_marginals_never_writes_over_its_inputs(counts_input: dict) -> None:
    """The data file, a file inside the data folder and the schema are refused even with --force; a folder
    and a missing parent folder are named."""
    ws, parts, dom = counts_input["ws"], counts_input["parts"], counts_input["dom"]
    before = snapshot(ws)
    for out, needle in ((parts / "p0.parquet", "is inside the input folder"), (parts / "new.parquet", "is inside"),
                        (dom, "is the input")):
        msg = one_error_line(marginals(counts_input, out, "--force"))
        assert needle in msg and repr(str(out)) in msg
    msg = one_error_line(cli("marginals", parts / "p1.parquet", "--schema", dom, "--attrs", "a", "--out",
                             parts / "p1.parquet", "--force"))
    assert "is the input" in msg
    assert "is a folder" in one_error_line(marginals(counts_input, ws))
    assert "does not exist" in one_error_line(marginals(counts_input, ws / "no" / "m.parquet"))
    assert snapshot(ws) == before


# ---- 3. plan shows the config warnings a run prints ------------------------------------------------------

@pytest.fixture()
def weak_job(tmp_path: Path) -> Path:
    """A single-table job with every config warning: a schema inferred from the data, delta 0.01 and
    privacy_unit.max_rows 200."""
    rng = np.random.default_rng(0)
    n = 400
    pd.DataFrame({"user": rng.integers(0, 100, n), "a": rng.integers(0, 3, n),
                  "b": rng.integers(0, 4, n)}).to_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"inferred_from_data": True, "attributes": [
        {"name": "a", "type": "integer", "size": 3}, {"name": "b", "type": "integer", "size": 4}]}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "data": {"path": "d.parquet", "schema": "s.yaml"}, "mechanism": {"name": "residual-planner"},
        "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 0.01}, "cluster": {"type": "threads"},
        "privacy_unit": {"id": "user", "max_rows": 200}}))
    return job


def test_plan_prints_the_warnings_a_run_prints(weak_job: Path) -> None:
    ws = weak_job.parent
    text = cli("plan", weak_job, cwd=ws)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("mechanism: residual-planner") and "warning" not in text.stdout
    plan_warnings = [ln for ln in text.stderr.splitlines() if ln.strip()]
    assert len(plan_warnings) == 3 and all(ln.startswith("privcube: warning: ") for ln in plan_warnings)
    assert "inferred_from_data: true" in plan_warnings[0]
    assert "privacy.delta = 0.01 is large" in plan_warnings[1]
    assert "privacy_unit.max_rows = 200 is large" in plan_warnings[2]
    js = cli("plan", weak_job, "--json", cwd=ws)
    assert js.returncode == 0, js.stderr
    plan = json.loads(js.stdout)  # stdout stays machine-readable; the lines go to stderr as well
    assert ["privcube: warning: " + w for w in plan["warnings"]] == plan_warnings == \
        [ln for ln in js.stderr.splitlines() if ln.strip()]
    assert f"expected RMSE per answer is {plan['rmse']:.3g}" in plan["warnings"][2]
    # the run prints the same lines at its end and keeps the same list in report.json
    run = cli("run", weak_job, "--out", ws / "r", "--quiet", "--no-report", cwd=ws)
    assert run.returncode == 0, run.stderr
    assert json.loads((ws / "r" / "report.json").read_text())["warnings"] == plan["warnings"]
    assert [ln for ln in run.stderr.splitlines() if ln.startswith("privcube: warning: ")] == plan_warnings


def test_plan_without_warnings_has_none(weak_job: Path) -> None:
    ws = weak_job.parent
    cfg = yaml.safe_load(weak_job.read_text())
    cfg["privacy"] = {"epsilon": 1.0, "delta": 1e-9}
    cfg.pop("privacy_unit")
    cfg["data"] = {"path": "d.parquet", "domain": {"a": 3, "b": 4}}
    weak_job.write_text(yaml.safe_dump(cfg))
    r = cli("plan", weak_job, "--json", cwd=ws)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    assert "warnings" not in json.loads(r.stdout)


def test_relational_plan_prints_a_part_s_large_delta(tmp_path: Path) -> None:
    cfg = _o2m_files(tmp_path)
    cfg["privacy"]["tables"]["children"]["delta"] = 0.01
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    r = cli("plan", tmp_path / "job.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith("privacy children.delta = 0.01 is large")
    assert r.stderr.strip() == f"privcube: warning: {warnings[0]}"
