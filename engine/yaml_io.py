"""YAML for job configs and schemas: safe loading, with ``1e-6`` read as a number.

PyYAML follows YAML 1.1, whose float pattern needs a dot (``1.0e-6``), so ``delta: 1e-6`` (what users
write, and what YAML 1.2 and JSON read as a number) would arrive as the string "1e-6" and be refused
as a wrong type. The loader here adds the YAML 1.2 form of exponent floats to the safe resolver.
"""
from __future__ import annotations

import re
from typing import Any

import yaml


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also resolves exponent-only numbers (``1e-6``, ``-2E+3``) to floats."""


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    """Parse YAML text safely (no arbitrary objects), exponent floats included."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass
