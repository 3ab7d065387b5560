"""Integrity of a run (issue 15): a run owns its folder, configs say what they mean, every data file is read
or refused, bad input is one line, and a run folder's config.yaml can be run again."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.core.errors import DomainError, RunDirectoryError
from privcube.storage.outputs import lock_path, run_lock


def cli(*args: str, cwd: Path | None = None, timeout: int = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, **kw)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    """The run failed with exit 2 and exactly one stderr line, no traceback; returns that line."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and lines[0].startswith("privcube: error: "), r.stderr
    return lines[0]


@pytest.fixture()
def job(tmp_path: Path) -> dict:
    """An integer-coded table in three Parquet files, its domain, and a config writer."""
    rng = np.random.default_rng(3)
    n = 3000
    frame = pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 4, n), "c": rng.integers(0, 2, n)})
    (tmp_path / "parts").mkdir()
    for i, idx in enumerate(np.array_split(np.arange(n), 3)):
        frame.iloc[idx].to_parquet(tmp_path / "parts" / f"p{i}.parquet", index=False)
    (tmp_path / "dom.json").write_text(json.dumps({"a": 3, "b": 4, "c": 2}))

    def config(name: str = "job.yaml", epsilon: float = 1.0, data: str = "parts", **over) -> Path:
        cfg = {"data": {"path": data, "domain": "dom.json"}, "mechanism": {"name": "residual-planner"},
               "workload": [{"kway": 1}, {"kway": 2}], "privacy": {"epsilon": epsilon, "delta": 1e-6},
               "cluster": {"type": "threads"}, **over}
        p = tmp_path / name
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return p

    return {"dir": tmp_path, "frame": frame, "config": config}


def answers(folder: Path) -> dict[str, pd.DataFrame]:
    return {p.name: pd.read_parquet(p) for p in sorted((folder / "answers").glob("*.parquet"))}


def assert_same_answers(a: Path, b: Path) -> None:
    fa, fb = answers(a), answers(b)
    assert fa and list(fa) == list(fb)
    for name in fa:
        pd.testing.assert_frame_equal(fa[name], fb[name])


# ---- 1. a run owns its folder ------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys
    from privcube.storage.outputs import run_lock
    with run_lock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()
""")


def hold_lock_in_other_process(out: Path) -> subprocess.Popen:
    """Another process that holds ``out``'s run lock until its stdin is closed."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def release(p: subprocess.Popen) -> None:
    p.stdin.close()
    assert p.wait(timeout=30) == 0


def test_two_concurrent_runs_on_one_folder_one_is_refused(job, main_cli):
    """A first `privcube run` (seed 1, eps 1) is paused while it owns --out; a second (seed 2, eps 4) on the
    same folder is refused in one line naming it; the folder then holds exactly the first run."""
    d = job["dir"]
    first_cfg, second_cfg = job["config"]("one.yaml", epsilon=1.0), job["config"]("four.yaml", epsilon=4.0)
    out = d / "out"
    first = subprocess.Popen([sys.executable, "-m", "privcube", "run", str(first_cfg), "--out", str(out),
                              "--seed", "1", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = lock_path(out)
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip() == str(first.pid)):  # pid written once locked
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.005)
    os.kill(first.pid, signal.SIGSTOP)  # the first run now owns the folder and stands still
    try:
        second = cli("run", str(second_cfg), "--out", str(out), "--seed", "2", "--quiet")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    line = one_line_error(second)
    assert repr(str(out)) in line and "in use by another privcube run" in line
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    ref = d / "ref"
    assert main_cli("run", str(first_cfg), "--out", str(ref), "--seed", "1", "--quiet").returncode == 0
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["budget"]["epsilon"] == pytest.approx(1.0) and ledger["noise"]["seed"] == 1
    assert ledger == json.loads((ref / "ledger.json").read_text())
    assert_same_answers(out, ref)
    assert not lock.exists()  # released and removed


def test_folder_locked_by_another_process_refuses_run_overwrite_and_resume(job, main_cli):
    d = job["dir"]
    cfg, out = job["config"](), d / "runs" / "out"
    holder = hold_lock_in_other_process(out)
    try:
        for extra in ([], ["--overwrite"], ["--resume"]):
            line = one_line_error(main_cli("run", str(cfg), "--out", str(out), "--seed", "1", "--quiet", *extra))
            assert repr(str(out)) in line and f"process {holder.pid}" in line
        assert not out.exists()  # refused before anything was written
    finally:
        release(holder)
    assert not lock_path(out).exists() and not (d / "runs").exists()  # the holder cleaned up what it made
    assert main_cli("run", str(cfg), "--out", str(out), "--seed", "1", "--quiet").returncode == 0
    holder = hold_lock_in_other_process(out)
    try:  # --overwrite of a finished run: refused while another run owns it, the finished run untouched
        before = (out / "ledger.json").read_bytes()
        one_line_error(main_cli("run", str(cfg), "--out", str(out), "--seed", "2", "--overwrite", "--quiet"))
        assert (out / "ledger.json").read_bytes() == before and (out / ".complete").exists()
    finally:
        release(holder)
    assert main_cli("run", str(cfg), "--out", str(out), "--seed", "2", "--overwrite", "--quiet").returncode == 0
    assert json.loads((out / "ledger.json").read_text())["noise"]["seed"] == 2


def test_relational_job_takes_the_same_lock(tmp_path):
    from relational_files import _o2m_files

    from privcube.api import run_job
    from privcube.jobs import load_job

    raw = _o2m_files(tmp_path)
    out = tmp_path / "rel"
    holder = hold_lock_in_other_process(out)
    try:
        with pytest.raises(RunDirectoryError, match="in use by another privcube run"):
            run_job(load_job(raw, base=tmp_path), out, seed=1, quiet=True)
        with pytest.raises(RunDirectoryError, match="in use by another privcube run"):
            api.run(raw, out, seed=1, quiet=True)
    finally:
        release(holder)
    assert not out.exists()


def test_run_lock_is_reentrant_per_thread_and_exclusive_across_threads(tmp_path):
    out = tmp_path / "x"
    refused = []
    with run_lock(out):
        with run_lock(out):  # the same thread (api.run -> api.run_job) takes it again
            assert lock_path(out).exists()

        def other() -> None:
            try:
                with run_lock(out):
                    pass
            except RunDirectoryError as e:
                refused.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert lock_path(out).exists()
    assert len(refused) == 1 and repr(str(out)) in refused[0]
    assert not lock_path(out).exists()
    with pytest.raises(RunDirectoryError, match="folder path"):
        with run_lock(12345):  # type: ignore[arg-type]
            pass
    (tmp_path / "victim").write_text("precious\n")  # a symlink planted where the lock file goes
    lock_path(out).symlink_to(tmp_path / "victim")
    with pytest.raises(RunDirectoryError, match="cannot lock output directory"):
        with run_lock(out):
            pass
    assert (tmp_path / "victim").read_text() == "precious\n"


def test_stale_lock_file_of_a_killed_run_does_not_block(job, main_cli):
    """SIGKILL leaves the lock file behind but the kernel dropped the lock: the next run proceeds."""
    d = job["dir"]
    out = d / "out"
    lock_path(out).write_text("999999\n")
    r = main_cli("run", str(job["config"]()), "--out", str(out), "--seed", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    assert (out / ".complete").exists() and not lock_path(out).exists()


def test_bad_input_leaves_no_lock_and_no_folder(job, main_cli):
    d = job["dir"]
    cfg = job["config"](workload=[{"kway": 1, "attributes": ["nope"]}])
    r = main_cli("run", str(cfg), "--out", str(d / "new" / "deep" / "out"), "--quiet")
    assert r.returncode == 2
    assert not (d / "new").exists()


# ---- 2. duplicate keys ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, key, line", [  # line: of the repeated key, within `text`
    ("privacy: {epsilon: 1.0, delta: 1.0e-6}\nprivacy:\n  epsilon: 4.0\n", "privacy", 2),
    ("privacy:\n  epsilon: 1.0\n  delta: 1.0e-6\n  epsilon: 4.0\n", "epsilon", 4),
    ("privacy: {epsilon: 1.0, epsilon: 4.0, delta: 1.0e-6}\n", "epsilon", 1),
    ("workload:\n  - {kway: 1, weight: 1, weight: 5}\nprivacy: {epsilon: 1.0, delta: 1.0e-6}\n", "weight", 2),
])
def test_duplicate_keys_refused(job, text, key, line, main_cli):
    d = job["dir"]
    body = "data: {path: parts, domain: dom.json}\nmechanism: {name: residual-planner}\n"
    if not text.startswith("workload"):
        body += "workload: [{kway: 1}]\n"
    p = d / "dup.yaml"
    p.write_text(body + text)
    expect_line = body.count("\n") + line
    for command in (["plan", str(p)], ["run", str(p), "--out", str(d / "o"), "--quiet"]):
        msg = one_line_error(main_cli(*command))
        assert f"duplicate key {key!r} at line {expect_line}" in msg and "dup.yaml" in msg
    assert not (d / "o").exists()


def test_invalid_yaml_is_one_line_with_its_position(job, main_cli):
    d = job["dir"]
    (d / "broken.yaml").write_text("data: {path: parts, domain: dom.json}\nworkload: [{kway: 1}\n")
    msg = one_line_error(main_cli("plan", str(d / "broken.yaml")))
    assert "broken.yaml" in msg and "not valid YAML" in msg and "(line 3, column 1)" in msg


def test_duplicate_keys_in_schema_and_domain_files_refused(job, tmp_path):
    from privcube.config import load_config
    from privcube.storage.schema import load_schema

    (tmp_path / "s.yaml").write_text("attributes:\n  - {name: a, type: integer, size: 3, size: 9}\n")
    with pytest.raises(DomainError, match="duplicate key 'size' at line 2"):
        load_schema(tmp_path / "s.yaml")
    (tmp_path / "d.json").write_text('{"a": 3, "b": 4, "a": 9}')
    with pytest.raises(DomainError, match="duplicate key 'a'"):
        load_schema(tmp_path / "d.json")
    with pytest.raises(DomainError, match="duplicate key 'a'"):
        load_config({"domain": str(tmp_path / "d.json"), "mechanism": "residual-planner",
                     "workload": [{"kway": 1}], "privacy": {"rho": 1}}, need_data=False)


def test_yaml_merge_keys_still_override(job):
    """`<<: *anchor` then an explicit key is YAML's documented override, not a duplicate."""
    d = job["dir"]
    p = d / "merge.yaml"
    p.write_text("data: {path: parts, domain: dom.json}\nmechanism: {name: residual-planner}\n"
                 "workload: [{kway: 1}]\nx-base: &b {epsilon: 1.0, delta: 1.0e-6}\n"
                 "privacy: {<<: *b, epsilon: 2.0}\n")
    from privcube.config import read_config_file

    raw, _ = read_config_file(p)
    assert raw["privacy"] == {"epsilon": 2.0, "delta": 1e-6}


# ---- 7d. a run folder's config.yaml runs again as it is --------------------------------------------

def test_saved_config_yaml_round_trips_through_plan_and_run(job, tmp_path, main_cli):
    d = job["dir"]
    cfg = job["config"]()
    first = d / "first"
    assert main_cli("run", str(cfg), "--out", str(first), "--seed", "5", "--quiet").returncode == 0
    saved = first / "config.yaml"
    assert "resolved" in yaml.safe_load(saved.read_text())
    plan_a, plan_b = main_cli("plan", str(cfg), "--json"), main_cli("plan", str(saved), "--json")
    assert plan_a.returncode == 0 and plan_b.returncode == 0, plan_b.stderr
    assert json.loads(plan_a.stdout) == json.loads(plan_b.stdout)
    elsewhere = tmp_path / "elsewhere"  # run from another folder: no path depends on the caller
    elsewhere.mkdir()
    again = d / "again"
    r = main_cli("run", str(saved), "--out", str(again), "--seed", "5", "--quiet", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert_same_answers(first, again)
    assert json.loads((first / "ledger.json").read_text()) == json.loads((again / "ledger.json").read_text())
    # the resolved record is verified: a domain file changed since the run is named, not silently used
    (d / "dom.json").write_text(json.dumps({"a": 3, "b": 4, "c": 3}))
    msg = one_line_error(main_cli("plan", str(saved)))
    assert "resolved.domain" in msg


# ---- 3. every data file of a folder is read, or the input is refused ------------------------------

def test_folder_mixing_parquet_and_csv_is_refused(job, main_cli):
    d = job["dir"]
    job["frame"].iloc[:10].to_csv(d / "parts" / "extra.csv", index=False)
    cfg = job["config"]()
    for command in (["run", str(cfg), "--out", str(d / "o"), "--quiet"],
                    ["marginals", str(d / "parts"), "--schema", str(d / "dom.json"), "--attrs", "a",
                     "--out", str(d / "m.parquet")],
                    ["schema", "infer", str(d / "parts")]):
        msg = one_line_error(main_cli(*command))
        assert "mixes Parquet and CSV" in msg and "p0.parquet" in msg and "extra.csv" in msg
    assert not (d / "o").exists() and not (d / "m.parquet").exists()
    (d / "parts" / "extra.csv").unlink()
    (d / "parts" / "README.md").write_text("not data: a Parquet folder's other files are not read, as in Dask\n")
    r = main_cli("marginals", str(d / "parts"), "--schema", str(d / "dom.json"), "--attrs", "a", "--out",
            str(d / "m.parquet"))
    assert r.returncode == 0, r.stderr
    assert int(pd.read_parquet(d / "m.parquet")["count"].sum()) == len(job["frame"])


def test_csv_variants_in_one_folder_are_all_read_without_warnings(job, main_cli):
    """a.csv + b.csv.gz + c.csv (columns in another order): every row counted, and Dask's gzip
    warning does not reach the user's terminal."""
    d = job["dir"]
    frame = job["frame"]
    folder = d / "csvs"
    folder.mkdir()
    parts = np.array_split(np.arange(len(frame)), 3)
    frame.iloc[parts[0]].to_csv(folder / "a.csv", index=False)
    frame.iloc[parts[1]].to_csv(folder / "b.csv.gz", index=False)
    frame.iloc[parts[2]][["c", "b", "a"]].to_csv(folder / "c.csv", index=False)
    r = main_cli("marginals", str(folder), "--schema", str(d / "dom.json"), "--attrs", "a,b", "--out",
            str(d / "m.parquet"))
    assert r.returncode == 0, r.stderr
    got = pd.read_parquet(d / "m.parquet").set_index(["a", "b"])["count"]
    expect = frame.groupby(["a", "b"]).size()
    assert int(got.sum()) == len(frame) == 3000
    pd.testing.assert_series_equal(got[expect.index].rename(None), expect.rename(None), check_names=False,
                                   check_dtype=False)
    from privcube.storage.ingest import open_table

    for given in (str(folder / "*"), [str(folder / "b.csv.gz"), str(folder / "c.csv")]):  # a glob, a list
        counted = open_table(given, d / "dom.json").to_pandas()
        assert len(counted) == (3000 if isinstance(given, str) else 2000)
    r = cli("run", str(job["config"](data="csvs")), "--out", str(d / "o"), "--seed", "1")  # progress bars on
    assert r.returncode == 0, r.stderr
    assert "warn" not in r.stderr.lower(), r.stderr
    assert json.loads((d / "o" / "report.json").read_text())["sizes"]["partitions"] >= 3


# ---- 4. one line, not a traceback ---------------------------------------------------------------

def _renamed_parquet(d: Path, frame: pd.DataFrame) -> Path:
    folder = d / "renamed"
    folder.mkdir()
    frame.iloc[:1500].to_parquet(folder / "p0.parquet", index=False)
    frame.iloc[1500:].rename(columns={"b": "B"}).to_parquet(folder / "p1.parquet", index=False)
    return folder


def _renamed_csv(d: Path, frame: pd.DataFrame) -> Path:
    folder = d / "renamed_csv"
    folder.mkdir()
    frame.iloc[:1500].to_csv(folder / "p0.csv", index=False)
    frame.iloc[1500:].rename(columns={"b": "B"}).to_csv(folder / "p1.csv", index=False)
    return folder


def test_renamed_column_in_a_later_file_is_one_line_naming_file_and_column(job, main_cli):
    d = job["dir"]
    for folder in (_renamed_parquet(d, job["frame"]), _renamed_csv(d, job["frame"])):
        cfg = job["config"](data=folder.name)
        msg = one_line_error(main_cli("run", str(cfg), "--out", str(d / "o"), "--quiet"))
        assert "'b'" in msg and "p1." in msg and str(folder) in msg
        msg = one_line_error(main_cli("marginals", str(folder), "--schema", str(d / "dom.json"), "--attrs", "a,b",
                                 "--out", str(d / "m.parquet")))
        assert "'b'" in msg and "p1." in msg
        assert not (d / "o").exists() and not (d / "m.parquet").exists()
    for ext in ("parquet", "csv"):  # the FIRST file renamed: still named, not "missing from the data"
        folder = d / f"first_{ext}"
        folder.mkdir()
        frame = job["frame"]
        for i, part in enumerate((frame.iloc[:1500].rename(columns={"b": "B"}), frame.iloc[1500:])):
            getattr(part, f"to_{ext}")(folder / f"p{i}.{ext}", index=False)
        msg = one_line_error(main_cli("marginals", str(folder), "--schema", str(d / "dom.json"), "--attrs", "a,b",
                                "--out", str(d / "m.parquet")))
        assert "column 'b' is missing from file" in msg and f"p0.{ext}" in msg


def test_renamed_column_found_while_counting_is_a_data_error(job):
    """Safety net when a frame bypasses ingest's up-front check: the reader's KeyError becomes a DataError."""
    import dask.dataframe as dd

    from privcube.core.domain import Domain
    from privcube.core.errors import DataError
    from privcube.graphs.marginals import compute_marginals

    folder = _renamed_parquet(job["dir"], job["frame"])
    with pytest.raises(DataError, match=r"lacks column\(s\) \['b'\]"):
        compute_marginals(dd.read_parquet(folder), Domain(("a", "b"), (3, 4)), [("a", "b")])


@pytest.mark.parametrize("case", ["empty-csv-run", "corrupt-parquet-run", "corrupt-in-folder", "show-parquet",
                                  "show-csv", "infer-empty-csv", "infer-corrupt-parquet"])
def test_bad_files_are_one_line(job, case, main_cli):
    d = job["dir"]
    (d / "empty.csv").write_bytes(b"")
    (d / "corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file at all")
    job["frame"].to_parquet(d / "good.parquet", index=False)
    (d / "parts" / "p9.parquet").write_bytes(b"garbage")
    expect = {
        "empty-csv-run": (["run", str(job["config"]("e.yaml", data="empty.csv")), "--out", str(d / "o"), "--quiet"],
                          ["empty.csv", "is empty"]),
        "corrupt-parquet-run": (["run", str(job["config"]("c.yaml", data="corrupt.parquet")), "--out", str(d / "o"), "--quiet"],
                                ["corrupt.parquet", "not a readable Parquet file"]),
        "corrupt-in-folder": (["run", str(job["config"]("f.yaml")), "--out", str(d / "o"), "--quiet"],
                              ["p9.parquet", "not a readable Parquet file"]),
        "show-parquet": (["schema", "show", str(d / "good.parquet")], ["good.parquet", "not a schema"]),
        "show-csv": (["schema", "show", str(d / "empty.csv")], ["empty.csv", "not a schema"]),
        "infer-empty-csv": (["schema", "infer", str(d / "empty.csv")], ["empty.csv", "is empty"]),
        "infer-corrupt-parquet": (["schema", "infer", str(d / "corrupt.parquet")],
                                  ["corrupt.parquet", "not a readable Parquet file"]),
    }
    command, words = expect[case]
    msg = one_line_error(main_cli(*command))
    for w in words:
        assert w in msg, msg
    assert "Original Message" not in msg and not (d / "o").exists()
    (d / "copy.parquet").write_bytes((d / "good.parquet").read_bytes())  # binary without a telling suffix
    (d / "copy.schema").write_bytes((d / "good.parquet").read_bytes())
    assert "not text" in one_line_error(main_cli("schema", "show", str(d / "copy.schema")))


# ---- 6. no private value in relational messages ---------------------------------------------------

def test_relational_errors_hold_no_record_id_and_no_degree(tmp_path, main_cli):
    import re

    from relational_files import _o2m_files

    raw = _o2m_files(tmp_path)
    children = pd.read_parquet(tmp_path / "children.parquet")
    degrees = children["parent_id"].value_counts()
    assert degrees.max() > 4  # the d_max below is exceeded
    raw["mechanism"]["d_max"] = 4
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(raw))
    msg = one_line_error(main_cli("run", str(tmp_path / "job.yaml"), "--out", str(tmp_path / "o"), "--quiet"))
    assert "d_max=4" in msg and ("'children'" in msg or "'parents'" in msg)
    assert re.findall(r"\d+", msg) == ["4"], msg  # neither the exact degree nor a numeric id
    assert not re.search(r"p\d{3}", msg), msg  # no parent id
    # a repeated key, an unknown foreign key: the column is named, the id value is not
    parents = pd.read_parquet(tmp_path / "parents.parquet")
    parents.loc[7, "id"] = parents.loc[3, "id"]
    parents.to_parquet(tmp_path / "parents_dup.parquet")
    children.loc[11, "parent_id"] = "p-secret"
    children.to_parquet(tmp_path / "children_bad.parquet")
    for table, path, words in (("parents", "parents_dup.parquet", "repeats a value"),
                               ("children", "children_bad.parquet", "is not a key")):
        bad = json.loads(json.dumps(_o2m_files(tmp_path)))
        bad["data"]["tables"][table]["path"] = path
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
        msg = one_line_error(main_cli("run", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o"), "--quiet"))
        assert words in msg and not re.search(r"p\d{3}|p-secret", msg), msg
    assert not (tmp_path / "o").exists()


# ---- 7a. NaN under a {column: size} domain ----------------------------------------------------------

def test_nan_under_an_integer_domain_suggests_a_rich_schema(job, main_cli):
    d = job["dir"]
    frame = job["frame"].astype(float)
    frame.loc[17, "b"] = np.nan
    frame.to_parquet(d / "nan.parquet", index=False)
    frame.to_csv(d / "nan.csv", index=False)
    for data in ("nan.parquet", "nan.csv"):
        msg = one_line_error(main_cli("run", str(job["config"](f"{data}.yaml", data=data)), "--out", str(d / "o"),
                                 "--quiet"))
        assert "column 'b'" in msg and "{column: size} cannot hold missing values" in msg
        assert "missing: code" in msg and "size: 4" in msg
        assert "the schema has missing: error" not in msg  # the user has no schema and no such setting
    assert not (d / "o").exists()


# ---- 7b. SIGINT: a line of its own, and what to do next ---------------------------------------------

@pytest.fixture()
def big(tmp_path: Path) -> Path:
    """30 Parquet files of 100k rows: a read long enough to interrupt mid-progress-bar."""
    rng = np.random.default_rng(0)
    (tmp_path / "big").mkdir()
    for i in range(30):
        pd.DataFrame({k: rng.integers(0, s, 100_000).astype(np.int8) for k, s in (("a", 3), ("b", 4), ("c", 2))}
                     ).to_parquet(tmp_path / "big" / f"p{i:02d}.parquet", index=False)
    return tmp_path


def _interrupt(args: list[str], ready, cwd: Path) -> tuple[int, str]:
    """Run the CLI; once ``ready(stderr so far)`` holds, freeze it (SIGSTOP), queue SIGINT, let it go on."""
    p = subprocess.Popen([sys.executable, "-m", "privcube", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=cwd)
    buf = bytearray()

    def read() -> None:
        while chunk := os.read(p.stderr.fileno(), 4096):
            buf.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not ready(bytes(buf)):
            assert p.poll() is None and time.monotonic() < deadline, bytes(buf).decode()[-2000:]
            time.sleep(0.002)
        os.kill(p.pid, signal.SIGSTOP)
        os.kill(p.pid, signal.SIGINT)
        os.kill(p.pid, signal.SIGCONT)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    reader.join(timeout=30)
    return p.returncode, bytes(buf).decode()


def _message_line(err: str, start: str) -> str:
    lines = [ln for ln in err.split("\n") if start in ln]
    assert len(lines) == 1, err
    assert lines[0].startswith(start), f"glued to the previous output: {lines[0]!r}"
    return lines[0]


def test_sigint_during_the_data_pass_starts_a_fresh_line_and_says_nothing_was_written(big):
    cfg = big / "job.yaml"
    cfg.write_text(yaml.safe_dump({"data": {"path": "big", "domain": {"a": 3, "b": 4, "c": 2}},
                                   "mechanism": {"name": "residual-planner"}, "workload": [{"kway": 2}],
                                   "privacy": {"epsilon": 1.0, "delta": 1e-6}, "cluster": {"type": "threads"}}))
    out = big / "out"
    code, err = _interrupt(["run", str(cfg), "--out", str(out), "--seed", "1"],
                           lambda b: b"exact marginals [" in b, big)
    assert code == 130, err
    line = _message_line(err, "privcube: interrupted")
    assert "SIGINT" in line and "nothing was written" in line and "Traceback" not in err
    assert not out.exists() and not lock_path(out).exists()


def test_sigint_after_a_checkpoint_gives_the_resume_hint_and_resume_completes(big, main_cli):
    cfg = big / "aim.yaml"
    cfg.write_text(yaml.safe_dump({"data": {"path": "big", "domain": {"a": 3, "b": 4, "c": 2}},
                                   "mechanism": {"name": "aim-grem"}, "workload": [{"kway": 2}],
                                   "privacy": {"epsilon": 1.0, "delta": 1e-6}, "cluster": {"type": "threads"}}))
    out = big / "out"
    current = out / "store.zarr" / "checkpoint" / "CURRENT"
    code, err = _interrupt(["run", str(cfg), "--out", str(out), "--seed", "3"],
                           lambda b: current.exists() and b"aim-grem:" in b, big)
    assert code == 130, err
    line = _message_line(err, "privcube: interrupted")
    assert "--resume" in line and "Traceback" not in err
    assert not (out / ".complete").exists()
    r = main_cli("run", str(cfg), "--out", str(out), "--seed", "3", "--resume", "--quiet", cwd=big)
    assert r.returncode == 0, r.stderr
    ref = big / "ref"
    assert main_cli("run", str(cfg), "--out", str(ref), "--seed", "3", "--quiet", cwd=big).returncode == 0
    assert_same_answers(out, ref)


def test_relational_saved_config_yaml_runs_again_as_it_is(tmp_path, main_cli):
    from relational_files import _o2m_files

    (tmp_path / "job.yaml").write_text(yaml.safe_dump(_o2m_files(tmp_path)))
    first, again = tmp_path / "first", tmp_path / "again"
    assert main_cli("run", str(tmp_path / "job.yaml"), "--out", str(first), "--seed", "2", "--quiet").returncode == 0
    saved = first / "config.yaml"
    assert "resolved" in yaml.safe_load(saved.read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = main_cli("run", str(saved), "--out", str(again), "--seed", "2", "--quiet", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    for name in ("parents.parquet", "children.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(first / "synthetic" / name),
                                      pd.read_parquet(again / "synthetic" / name))
    (tmp_path / "children.yaml").write_text(yaml.safe_dump({"attributes": [
        {"name": "kind", "type": "categorical", "categories": ["view", "click"]},
        {"name": "device", "type": "integer", "size": 4},
        {"name": "hour", "type": "numeric", "bins": [0, 6, 12, 18, 24], "missing": "code"}]}))
    msg = one_line_error(main_cli("run", str(saved), "--out", str(tmp_path / "third"), "--quiet"))
    assert "resolved.schemas" in msg


def test_damaged_parquet_data_page_is_one_line_and_no_folder(job, main_cli):
    """A file whose footer parses but whose data pages are damaged fails while partitions are read: one
    line (exit 2), nothing written, no data value in the message."""
    d = job["dir"]
    victim = d / "parts" / "p1.parquet"
    rng = np.random.default_rng(0)
    big = pd.DataFrame({"a": rng.integers(0, 3, 100_000), "b": rng.integers(0, 4, 100_000),
                        "c": rng.integers(0, 2, 100_000)})
    big.to_parquet(victim, index=False, row_group_size=20_000)
    raw = bytearray(victim.read_bytes())
    for k in range(len(raw) // 3, len(raw) // 3 + 200):  # inside the column chunks; the footer stays intact
        raw[k] ^= 0x5A
    victim.write_bytes(bytes(raw))
    r = main_cli("run", str(job["config"]()), "--out", str(d / "out"), "--quiet")
    line = one_line_error(r)
    assert "could not be read" in line and "damaged or truncated" in line, line
    assert not (d / "out").exists()
