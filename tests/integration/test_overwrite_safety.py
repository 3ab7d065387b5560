"""Nothing of the user's lost (issue 33, items 1, 2, 3, 7 (``--out``), 10): a run deletes or replaces only
files privcube wrote. Every case is run as a user would hit it (the ``privcube`` command, real files) and
checked the same way: the user's files are still there byte for byte, one line on stderr, exit code 2, and
nothing new written anywhere in the workspace (no run folder, no lock file, no copy)."""
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

from privcube import api
from privcube.core.errors import DataError, RunDirectoryError
from run_checks import one_line_error, snapshot

SCHEMA = {"attributes": [{"name": "age", "type": "integer", "size": 5},
                         {"name": "sex", "type": "categorical", "categories": ["F", "M"]}]}


def refused(main_cli, ws: Path, *args: str, needle: str | tuple[str, ...], cwd: Path | None = None) -> str:
    """``privcube ARGS`` is refused in one line holding ``needle`` and leaves the workspace ``ws`` as it was."""
    before = snapshot(ws)
    line = one_line_error(main_cli(*args, cwd=cwd))
    for n in (needle,) if isinstance(needle, str) else needle:
        assert n in line, line
    assert snapshot(ws) == before, line  # the user's files byte for byte, nothing new (no folder, lock, copy)
    return line


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    """A user's workspace: ``mydata/people.parquet`` and ``mydata/schema.yaml``."""
    rng = np.random.default_rng(7)
    (tmp_path / "mydata").mkdir()
    pd.DataFrame({"age": rng.integers(0, 5, 400), "sex": rng.choice(["F", "M"], 400)}).to_parquet(
        tmp_path / "mydata" / "people.parquet", index=False)
    (tmp_path / "mydata" / "schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    return tmp_path


def job(ws: Path, name: str = "job.yaml", output: dict | None = None, data: str = "mydata/people.parquet",
        mechanism: str = "residual-planner") -> str:
    """A small job config in the workspace (paths relative to it); returns its path."""
    cfg = {"data": {"path": data, "schema": "mydata/schema.yaml"}, "mechanism": {"name": mechanism},
           "workload": [{"kway": 1}, {"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-9},
           "cluster": {"type": "threads"}, **({"output": output} if output else {})}
    (ws / name).write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(ws / name)


def finished_run(main_cli, ws: Path, out: Path, cfg: str, seed: str = "1") -> None:
    r = main_cli("run", cfg, "--out", str(out), "--seed", seed, "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    assert (out / ".complete").exists()


# ---- 1. the input data and schema are never an output --------------------------------------------

def test_answers_in_the_data_folder_is_refused_with_or_without_overwrite(main_cli, ws):
    """Issue 33 case 1: ``output: {answers: mydata}`` with the data and schema in ``mydata/``; the refusal
    used to suggest --overwrite, which then left mydata/ holding only answer files."""
    cfg = job(ws, output={"answers": "mydata"})
    for extra in ([], ["--overwrite"]):
        line = refused(main_cli, ws, "run", cfg, "--out", str(ws / "o" / "x"), "--quiet", *extra,
                       needle=("output.answers", "mydata", "contains the input"))
        assert "--overwrite" not in line  # the message never suggests the flag that would delete the data
    import privcube

    with pytest.raises(RunDirectoryError, match="contains the input"):  # the Python API the same
        privcube.run(cfg, ws / "o" / "x", quiet=True, overwrite=True)
    assert (ws / "mydata" / "people.parquet").exists() and not (ws / "o").exists()


@pytest.mark.parametrize(("data", "answers", "needle"), [
    ("mydata", "mydata/answers", "is inside the input"),                 # a copy inside the data folder
    ("mydata/people.parquet", "mydata/schema.yaml", "is the input"),      # the schema file itself
    ("mydata/people.parquet", ".", "contains the input"),                # the folder above the data
    ("mydata/*.parquet", "mydata/pub", "is inside the input"),           # inside a glob's folder
])
def test_a_published_copy_on_around_or_inside_the_inputs_is_refused(main_cli, ws, data, answers, needle):
    cfg = job(ws, output={"answers": answers}, data=data)
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "run"), "--overwrite", "--quiet", needle=("output.answers", needle))


def test_zarr_copy_on_the_data_is_refused(main_cli, ws):
    cfg = job(ws, output={"zarr": "mydata"})
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "run"), "--overwrite", "--quiet",
            needle=("output.zarr", "contains the input"))


def test_run_folder_inside_the_data_folder_is_refused(main_cli, ws):
    """--out inside a data folder read whole: the run's Parquet files would be read as data next time."""
    cfg = job(ws, data="mydata")
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "mydata" / "run"), "--quiet", needle="is inside the input")
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "mydata"), "--overwrite", "--quiet", needle="did not write")


# ---- 2. a folder holding other files is never replaced -------------------------------------------

def test_answers_folder_with_other_files_is_refused_even_with_overwrite(main_cli, ws):
    """Issue 33 case 2: --overwrite deleted any other file in an existing output.answers folder."""
    (ws / "pub").mkdir()
    (ws / "pub" / "keep.txt").write_text("mine")
    cfg = job(ws, output={"answers": "pub"})
    for extra in ([], ["--overwrite"]):
        line = refused(main_cli, ws, "run", cfg, "--out", str(ws / "run"), "--quiet", *extra,
                       needle=("output.answers", "'keep.txt'", "did not write"))
        assert "--overwrite" not in line.split("did not write")[1]
    with pytest.raises(RunDirectoryError, match="did not write"):
        api.run(cfg, ws / "run", quiet=True, overwrite=True)
    assert (ws / "pub" / "keep.txt").read_text() == "mine" and not (ws / "run").exists()


def test_a_copy_privcube_published_is_replaced_only_under_overwrite_and_only_while_it_holds_nothing_else(main_cli, ws):
    cfg = job(ws, output={"answers": "pub/answers", "zarr": "pub/store.zarr"})
    finished_run(main_cli, ws, ws / "r1", cfg)
    assert (ws / "pub" / "answers" / "index.json").exists() and (ws / "pub" / "store.zarr" / "zarr.json").exists()
    # without --overwrite an earlier copy is kept, and the message says how to replace it
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "r2"), "--quiet", needle=("already exists", "--overwrite"))
    r = main_cli("run", cfg, "--out", str(ws / "r2"), "--seed", "2", "--overwrite", "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    for f in (ws / "r2" / "answers").glob("*.parquet"):  # the copy now is the second run's
        assert (ws / "pub" / "answers" / f.name).read_bytes() == f.read_bytes()
    assert not [p for p in (ws / "pub").iterdir() if p.name.startswith(".")]  # no staging folder left
    # a file of the user's in either copy (or an empty folder of theirs): refused, --overwrite or not
    for where in ("pub/answers/notes.txt", "pub/store.zarr/notes.txt", "pub/answers/mine/"):
        p = ws / where
        p.mkdir() if where.endswith("/") else p.write_text("mine")
        refused(main_cli, ws, "run", cfg, "--out", str(ws / "r3"), "--overwrite", "--quiet",
                needle=("did not write", repr(Path(where).name + ("/" if where.endswith("/") else ""))))
        p.rmdir() if where.endswith("/") else p.unlink()


def test_copy_without_privcube_manifest_is_not_replaced(main_cli, ws):
    """A folder that looks like answers but carries no manifest (not written by privcube) is not replaced."""
    (ws / "pub").mkdir()
    (ws / "pub" / "index.json").write_text("{}")
    cfg = job(ws, output={"answers": "pub"})
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "run"), "--overwrite", "--quiet", needle="'index.json'")


def test_answers_and_zarr_copies_must_not_overlap(main_cli, ws):
    cfg = job(ws, output={"answers": "pub", "zarr": "pub/store.zarr"})
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "run"), "--quiet", needle="overlap")


def test_finished_run_folder_with_other_files_is_not_overwritten(main_cli, ws):
    """--overwrite moves aside a previous run only when the run folder holds nothing but that run."""
    cfg = job(ws)
    out = ws / "run"
    finished_run(main_cli, ws, out, cfg)
    for extra in ("notes.txt", "answers/notes.txt", "store.zarr/mine/"):
        p = out / extra
        p.mkdir() if extra.endswith("/") else p.write_text("mine")
        line = refused(main_cli, ws, "run", cfg, "--out", str(out), "--overwrite", "--quiet", needle="did not write")
        assert repr(extra.rstrip("/") + ("/" if extra.endswith("/") else "")) in line, line
        p.rmdir() if extra.endswith("/") else p.unlink()
    # without other files (report.html, written after the run, is privcube's): replaced, the old run gone
    (out / "report.html").write_text("<html></html>")
    old = json.loads((out / "ledger.json").read_text())
    r = main_cli("run", cfg, "--out", str(out), "--seed", "2", "--overwrite", "--quiet", "--no-report")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "report.json").read_text())["noise"]["seed"] == 2 and old["noise"]["seed"] == 1
    assert not list(ws.glob(".run.replaced-*")) and not (out / ".started").exists()


def test_finished_run_message_offers_overwrite_only_when_it_would_work(main_cli, ws):
    cfg = job(ws)
    out = ws / "run"
    finished_run(main_cli, ws, out, cfg)
    assert "--overwrite to replace it" in refused(main_cli, ws, "run", cfg, "--out", str(out), "--quiet",
                                                    needle="finished run")
    (out / "notes.txt").write_text("mine")
    line = refused(main_cli, ws, "run", cfg, "--out", str(out), "--quiet", needle=("finished run", "'notes.txt'"))
    assert "--overwrite is refused" in line


# ---- 3. the run folder is never a copy's destination -------------------------------------------

@pytest.mark.parametrize("answers", ["o/x", "o/x/answers", "o", "o/.x.lock"])
def test_answers_on_inside_or_around_the_run_folder_is_refused(main_cli, ws, answers):
    """Issue 33 case 3: ``output.answers`` equal to ``--out`` replaced the run folder with the answer files
    (ledger.json, config.yaml, store.zarr, report.json gone, .complete kept, exit 0)."""
    cfg = job(ws, output={"answers": answers})
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "o" / "x"), "--quiet", needle=("output.answers", "run"))


def test_answers_equal_to_a_finished_run_folder_under_overwrite_keeps_the_run(main_cli, ws):
    cfg = job(ws)
    out = ws / "o" / "x"
    finished_run(main_cli, ws, out, cfg)
    clash = job(ws, "clash.yaml", output={"answers": "o/x"})
    refused(main_cli, ws, "run", clash, "--out", str(out), "--overwrite", "--quiet",
            needle="is the run folder --out itself")
    with pytest.raises(RunDirectoryError, match="is the run folder --out itself"):
        api.run(clash, out, quiet=True, overwrite=True)
    assert {"ledger.json", "config.yaml", "store.zarr", "report.json", ".complete"} <= {p.name for p in out.iterdir()}


def test_left_over_answers_in_a_run_folder_are_not_a_run_to_replace(main_cli, ws):
    """What case 3 used to leave (answer files and .complete, no ledger) is not replaced by --overwrite."""
    cfg = job(ws)
    out = ws / "o" / "x"
    out.mkdir(parents=True)
    (out / ".complete").write_text('{"complete": true}')
    (out / "group-0000-age.parquet").write_bytes(b"PAR1")
    (out / "index.json").write_text("{}")
    refused(main_cli, ws, "run", cfg, "--out", str(out), "--overwrite", "--quiet", needle="did not write")


# ---- the run folder itself: --out ------------------------------------------------------------------

def test_out_folder_of_unrelated_files_is_refused_and_never_pointed_to_resume(main_cli, ws):
    (ws / "stuff").mkdir()
    (ws / "stuff" / "thesis.tex").write_text("mine")
    cfg = job(ws)
    for extra in ([], ["--overwrite"]):
        line = refused(main_cli, ws, "run", cfg, "--out", str(ws / "stuff"), "--quiet", *extra,
                       needle=("did not write", "'thesis.tex'"))
        assert "--resume" not in line and "--overwrite" not in line


def test_out_the_filesystem_root_is_one_line(main_cli, ws):
    """Issue 33 case 7: ``--out /`` ended in a ValueError traceback (the lock file beside the root)."""
    line = one_line_error(main_cli("run", job(ws), "--out", "/", "--quiet"))
    assert "file-system root" in line
    with pytest.raises(RunDirectoryError, match="file-system root"):
        api.run(job(ws), "/", quiet=True)


def test_out_the_home_folder_is_refused(main_cli, ws, monkeypatch):
    home = ws / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cfg = job(ws)
    refused(main_cli, ws, "run", cfg, "--out", str(home), "--quiet", needle="home folder")
    (home / ".bashrc").write_text("mine")
    refused(main_cli, ws, "run", cfg, "--out", str(home), "--overwrite", "--quiet", needle="home folder")


def test_out_the_current_folder_with_unrelated_files_is_refused(main_cli, ws):
    cfg = job(ws)
    refused(main_cli, ws, "run", cfg, "--out", ".", "--quiet", needle=("'.'", "did not write"), cwd=ws)
    refused(main_cli, ws, "run", cfg, "--out", ".", "--resume", "--quiet", needle="not a privcube run folder", cwd=ws)


def test_out_whose_parent_cannot_be_created_is_one_line(main_cli, ws):
    cfg = job(ws)
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "job.yaml" / "run"), "--quiet", needle="is a file")
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "job.yaml" / "a" / "b"), "--quiet", needle="is a file")


def test_out_that_is_a_file_is_one_line(main_cli, ws):
    cfg = job(ws)
    refused(main_cli, ws, "run", cfg, "--out", str(ws / "mydata" / "people.parquet"), "--quiet", needle="not a directory")


def test_a_lock_file_privcube_did_not_write_is_refused_not_truncated(main_cli, ws):
    """``.DIR.lock`` beside the run folder is privcube's; a user's file of that name is left alone."""
    (ws / ".run.lock").write_text("my notes, not a lock")
    refused(main_cli, ws, "run", job(ws), "--out", str(ws / "run"), "--quiet", needle="not written by privcube")


def test_subprocess_cli_refuses_in_one_line(ws):
    """The installed command (a separate process, as a user runs it) for case 1 and ``--out /``."""
    cfg = job(ws, output={"answers": "mydata"})
    before = snapshot(ws)
    for out in (str(ws / "o" / "x"), "/"):
        r = subprocess.run([sys.executable, "-m", "privcube", "run", cfg, "--out", out, "--overwrite", "--quiet"],
                           capture_output=True, text=True, timeout=120, cwd=ws)
        one_line_error(r)
    assert snapshot(ws) == before


# ---- nothing partial: what the run wrote into an empty folder goes again -----------------------------

def test_bad_data_in_an_empty_out_folder_leaves_it_empty(main_cli, ws):
    """An existing empty --out is used (it holds nothing to lose); bad data removes what the run wrote in it."""
    pd.DataFrame({"age": [1, 9], "sex": ["F", "M"]}).to_parquet(ws / "mydata" / "people.parquet", index=False)
    cfg = job(ws)
    (ws / "empty").mkdir()
    before = snapshot(ws)
    one_line_error(main_cli("run", cfg, "--out", str(ws / "empty"), "--quiet"))
    assert snapshot(ws) == before and (ws / "empty").is_dir()
    with pytest.raises(DataError):
        api.run(cfg, ws / "empty", quiet=True)
    assert snapshot(ws) == before


def test_synthetic_folder_only_with_synthesize(main_cli, ws):
    """Issue 33 case 10 (README): ``synthetic/`` is written only when the job asks for records."""
    cfg = job(ws)
    finished_run(main_cli, ws, ws / "plain", cfg)
    assert not (ws / "plain" / "synthetic").exists()
    raw = yaml.safe_load(Path(cfg).read_text())
    raw["synthesize"] = {"rows": 50}
    (ws / "synth.yaml").write_text(yaml.safe_dump(raw))
    finished_run(main_cli, ws, ws / "synth", str(ws / "synth.yaml"))
    assert list((ws / "synth" / "synthetic").rglob("*.parquet"))


def test_complete_lists_what_the_run_wrote(main_cli, ws):
    """``.complete`` lists every file of the run (the manifest --overwrite checks); ``.started`` goes."""
    cfg = job(ws, output={"answers": "pub"})
    finished_run(main_cli, ws, ws / "run", cfg)
    listed = json.loads((ws / "run" / ".complete").read_text())
    files = sorted(p.relative_to(ws / "run").as_posix() for p in (ws / "run").rglob("*") if p.is_file())
    assert set(listed["files"]) == set(files) - {".complete"}
    assert listed["identity"]["seed"] == 1 and listed["identity"]["mechanism"] == "residual-planner"
    manifest = json.loads((ws / "pub" / ".privcube-files.json").read_text())
    assert sorted(manifest["files"]) == sorted(p.name for p in (ws / "pub").iterdir()
                                               if p.name != ".privcube-files.json")
    assert os.stat(ws / "run").st_mode & 0o077 == 0


def test_fsspec_destination_with_other_files_is_refused_and_own_copy_replaced(ws):
    """The same rule for a URL destination (``memory://`` here; ``s3://`` etc. go through the same fsspec
    calls): a foreign object is never removed, a copy privcube published is replaced under --overwrite."""
    import fsspec

    url = f"memory://privcube-safety-{os.getpid()}/answers"
    fs, path = fsspec.core.url_to_fs(url)
    cfg = job(ws, output={"answers": url})
    try:
        fs.pipe(f"{path}/keep.txt", b"mine")
        with pytest.raises(RunDirectoryError, match="'keep.txt'"):
            api.run(cfg, ws / "r1", seed=1, quiet=True, overwrite=True)
        assert fs.cat(f"{path}/keep.txt") == b"mine" and not (ws / "r1").exists()
        fs.rm(f"{path}/keep.txt")
        api.run(cfg, ws / "r1", seed=1, quiet=True)
        with pytest.raises(RunDirectoryError, match="already exists"):
            api.run(cfg, ws / "r2", seed=2, quiet=True)
        api.run(cfg, ws / "r2", seed=2, quiet=True, overwrite=True)
        for f in (ws / "r2" / "answers").glob("*.parquet"):
            assert fs.cat(f"{path}/{f.name}") == f.read_bytes()
    finally:
        if fs.exists(path):
            fs.rm(path, recursive=True)


def test_publish_rechecks_the_destination_just_before_replacing_it(ws):
    """A file put into a published copy while the run measured is found again at publish time: the copy is
    left as it is and the run is not marked complete (one line, --resume once the file is moved out)."""
    from privcube.storage.outputs import publish_outputs

    cfg = job(ws, output={"answers": "pub"})
    api.run(cfg, ws / "run", seed=1, quiet=True)
    (ws / "pub" / "late.txt").write_text("mine")
    before = snapshot(ws / "pub")
    with pytest.raises(RunDirectoryError) as info:
        publish_outputs(ws / "run", {"answers": str(ws / "pub")})
    assert "'late.txt'" in str(info.value) and "\n" not in str(info.value) and "--resume" in str(info.value)
    assert snapshot(ws / "pub") == before
    assert not [p for p in ws.iterdir() if p.name.startswith(".pub")]  # no staging folder left


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc: a folder nothing can be made in")
def test_out_under_a_folder_nothing_can_be_created_in_is_one_line(main_cli, ws):
    line = one_line_error(main_cli("run", job(ws), "--out", "/proc/privcube-no-such/run", "--quiet"))
    assert "cannot create output directory" in line and not os.path.exists("/proc/privcube-no-such")
