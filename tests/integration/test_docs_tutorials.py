"""The tutorial pages' commands really work: each page is run top to bottom in a fresh folder, as a reader
would, and the printed output it shows is checked.

The convention in docs/pages/*.md (read by :func:`steps`, a tiny extractor, no test plug-in needed):

* a fenced block with ``title="NAME"`` is a file the reader saves: it is written as NAME;
* a fenced ``bash`` or ``python`` block right after ``<!-- test: run -->`` is run (bash with ``-e``);
* a fenced block right after ``<!-- test: output -->`` is what the previous run printed: each of its lines
  must match a line of stdout, in order, with ``...`` standing for any text (whitespace runs compare equal).

Blocks without a title or a marker (``pip install .``, examples) are shown, not run.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "pages"
#: the tutorial pages run here
TUTORIALS = ["getting-started.md", "tutorials/marginals-with-intervals.md", "tutorials/synthetic-records.md",
             "tutorials/people-with-several-rows.md", "tutorials/resume-after-a-crash.md",
             "tutorials/relational-database.md", "tutorials/laptop-to-cluster.md",
             "tutorials/choosing-a-mechanism.md", "tutorials/census-release.md"]

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^```\s*$", re.M | re.S)
_MARKER = re.compile(r"<!--\s*test:\s*(run|output)\s*-->\s*$")
_TITLE = re.compile(r'title="([^"]+)"')


@dataclass
class Step:
    """One thing the page asks for: ``file`` (write ``name``), ``run`` (a ``lang`` block) or ``output``."""

    kind: str
    body: str
    lang: str = ""
    name: str = ""
    line: int = 0


def steps(text: str) -> list[Step]:
    """The page's tested blocks in page order."""
    out = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        line = text.count("\n", 0, m.start()) + 1
        title = _TITLE.search(m["attrs"])
        marker = _MARKER.search(before)
        if title:
            out.append(Step("file", m["body"], m["lang"], title.group(1), line))
        elif marker:
            out.append(Step(marker.group(1), m["body"], m["lang"], line=line))
    return out


def _norm(line: str) -> str:
    return " ".join(line.split())


def output_matches(expected: str, printed: str) -> bool:
    """Whether every expected line matches a printed line, in order (``...``: any text)."""
    lines = [_norm(x) for x in printed.splitlines()]
    i = 0
    for want in (_norm(x) for x in expected.splitlines()):
        if not want:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")))
        while i < len(lines) and not pattern.fullmatch(lines[i]):
            i += 1
        if i == len(lines):
            return False
        i += 1
    return True


def test_the_extractor_reads_the_convention() -> None:
    page = ('x\n```yaml title="a.yaml"\nk: 1\n```\n<!-- test: run -->\n```bash\necho hi\n```\n'
            '<!-- test: output -->\n```text\nh...\n```\n```bash\nnot run\n```\n')
    assert [(s.kind, s.name, s.body) for s in steps(page)] == [
        ("file", "a.yaml", "k: 1\n"), ("run", "", "echo hi\n"), ("output", "", "h...\n")]
    assert output_matches("a\n...\nc 1", "a\nb\nc  1\n") and not output_matches("c\na", "a\nc\n")


@pytest.mark.parametrize("page", TUTORIALS)
def test_tutorial_runs(page: str, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    printed = None
    found = steps((PAGES / page).read_text())
    assert any(s.kind == "run" for s in found), f"{page} has no tested command"
    for step in found:
        where = f"{page}:{step.line}"
        if step.kind == "file":
            (tmp_path / step.name).write_text(step.body)
        elif step.kind == "run":
            assert step.lang in ("bash", "python"), f"{where}: run blocks are bash or python"
            command = ["bash", "-e", "-c", step.body] if step.lang == "bash" else [sys.executable, "-c", step.body]
            done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
            printed = done.stdout
        else:
            assert printed is not None, f"{where}: an output block with no run block before it"
            assert output_matches(step.body, printed), f"{where}: expected\n{step.body}\nprinted\n{printed}"
