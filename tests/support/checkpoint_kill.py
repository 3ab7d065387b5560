"""Test-only: act right after a checkpoint round is committed (production code carries no test hook).

``after_commit(monkeypatch, fn)`` calls ``fn(round)`` right after every commit of
``storage.checkpoint.RunCheckpoint`` (``save`` and ``append``, once the commit is on disk: under
``background()`` the hook waits for the writer thread; the relational job's checkpoint is one too)
in this process. Run as a script, ``python tests/support/checkpoint_kill.py K ARGS...`` is the ``privcube`` command
with ARGS, SIGKILLed right after it commits checkpoint round K: a deterministic stand-in for a driver killed
between two rounds, used by the resume tests.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from privcube.storage.checkpoint import RunCheckpoint

SCRIPT = Path(__file__).resolve()


def _wrap(method: Callable[..., Any], fn: Callable[[int], None]) -> Callable[..., Any]:
    @functools.wraps(method)
    def committed(self: RunCheckpoint, round: int, *args: Any, **kwargs: Any) -> Any:
        out = method(self, round, *args, **kwargs)
        self.wait()  # inside ``background()`` the commit is written on the writer thread: wait until it is
        fn(int(round))
        return out

    return committed


def patch_commits(fn: Callable[[int], None], setattr: Callable[[Any, str, Any], None] = setattr) -> None:
    """Make every ``RunCheckpoint.save`` / ``append`` call ``fn(round)`` once the round is committed."""
    for name in ("save", "append"):
        setattr(RunCheckpoint, name, _wrap(getattr(RunCheckpoint, name), fn))


def after_commit(monkeypatch: Any, fn: Callable[[int], None]) -> None:
    """``patch_commits`` undone at the end of the test (pytest's ``monkeypatch``)."""
    patch_commits(fn, monkeypatch.setattr)


def kill_after(k: int) -> Callable[[int], None]:
    """A commit callback that SIGKILLs this process right after round ``k``."""
    def stop(round: int) -> None:
        if round == k:
            os.kill(os.getpid(), signal.SIGKILL)

    return stop


class Crash(BaseException):
    """Raised by ``crash_after``: an interruption no ``except Exception`` in the run can swallow."""


def crash_after(k: int) -> Callable[[int], None]:
    """A commit callback that raises ``Crash`` right after round ``k`` (an in-process stand-in for a kill)."""
    def crash(round: int) -> None:
        if round == k:
            raise Crash()

    return crash


def privcube(args: Sequence[str], *, stop_after: int | None = None, env: Mapping[str, str] | None = None,
             **kwargs: Any) -> subprocess.CompletedProcess:
    """``python -m privcube ARGS`` in a subprocess; with ``stop_after=k`` SIGKILLed after checkpoint round k."""
    head = [sys.executable, "-m", "privcube"] if stop_after is None else [sys.executable, str(SCRIPT), str(stop_after)]
    return subprocess.run([*head, *args], capture_output=True, text=True,
                          env=dict(os.environ if env is None else env), **kwargs)


if __name__ == "__main__":
    patch_commits(kill_after(int(sys.argv[1])))
    sys.argv = ["privcube", *sys.argv[2:]]
    from privcube.cli import entry

    entry()
