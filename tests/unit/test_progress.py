"""Progress bars of long steps: scattered optimizations show a bar, and a long single step a heartbeat."""
from __future__ import annotations

import re
import time

import pytest

from privcube.graphs import progress as prog
from privcube.graphs.scatter import map_tasks


def _slow_square(x: int) -> int:
    time.sleep(1.3 if x == 0 else 0.0)
    return x * x


@pytest.fixture
def loud():
    prog.set_quiet(False)
    yield
    prog.set_quiet(False)


def test_map_tasks_title_draws_a_bar_with_heartbeat(loud, capsys):
    """One item solving for 1.3 s: the bar is redrawn with its elapsed time before the item finishes."""
    assert map_tasks(_slow_square, [0, 3, 2], title="solving parts") == [0, 9, 4]
    frames = [f for f in capsys.readouterr().err.replace("\r", "\n").splitlines() if f.strip()]
    assert frames and all(f.startswith("solving parts [") for f in frames)
    waiting = [float(m.group(1)) for f in frames if (m := re.search(r" 0/3\s+([\d.]+)s$", f))]
    assert waiting and max(waiting) >= 1.0          # heartbeat while nothing had finished
    assert frames[-1].split("]")[1].split()[0] == "3/3"


def test_map_tasks_quiet_and_untitled_write_nothing(loud, capsys):
    """No title: no bar (internal batches); quiet: no bar even with a title; results unchanged."""
    assert map_tasks(_slow_square, [4, 5]) == [16, 25]
    prog.set_quiet(True)
    assert map_tasks(_slow_square, [4, 5], title="solving parts") == [16, 25]
    assert capsys.readouterr().err == ""


def test_local_map_of_a_run_context_draws_the_same_bar(loud, capsys):
    """The run context's map without a cluster (privcube.core.context.local_map) draws the titled bar
    of privcube.core.progress, and nothing untitled; graphs.progress.set_quiet silences it (one flag)."""
    from privcube.core.context import local_map

    assert local_map(_slow_square, [2, 3], title="solving parts") == [4, 9]
    frames = [f for f in capsys.readouterr().err.replace("\r", "\n").splitlines() if f.strip()]
    assert frames and frames[-1].startswith("solving parts [") and "2/2" in frames[-1]
    assert local_map(_slow_square, [2]) == [4] and capsys.readouterr().err == ""
    prog.set_quiet(True)
    assert local_map(_slow_square, [2], title="solving parts") == [4] and capsys.readouterr().err == ""
