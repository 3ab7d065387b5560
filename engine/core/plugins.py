"""Plug-in registries: a name -> ``"module:Class"`` table plus a Python entry-point group, loaded lazily.

The model is xarray's backend registry: the built-in plug-ins are a dict of import strings (nothing is
imported until one is used), a package adds its own under an entry-point group (``[project.entry-points.
"privcube.input_formats"]`` in its ``pyproject.toml``), and a test or a script adds one with
:meth:`Registry.register`. A built-in name wins over an entry point of the same name.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from privcube.core.errors import ConfigError


class Registry:
    """The plug-ins of one kind (``what``: "input format", "cluster kind") under their config names."""

    def __init__(self, what: str, group: str, builtins: dict[str, str]) -> None:
        self.what = what
        self.group = group  # the entry-point group other packages register under
        self.targets: dict[str, Any] = dict(builtins)  # name -> "module:Class" or the class itself
        self._scanned = False
        self._loaded: dict[str, Any] = {}

    def register(self, name: str, target: str | type) -> None:
        """Add (or replace) the plug-in ``name``: an import string ``"module:Class"`` or the class."""
        self.targets[name] = target
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        """Remove a plug-in added with :meth:`register` (a test's clean-up)."""
        self.targets.pop(name, None)
        self._loaded.pop(name, None)

    def _scan(self) -> None:
        """Add the entry points of ``group`` once (metadata only: nothing is imported)."""
        if self._scanned:
            return
        self._scanned = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            self.targets.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """Every known name: built-ins first, then registered ones and entry points."""
        self._scan()
        return list(self.targets)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def loaded(self) -> list[Any]:
        """The plug-in classes imported so far (nothing new is imported)."""
        return list(self._loaded.values())

    def get(self, name: str, key: str) -> Any:
        """The plug-in class registered as ``name``; ``key`` (e.g. ``data.format``) names the config key in
        the one-line ConfigError for an unknown name or a plug-in that does not import."""
        if name not in self:
            raise ConfigError(f"{key}: unknown {self.what} {name!r}; known: {', '.join(self.names())}")
        if name not in self._loaded:
            target = self.targets[name]
            if isinstance(target, str):
                module, _, attr = target.partition(":")
                try:
                    target = getattr(importlib.import_module(module), attr)
                except (ImportError, AttributeError) as e:
                    raise ConfigError(f"{key}: {self.what} {name!r} is not available ({e})") from None
            self._loaded[name] = target
        return self._loaded[name]


__all__ = ["Registry"]
