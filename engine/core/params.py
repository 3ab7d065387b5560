"""Declared parameters: a config key's default, type and one-line meaning, next to the code that reads it.

A layer that takes options from a config section (an input format, a cluster kind, the synthesizer, ...)
declares them as ``{key: Param(default, type, help)}``; the reference documentation is generated from
these declarations (:func:`describe`), and :func:`check_keys` refuses a key that is not declared.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from privcube.core.errors import ConfigError

#: the default of a parameter that has none (it must be given, or is filled in at run time)
REQUIRED = "required"


@dataclass(frozen=True)
class Param:
    """One config key: its ``default`` (a value, or None: unset), its ``type`` as written in the docs
    (e.g. ``"int >= 1"``, ``"path"``, ``"auto | int"``) and ``help``, one line saying what it does."""

    default: Any
    type: str
    help: str

    def line(self, name: str) -> str:
        """``name`` (type, default d): help -- the reference line of this parameter."""
        default = "" if self.default is None else f", default {self.default!r}"
        return f"{name} ({self.type}{default}): {self.help}"


def defaults(params: Mapping[str, Param]) -> dict[str, Any]:
    """``{key: default}`` of the declared parameters whose default is set (not None, not required)."""
    return {k: p.default for k, p in params.items() if p.default is not None and p.default != REQUIRED}


def describe(params: Mapping[str, Param]) -> list[str]:
    """One reference line per declared parameter, in declaration order."""
    return [p.line(k) for k, p in params.items()]


def check_keys(where: str, given: Iterable[Any], known: Iterable[str]) -> None:
    """ConfigError ``WHERE: unknown key(s) [...]; known: [...]`` unless every given key is known."""
    known = set(known)
    bad = set(given) - known
    if bad:
        raise ConfigError(f"{where}: unknown key(s) {sorted(map(str, bad))}; known: {sorted(known)}")


__all__ = ["Param", "REQUIRED", "check_keys", "defaults", "describe"]
