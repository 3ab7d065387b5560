"""YAML for job configs and schemas: safe loading, ``1e-6`` read as a number, duplicate keys refused.

PyYAML follows YAML 1.1, whose float pattern needs a dot (``1.0e-6``), so ``delta: 1e-6`` (what users
write, and what YAML 1.2 and JSON read as a number) would arrive as the string "1e-6" and be refused
as a wrong type. The loader here adds the YAML 1.2 form of exponent floats to the safe resolver.

PyYAML also keeps the last of two equal keys in one mapping (``privacy:`` twice, ``epsilon`` twice),
so the budget spent would silently differ from the one the user reviewed; YAML itself requires keys
to be unique, and the loader here refuses a repeated key, naming it and its line (``DuplicateKeyError``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from privcube.core.errors import ConfigError


class DuplicateKeyError(yaml.YAMLError):
    """A mapping repeats a key; the message names the key and both lines."""


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that resolves exponent-only numbers (``1e-6``, ``-2E+3``) to floats and refuses
    a key repeated in one mapping (merge keys ``<<`` may still be overridden)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, Hashable):
                    continue  # the base class reports unhashable keys
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKeyError(f"duplicate key {key!r} at line {line} (first at line {seen[key]}); "
                                            "each key may appear only once in a mapping")
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no arbitrary objects), exponent floats included, duplicate keys refused."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass


def yaml_error_line(e: yaml.YAMLError) -> str:
    """A YAML error in one line: the problem and where (PyYAML's own text spans several lines)."""
    if isinstance(e, DuplicateKeyError):
        return str(e)
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if problem is None:
        return " ".join(str(e).split())
    context = getattr(e, "context", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{context + ': ' if context else ''}{problem}{where}"


def load_json(text: str) -> Any:
    """Parse JSON text, refusing an object that repeats a key (``json`` would keep the last one)."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}; each key may appear only once in an object")
        out[k] = v
    return out


def read_config_file(path: str | Path) -> tuple[dict[str, Any], Path]:
    """Parse a YAML (or JSON) config file into ``(mapping, the file's folder)``; errors name the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {str(p)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e}") from None
    try:
        raw = load_yaml(text)
    except DuplicateKeyError as e:
        raise ConfigError(f"config file {str(p)!r}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {yaml_error_line(e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    return raw, p.resolve().parent
