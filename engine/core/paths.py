"""Paths written in a config: resolved against the config file's folder, URLs and absolute paths as they are."""
from __future__ import annotations

from pathlib import Path


def resolve_path(p: str, base: Path) -> str:
    """``p`` resolved against the config's folder ``base`` (URLs and absolute paths as they are; globs kept)."""
    if "://" in p or Path(p).is_absolute():
        return p
    return str((base / p).resolve()) if not any(ch in p for ch in "*?[") else str(base / p)


__all__ = ["resolve_path"]
