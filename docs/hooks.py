"""MkDocs hooks: add the generated reference pages (config keys, command line) to the site at build time,
and the repository files the site shows as they are (deploy/README.md, the relational benchmark tables, the
report picture), so each is kept in one place.

The pages are written from the code by ``docs/gen_reference.py`` (which imports no MkDocs module, so the test
suite can check it without MkDocs); nothing generated is committed.
"""
from __future__ import annotations

import atexit
import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

#: site path -> the generator function of docs/gen_reference.py that writes it
GENERATED = {"reference/config.md": "config_markdown", "reference/cli.md": "cli_markdown"}
#: site path -> a repository file shown on the site as it is (kept in one place, where the code uses it)
COPIED = {"guides/deploy-folder.md": "deploy/README.md",
          "benchmarks/relational-quality.md": "benchmarks/relational-quality.md",
          "assets/report-example.png": "benchmarks/report-example.png"}
ROOT = Path(__file__).resolve().parent.parent


def _generator() -> Any:
    """docs/gen_reference.py as a module (the docs folder is not a package)."""
    spec = importlib.util.spec_from_file_location("privcube_docs_reference", Path(__file__).with_name("gen_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@event_priority(100)  # before mkdocstrings, which creates its handlers in its own on_config
def on_config(config: Any) -> Any:
    """Let mkdocstrings find the source of ``privcube``: its folder is ``engine/`` (pyproject's package-dir), a
    layout griffe does not follow, so a temporary folder holding ``privcube -> engine`` comes first in the
    Python handler's search paths (the API pages document ``privcube`` and ``privcube.core``, both there)."""
    source = Path(__file__).resolve().parent.parent / "engine"
    folder = Path(tempfile.mkdtemp(prefix="privcube-docs-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "privcube").symlink_to(source, target_is_directory=True)
    python = config.plugins["mkdocstrings"].config["handlers"].setdefault("python", {})
    python["paths"] = [str(folder), *python.get("paths", [])]
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add each generated page, and each repository file shown as it is, to the files MkDocs builds."""
    gen = _generator()
    for path, function in GENERATED.items():
        files.append(File.generated(config, path, content=getattr(gen, function)()))
    for path, source in COPIED.items():
        files.append(File.generated(config, path, content=(ROOT / source).read_bytes()))
    return files
