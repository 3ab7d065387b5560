"""Every package folder ships in the wheel: pyproject's explicit package list names each one.

A restructuring that adds a package under engine/, graphs/ or storage/ and forgets the list passes
with an editable install and breaks `pip install .` (what CI and users run); this catches it first.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    roots = {"engine": "privcube", "graphs": "privcube.graphs", "storage": "privcube.storage"}
    found = {".".join([pkg, *init.parent.relative_to(ROOT / folder).parts])
             for folder, pkg in roots.items() for init in (ROOT / folder).rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "these listed packages have no folder"
