"""The reference pages generated from what the code declares, so they cannot drift from it.

Config keys come from the :class:`privcube.core.params.Param` declarations of the layers that read them
(``config``, ``core.workload``, ``storage.data_spec``, ``privacy.budget``, ``privacy.unit``, ``synth.spec``,
``postprocess.spec``, every cluster kind's ``OPTIONS``; a relational job's from ``relational.config`` and
``relational.spec``, its ``privacy.tables`` entries included), query types and their parameters from
``core.query_types``, input
formats from their registry, mechanism parameters from each registered class's ``PARAMS`` (defaults) and
``PARAM_HELP`` (meanings; ``relational``'s in ``privcube.relational.stages.parameters``), the command line from :func:`privcube.cli.build_parser`. ``docs/hooks.py``
writes :func:`config_markdown` and :func:`cli_markdown` into the site at build time;
``tests/unit/test_docs_reference.py`` checks with :func:`undocumented` that nothing lacks a description.
This file imports no MkDocs module.
"""
from __future__ import annotations

import argparse
import html
from collections.abc import Iterator, Mapping
from typing import Any

from privcube.core.params import REQUIRED, Param

#: a single-table config's sections: title -> (the module that declares its keys, the attribute, one line)
SECTIONS: dict[str, tuple[str, str, str]] = {
    "Top-level keys": ("privcube.config", "TOP_PARAMS", "The sections of a single-table job config "
                       "(`privcube.config`); a relational job's are described with the mechanism `relational`."),
    "`data`": ("privcube.storage.data_spec", "DATA_PARAMS", ""),
    "`workload` entries": ("privcube.core.workload", "ENTRY_PARAMS", "`workload` is a list of entries, each one or "
                           "more query groups (`privcube.core.workload`); every query type is listed under "
                           "Query types below."),
    "`privacy`": ("privcube.privacy.budget", "PRIVACY_PARAMS", "The run's privacy budget "
                  "(`privcube.privacy.budget`): `{epsilon, delta}`, `{rho}` (read at `delta`) or `{epsilon}` alone."),
    "`privacy_unit`": ("privcube.privacy.unit", "UNIT_PARAMS", ""),
    "`output`": ("privcube.config", "OUTPUT_PARAMS", "What the run folder's answers carry, and where copies of "
                 "them are published (`privcube.config`)."),
    "`synthesize`": ("privcube.synth.spec", "PARAMS", ""),
    "`postprocess`": ("privcube.postprocess.spec", "PARAMS", ""),
}


def _cell(text: Any) -> str:
    """Text for a Markdown table cell: HTML-escaped, pipes and newlines made harmless."""
    return html.escape(str(text), quote=False).replace("|", "&#124;").replace("\n", " ")


def _code(text: Any) -> str:
    """A table cell in code style (``<code>``, since a backtick span cannot hold an escaped pipe)."""
    return f"<code>{_cell(text)}</code>"


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if value == REQUIRED:
        return "**required**"
    return _code(repr(value) if isinstance(value, str) else value)


def config_sections() -> Iterator[tuple[str, str, Mapping[str, Param]]]:
    """``(title, one-line intro, {key: Param})`` for every declared config section, cluster kinds included."""
    import importlib

    for title, (module, attr, intro) in SECTIONS.items():
        mod = importlib.import_module(module)
        yield title, intro or (mod.__doc__ or "").strip().splitlines()[0], getattr(mod, attr)
    from privcube.relational import config as relational, spec

    yield ("Relational jobs: top-level keys", "A relational job (`mechanism: {name: relational}`) takes these "
           "instead (`privcube.relational.config`); its mechanism parameters are under Mechanisms.",
           relational.TOP_PARAMS)
    yield "Relational: `data.tables.NAME`", "One input table.", relational.TABLE_PARAMS
    yield "Relational: `data.links`, a foreign key", "One-to-many: each child row points at one parent.", spec.FK_PARAMS
    yield "Relational: `data.links`, a link table", "Many-to-many (or self-referential) links in a file.", \
        spec.LINK_TABLE_PARAMS
    yield ("Relational: `privacy`", "A relational job's budgets: one per table and one per link; the run spends "
           "their basic composition (the sum of the parts' epsilon and delta).", spec.PRIVACY_PARAMS)
    yield ("Relational: `privacy.tables.NAME`", "One table's budget (Gaussian, so with a delta); in a list of links "
           "the word `public` instead releases the table's rows as they are (nothing spent).",
           spec.PART_BUDGET_PARAMS)
    yield ("Relational: `privacy.links` (or `privacy.links.NAME`)", "A link's budget and, optionally, its own degree "
           "bound (a key left out takes the mechanism's).", {**spec.PART_BUDGET_PARAMS, **spec.LINK_BOUND_PARAMS})
    from privcube.census import spec as census

    yield ("Census jobs: top-level keys", "A config with a `geography` section is a census job "
           "(`privcube.census`): tables by geographic level that add up, invariants, structural zeros, integer "
           "output.", census.CENSUS_PARAMS)
    yield "Census: `geography`", "The hierarchy of units.", census.GEOGRAPHY_PARAMS
    yield "Census: `workload` entries", "Tables published within every unit of a level (at most 2-way).", \
        census.WORKLOAD_ENTRY_PARAMS
    yield ("Census: `privacy`", "The budget as for any job (epsilon + delta, or rho), and optionally its split.",
           census.CENSUS_PRIVACY_PARAMS)
    yield "Census: `output`", "What the answer tables hold.", census.CENSUS_OUTPUT_PARAMS
    from privcube.graphs.cluster.kind import SECURITY_OPTIONS
    from privcube.graphs.cluster.registry import CLUSTER_KINDS

    for name in CLUSTER_KINDS.names():
        kind = CLUSTER_KINDS.get(name, "cluster.type")
        yield f"`cluster: {{type: {name}}}`", kind.description, {**kind.OPTIONS, **SECURITY_OPTIONS}


def mechanism_params() -> Iterator[tuple[str, str, Mapping[str, Any], Mapping[str, str]]]:
    """``(config name, one line, PARAMS, PARAM_HELP)`` of every registered mechanism, then of ``relational`` (a job
    kind of its own, whose parameters live in ``privcube.relational.stages.parameters``)."""
    from privcube.mechanisms import REGISTRY, get_mechanism
    from privcube.relational.stages import parameters as relational

    for name in REGISTRY:
        cls = get_mechanism(name)
        yield name, (cls.__doc__ or "").strip().splitlines()[0], cls.PARAMS, cls.PARAM_HELP
    yield ("relational", "Synthetic databases of several tables and their links (a relational job: `data.tables`, "
           "`data.links`, `privacy.tables`, `privacy.links`).", relational.PARAMS, relational.PARAM_HELP)


def _params_table(params: Mapping[str, Param]) -> list[str]:
    if not params:
        return ["No options.", ""]
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{k}` | {_code(p.type)} | {_default(p.default)} | {_cell(p.help)} |" for k, p in params.items()]
    return rows + [""]


def _abilities(names: Any, meanings: Mapping[str, str]) -> str:
    return "; ".join(f"`{a}` ({_cell(meanings[a])})" for a in sorted(names)) or "none"


def config_markdown() -> str:
    """The config reference page: every declared section, input format and mechanism parameter."""
    from privcube.graphs.cluster.kind import ABILITIES as CLUSTER_ABILITIES
    from privcube.graphs.cluster.registry import CLUSTER_KINDS
    from privcube.storage.formats import FORMATS
    from privcube.storage.formats.base import ABILITIES as FORMAT_ABILITIES

    out = ["# Config reference", "",
           "Generated from the code at build time (`docs/gen_reference.py`): every key below is what the layer "
           "that reads it declares, with its type, default and meaning. A key that is not listed is refused.", ""]
    for title, intro, params in config_sections():
        if title.startswith("`cluster:") and "## Cluster kinds" not in out:
            out += ["## Cluster kinds", "", "`cluster: NAME` or `cluster: {type: NAME, ...}`; without a `cluster` "
                    "key a job runs in this process (`none`).", ""]
        level = "###" if title.startswith("`cluster:") else "##"
        out += [f"{level} {title}", "", _cell(intro), ""]
        if title.startswith("`cluster:"):
            name = title.split("type: ")[1].rstrip("}`")
            out += [f"Abilities: {_abilities(CLUSTER_KINDS.get(name, 'cluster.type').abilities, CLUSTER_ABILITIES)}.",
                    ""]
        out += _params_table(params)
    from privcube.core.query_types import JOINT, PARAMS as TYPE_PARAMS, PER_ATTRIBUTE, QUERY_TYPE_HELP

    out += ["## Query types (`workload[].queries`)", "",
            "A name, or `{type: NAME, parameters}`; per attribute, or joint over two attributes.", "",
            "| type | parameters | joint | what |", "|---|---|---|---|"]
    for name in PER_ATTRIBUTE + JOINT:
        params = ", ".join(f"`{p}`" for p in TYPE_PARAMS.get(name, ())) or "—"
        out.append(f"| `{name}` | {params} | {'yes' if name in JOINT else ''} | {_cell(QUERY_TYPE_HELP.get(name, ''))} |")
    out += [""]
    for name, params in TYPE_PARAMS.items():
        out += [f"### `{{type: {name}, ...}}` parameters", ""] + _params_table(params)
    out += ["## Input formats (`data.format`)", "",
            "Without `data.format` the format is guessed from the file names, in this order.", "",
            "| name | files | abilities | what |", "|---|---|---|---|"]
    for name in FORMATS.names():
        fmt = FORMATS.get(name, "data.format")
        suffixes = ", ".join(f"`{s}`" for s in fmt.suffixes) or "—"
        out.append(f"| `{name}` | {suffixes} | {_abilities(fmt.abilities, FORMAT_ABILITIES)} | {_cell(fmt.description)} |")
    out += ["", "## Mechanisms (`mechanism: {name: NAME, ...}`)", ""]
    for name, summary, params, helps in mechanism_params():
        out += [f"### `{name}`", "", _cell(summary), ""]
        if not params:
            out += ["No parameters.", ""]
            continue
        out += ["| key | default | meaning |", "|---|---|---|"]
        out += [f"| `{k}` | {_default(v)} | {_cell(helps.get(k, ''))} |" for k, v in params.items()]
        out.append("")
    return "\n".join(out)


def _subcommands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(command path, its one-line help, its parser)`` for every leaf command under ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                path = f"{prefix} {name}"
                if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                    yield from _subcommands(sub, path)
                else:
                    yield path, helps.get(name) or "", sub


def cli_arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The arguments of one command a user writes (``--help`` and subcommand selectors left out)."""
    for action in parser._actions:
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            yield action


def cli_markdown() -> str:
    """The command-line reference page: every command of ``privcube``, its usage and every argument."""
    from privcube.cli import build_parser

    out = ["# Command-line reference", "",
           "Generated from the argparse parser (`privcube.cli.build_parser`) at build time. Every command "
           "prints `--help` with the same text. Errors are one line on stderr with exit code 2.", ""]
    for path, help_text, sub in _subcommands(build_parser(), "privcube"):
        out += [f"## `{path}`", "", _cell(help_text[:1].upper() + help_text[1:]) + ".", ""]
        if sub.description and sub.description != help_text:
            out += [_cell(sub.description), ""]
        usage = " ".join(sub.format_usage().split())
        out += ["```text", usage.removeprefix("usage: "), "```", "",
                "| argument | meaning | default |", "|---|---|---|"]
        for a in cli_arguments(sub):
            name = ", ".join(a.option_strings) or (a.metavar or a.dest)
            metavar = "" if not a.option_strings or a.nargs == 0 else f" {a.metavar or a.dest.upper()}"
            default = "" if a.default is None or a.default is False or a.required else _code(a.default)
            out.append(f"| {_code(name + metavar)} | {_cell(a.help or '')} | {default} |")
        out.append("")
    return "\n".join(out)


def undocumented() -> list[str]:
    """Every config key, mechanism parameter, CLI argument or command without a description (empty: all
    documented); also mechanism help for a key that is not a parameter."""
    from privcube.cli import build_parser

    missing = [f"{title}.{k}" for title, _, params in config_sections() for k, p in params.items()
               if not p.help.strip()]
    from privcube.core.query_types import JOINT, PER_ATTRIBUTE, QUERY_TYPE_HELP

    missing += [f"query type {t}" for t in PER_ATTRIBUTE + JOINT if not QUERY_TYPE_HELP.get(t, "").strip()]
    from privcube.core.query_types import PARAMS as TYPE_PARAMS

    missing += [f"query type {t}.{k}" for t, params in TYPE_PARAMS.items() for k, p in params.items()
                if not p.help.strip()]
    for name, _, params, helps in mechanism_params():
        missing += [f"mechanism {name}.{k}" for k in params if not str(helps.get(k, "")).strip()]
        missing += [f"mechanism {name}.{k} (help for no parameter)" for k in set(helps) - set(params)]
    for path, help_text, sub in _subcommands(build_parser(), "privcube"):
        if not help_text.strip():
            missing.append(path)
        missing += [f"{path} {a.option_strings or a.dest}" for a in cli_arguments(sub)
                    if not (a.help or "").strip()]
    return missing
