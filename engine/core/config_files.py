"""What every job config file shares, whatever its kind: relative paths resolved against the file's folder,
and the ``resolved`` record a run folder's ``config.yaml`` keeps, verified when the file is loaded again.

Here, below the config parsers of the job kinds (``privcube.config`` for single-table jobs,
``privcube.relational.config`` for relational ones), so each parses its own sections with the same rules.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privcube.core.errors import ConfigError

RESOLVED_KEY = "resolved"


def resolve_path(p: str, base: Path) -> str:
    """``p`` resolved against the config's folder ``base`` (URLs and absolute paths as they are; globs kept)."""
    if "://" in p or Path(p).is_absolute():
        return p
    return str((base / p).resolve()) if not any(ch in p for ch in "*?[") else str(base / p)


def check_recorded(recorded: Any, now: Mapping[str, Any]) -> None:
    """Verify the ``resolved`` record of a run folder's ``config.yaml`` against the config resolved now.

    The record is what the run that wrote the file used (domain, privacy, schema, ...); a section that
    differs (e.g. the domain file changed since) is refused, naming it, rather than silently running
    with something else. Sections not recorded, or not known, are not checked."""
    if recorded is None:
        return
    if not isinstance(recorded, Mapping):
        raise ConfigError(f"{RESOLVED_KEY}: expected the mapping a run folder's config.yaml records, got "
                          f"{type(recorded).__name__}")
    for key, value in now.items():
        if key in recorded and not _same(recorded[key], value):
            raise ConfigError(f"{RESOLVED_KEY}.{key} records a different {key} than the config now gives (edited, "
                              f"or a file it names changed?); remove the '{RESOLVED_KEY}' section to run with the "
                              "config as it is now")


def _same(a: Any, b: Any) -> bool:
    """Equal as plain YAML values, floats to 1e-12 relative (a YAML round trip keeps them exact anyway)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return list(map(str, a)) == list(map(str, b)) and all(_same(a[k], b[k]) for k in a)  # order: axes
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0) or (a != a and b != b)
    return a == b


__all__ = ["RESOLVED_KEY", "check_recorded", "resolve_path"]
