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


def test_query_type_parameters_are_documented_in_the_reference(gen) -> None:
    """Every parameter of a query type (``random``'s generator and offset included) is in the page with its
    type, default and meaning, under its type's section."""
    from privcube.core.query_types import PARAMS

    config = gen.config_markdown()
    assert set(PARAMS["random"]) == {"seed", "p", "rows_per_cell", "generator", "offset"}
    for name, params in PARAMS.items():
        section = config.split(f"### `{{type: {name}, ...}}` parameters", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
        for key, param in params.items():
            assert param.help.strip() and f"| `{key}` | <code>{gen._cell(param.type)}</code> |" in section, (name, key)
    random = config.split("### `{type: random, ...}` parameters", 1)[1]
    assert "| `generator` | <code>pcg64 &#124; mt19937</code> | <code>'pcg64'</code> |" in random
    assert "| `offset` | <code>int &gt;= 0</code> | <code>0</code> |" in random


def test_a_query_type_parameter_without_help_is_caught(gen, monkeypatch) -> None:
    from privcube.core import query_types
    from privcube.core.params import Param

    monkeypatch.setitem(query_types.PARAMS, "random", {**query_types.PARAMS["random"], "new_knob": Param(1, "int", "")})
    assert gen.undocumented() == ["query type random.new_knob"]


def test_declared_query_type_parameters_are_the_accepted_ones() -> None:
    from privcube.core.errors import WorkloadError
    from privcube.core.query_types import parse_query_type

    qt = parse_query_type({"type": "random", "seed": 3, "p": 0.5, "rows_per_cell": 2, "generator": "mt19937",
                           "offset": 7}, "workload[0]")
    assert dict(qt.params) == {"seed": 3, "p": 0.5, "rows_per_cell": 2, "generator": "mt19937", "offset": 7}
    with pytest.raises(WorkloadError, match=r"no parameter\(s\) \['stride'\]; it takes seed, p, rows_per_cell, "
                                            r"generator, offset"):
        parse_query_type({"type": "random", "stride": 2}, "workload[0]")


def test_relational_privacy_tables_entries_are_in_the_reference(gen) -> None:
    """``privacy.tables.NAME`` (and the links' budget) has its own section listing epsilon, delta and rho; the
    declared keys are exactly the accepted ones (budget_file is refused, not silently ignored)."""
    from privcube.relational import spec

    config = gen.config_markdown()
    tables = config.split("## Relational: `privacy.tables.NAME`", 1)[1].split("\n## ", 1)[0]
    assert all(f"| `{key}` |" in tables for key in ("epsilon", "delta", "rho")) and "`public`" in tables
    links = config.split("## Relational: `privacy.links` (or `privacy.links.NAME`)", 1)[1].split("\n## ", 1)[0]
    assert all(f"| `{key}` |" in links for key in ("epsilon", "delta", "rho", "d_max", "truncate"))
    privacy = config.split("## Relational: `privacy`\n", 1)[1].split("\n## ", 1)[0]
    assert "| `tables` |" in privacy and "| `links` |" in privacy
    from privcube.core.errors import BudgetError

    assert spec.parse_budget({"epsilon": 1, "delta": 1e-6}, "privacy.tables.users").epsilon == pytest.approx(1)
    with pytest.raises(BudgetError, match=r"^privacy.tables.users: unknown key\(s\) \['budget_file'\]; a part's "
                                          r"budget takes epsilon, delta, rho$"):
        spec.parse_budget({"epsilon": 1, "delta": 1e-6, "budget_file": "x.budget"}, "privacy.tables.users")
