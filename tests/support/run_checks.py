"""Checks of a finished command the tests share: a folder's every byte, and a one-line error."""
from __future__ import annotations

import subprocess
from pathlib import Path

def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and folder (None) under ``root``, hidden ones included, by relative path."""
    out: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = None if p.is_dir() and not p.is_symlink() else p.read_bytes()
    return out


def one_line_error(r: subprocess.CompletedProcess) -> str:
    """Exit 2, exactly one stderr line (``privcube: error: ...``), no traceback; returns the line."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert lines[0].startswith("privcube: error: "), lines[0]
    return lines[0]
