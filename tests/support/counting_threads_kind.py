"""A test plug-in cluster kind: dask's thread pool that records each time it is opened, registered by one line.

It shows what a new cluster kind takes: one module with one ``ClusterKind`` class, with its own option
(``label``) declared and checked (``CLUSTER_KINDS.register("counting-threads",
"counting_threads_kind:CountingThreads")``).
"""
from __future__ import annotations

from typing import Any, ClassVar

from privcube.core.params import Param
from privcube.graphs.cluster.inprocess import ThreadsKind
from privcube.graphs.cluster.local import check_machine_size


class CountingThreads(ThreadsKind):
    """``threads`` plus a ``label`` option; every opening is recorded in ``opened``."""

    name = "counting-threads"
    description = "dask's thread pool, counting its openings (a test plug-in)"
    OPTIONS = {**ThreadsKind.OPTIONS, "label": Param("run", "text", "a name recorded with each opening")}
    opened: ClassVar[list[dict[str, Any]]] = []

    def check(self, options: dict[str, Any], *, security_spec: Any, security: Any, flag: str | None) -> None:
        check_machine_size("threads", options, flag)

    def open(self, handle: Any) -> Any:
        CountingThreads.opened.append(dict(handle.options))
        return super().open(handle)
