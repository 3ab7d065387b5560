"""The generated reference (docs/gen_reference.py) documents every config key, mechanism parameter and CLI
argument: a parameter or flag added without a one-line description fails here, not in a reader's hands."""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

from privcube.cli import build_parser
from privcube.mechanisms import REGISTRY, get_mechanism

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen():
    """docs/gen_reference.py, loaded by path (docs/ is not a package and imports no MkDocs module)."""
    spec = importlib.util.spec_from_file_location("privcube_docs_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nothing_lacks_a_description(gen) -> None:
    assert gen.undocumented() == []


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_mechanism_parameter_has_help(name: str) -> None:
    cls = get_mechanism(name)
    assert set(cls.PARAM_HELP) == set(cls.PARAMS), f"{name}: PARAM_HELP must describe exactly the PARAMS keys"
    assert all(isinstance(h, str) and h.strip() for h in cls.PARAM_HELP.values())


def test_relational_parameters_have_help() -> None:
    from privcube.relational.stages.parameters import PARAM_HELP, PARAMS

    assert set(PARAM_HELP) == set(PARAMS) and all(h.strip() for h in PARAM_HELP.values())


def test_a_parameter_without_help_is_caught(gen, monkeypatch) -> None:
    cls = get_mechanism("residual-planner")
    monkeypatch.setattr(cls, "PARAMS", {**cls.PARAMS, "new_knob": 1})
    assert gen.undocumented() == ["mechanism residual-planner.new_knob"]


def test_a_flag_without_help_is_caught(gen, monkeypatch) -> None:
    def parser() -> argparse.ArgumentParser:
        p = build_parser()
        run = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
        run.add_argument("--new-flag", action="store_true")
        return p

    monkeypatch.setattr("privcube.cli.build_parser", parser)
    assert gen.undocumented() == ["privcube run ['--new-flag']"]


def test_the_pages_list_every_key_and_flag(gen) -> None:
    config, cli = gen.config_markdown(), gen.cli_markdown()
    for _, _, params in gen.config_sections():
        assert all(f"| `{key}` |" in config for key in params)
    for name, _, params, _ in gen.mechanism_params():
        assert f"### `{name}`" in config and all(f"| `{key}` |" in config for key in params)
    assert "### `relational`" in config
    from privcube.core.query_types import JOINT, PER_ATTRIBUTE
    assert all(f"| `{t}` |" in config for t in PER_ATTRIBUTE + JOINT)
    from privcube.storage.formats import FORMATS
    assert all(f"| `{name}` |" in config for name in FORMATS.names())
    for path, _, sub in gen._subcommands(build_parser(), "privcube"):
        assert f"## `{path}`" in cli
        assert all(f"<code>{(a.option_strings or [a.metavar or a.dest])[0]}" in cli for a in gen.cli_arguments(sub))
    for command in ("run", "plan", "demo", "generate-census", "report", "marginals", "schema show", "schema infer",
                    "audit", "budget init", "budget show"):
        assert f"## `privcube {command}`" in cli
