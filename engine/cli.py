"""Command line: ``privcube marginals | plan | run | report | schema | generate-census | demo``. Thin: parse, call the API, print.

Any ``PrivcubeError`` becomes one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privcube import __version__
from privcube.core.errors import ConfigError, PrivcubeError


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler-address", metavar="A", help="connect to an existing Dask scheduler")
    g.add_argument("--scheduler-file", metavar="F", help="connect through a scheduler file (HPC)")
    p.add_argument("--workers", type=int, metavar="N", help="workers for a LocalCluster (overrides the config; with "
                   "cluster: threads, the number of threads; Slurm/PBS: the number of jobs)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privcube", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"privcube {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    m = sub.add_parser("marginals", help="EXACT, NON-PRIVATE marginal counts (testing/evaluation only)",
                       description="Exact, non-private marginal counts as a tidy Parquet table: one row per "
                                   "cell (empty cells included), the attribute codes, then 'count'.")
    m.add_argument("data", help="Parquet/CSV file, directory, glob or URL")
    m.add_argument("--schema", required=True, help="domain JSON {column: size} or rich schema YAML/JSON")
    m.add_argument("--attrs", required=True, help="comma-separated attribute names, e.g. age,sex")
    m.add_argument("--out", required=True, help="output Parquet file (an existing file privcube marginals did not "
                                                "write is refused unless --force)")
    m.add_argument("--force", action="store_true", help="replace an existing --out file privcube did not write")
    _cluster_flags(m)

    pl = sub.add_parser("plan", help="expected error of a batch mechanism, without reading data")
    pl.add_argument("config", help="job config (YAML or JSON)")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.add_argument("--links", action="append", default=None, metavar="M|NAME=M",
                    help="relational jobs: the public number of links (sizes the links stage under max_noise); "
                         "NAME=M for one link of a schema graph (NAME as under privacy.links), repeatable")

    r = sub.add_parser("run", help="run a job: measure privately and write the run directory")
    r.add_argument("config", help="job config (YAML or JSON)")
    r.add_argument("--out", required=True, help="run directory (refused if it holds a finished run)")
    r.add_argument("--seed", type=int, help="seed the noise (reproducible; recorded in the outputs, so not for releases)")
    r.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    r.add_argument("--overwrite", action="store_true",
                   help="replace a finished run in --out (kept until the new run completes) and copies privcube "
                        "published to output.answers / output.zarr; never a folder holding other files")
    r.add_argument("--no-report", action="store_true", help="do not write DIR/report.html after the run")
    _cluster_flags(r)

    rep = sub.add_parser("report", help="write RUN_DIR/report.html: plots, ledger and trace of a finished run",
                         description="Write RUN_DIR/report.html, one self-contained page (inline SVG plots, no "
                                     "network at view time) of a finished run: expected error per query group, "
                                     "budget split, ledger, selection trace, published vs synthetic marginals.")
    rep.add_argument("run_dir", metavar="RUN_DIR", help="a finished run folder (privcube run --out)")

    s = sub.add_parser("schema", help="inspect a schema, or infer one (NON-PRIVATE) from data")
    ssub = s.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    sh = ssub.add_parser("show", help="print a schema/domain with its attribute sizes")
    sh.add_argument("schema", help="domain JSON {column: size} or rich schema YAML/JSON")
    inf = ssub.add_parser("infer", help="NON-PRIVATE: propose a schema from the data itself")
    inf.add_argument("data", help="Parquet/CSV file, directory, glob or URL to read the columns from")
    inf.add_argument("--out", help="write the proposed schema (YAML) here (an existing file is refused unless "
                                   "--force)")
    inf.add_argument("--force", action="store_true", help="with --out: replace an existing file")

    _audit_parser(sub)
    _budget_parser(sub)

    _generate_parser(sub)

    d = sub.add_parser("demo", help="generate a seeded census-like table and run the main job on it")
    d.add_argument("--out", help="folder for the demo data and run (default: ./privcube-demo); refused if it holds "
                                 "files the demo did not write")
    d.add_argument("--rows", type=int, default=200_000, help="rows of demo data (default 200000)")
    d.add_argument("--seed", type=int, default=None, help="seed the noise")
    d.add_argument("--workers", type=int, default=None, help="LocalCluster workers")
    d.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def _generate_parser(sub: Any) -> None:
    """``privcube generate-census OUT --rows N [--geography [--states S --counties C --tracts T]]``."""
    g = sub.add_parser("generate-census", help="write seeded census-like test data (integer-coded Parquet, no "
                                               "download), optionally placed in a state > county > tract geography",
                       description="Write seeded, census-like synthetic persons as integer-coded Parquet files with "
                                   "domain.json and schema.yaml. With --geography: OUT/persons/ (a tract column, rows "
                                   "grouped by tract), the public map OUT/geo-map.parquet (tract, county, state) and "
                                   "attributes whose distribution varies by state, county and tract.")
    g.add_argument("out", metavar="OUT", help="output folder (existing generated files are refused unless --overwrite)")
    g.add_argument("--rows", type=int, required=True, help="number of persons")
    g.add_argument("--seed", type=int, default=0, help="data seed: the same seed writes the same files (default 0)")
    g.add_argument("--attributes", type=int, default=12, metavar="K",
                   help="the first K of the generator's 30 census attributes (default 12; with --geography, "
                        "'state' among them is dropped: the map gives it)")
    g.add_argument("--rows-per-file", type=int, default=None, metavar="R",
                   help="rows per Parquet file (default 1000000, with --geography 2000000)")
    g.add_argument("--geography", action="store_true", help="place persons in tracts of a generated state > county "
                                                            "> tract map (writes persons/, geo-map.parquet)")
    g.add_argument("--states", type=int, default=None, metavar="S", help="with --geography: number of states (default 51)")
    g.add_argument("--counties", type=int, default=None, metavar="C",
                   help="with --geography: number of counties (default 3100)")
    g.add_argument("--tracts", type=int, default=None, metavar="T",
                   help="with --geography: number of tracts, the finest unit (default 70000)")
    g.add_argument("--workers", type=int, default=None, metavar="N", help="threads writing files in parallel "
                                                                          "(default: the machine's cores, at most 8)")
    g.add_argument("--overwrite", action="store_true", help="replace files an earlier generate-census wrote in OUT")


def _audit_parser(sub: Any) -> None:
    """``privcube audit [--mechanism NAME ...] [--fast | --all]`` (privcube.audit.runner)."""
    a = sub.add_parser("audit", help="empirical privacy audit: a lower bound on epsilon of every mechanism",
                       description="Run each mechanism many times on two neighbouring datasets, fit a test that tells "
                                   "them apart and print a lower bound on epsilon (Clopper-Pearson) beside what the "
                                   "ledger claims; exit 1 when a bound exceeds its claim.")
    a.add_argument("--mechanism", nargs="+", action="extend", metavar="NAME",
                   help="audit only these (residual-planner, querysmasher, hdmm, eigen-design, aim-grem, relational, "
                        "pipeline); repeatable")
    mode = a.add_mutually_exclusive_group()
    mode.add_argument("--fast", action="store_true", help="the quick subset (the default)")
    mode.add_argument("--all", action="store_true", help="every case with more trials (up to 30 min on 2 cores)")
    a.add_argument("--seed", type=int, default=0, help="seed from which every trial's noise seed is derived (default 0)")
    a.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bounds (default 0.95)")
    a.add_argument("--json", action="store_true", help="machine-readable rows")
    a.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _budget_parser(sub: Any) -> None:
    """``privcube budget init PATH --epsilon E --delta D`` / ``privcube budget show PATH``."""
    b = sub.add_parser("budget", help="one privacy budget per dataset, charged by every run that names it",
                       description="A dataset's budget file (privacy.budget_file in a job config): every run that "
                                   "names it is charged against it, and a run that would exceed it is refused.")
    bsub = b.add_subparsers(dest="budget_command", required=True, metavar="ACTION")
    bi = bsub.add_parser("init", help="create a dataset budget file")
    bi.add_argument("path", metavar="PATH", help="the budget file to create (refused if it exists)")
    bi.add_argument("--epsilon", type=float, required=True, help="the dataset's total epsilon")
    bi.add_argument("--delta", type=float, required=True, help="the dataset's total delta")
    bs = bsub.add_parser("show", help="print the budget and the spend of every run charged to it")
    bs.add_argument("path", metavar="PATH", help="a budget file made by privcube budget init")
    bs.add_argument("--json", action="store_true", help="machine-readable output")


class Terminated(BaseException):
    """SIGTERM arrived (batch-system cancel, walltime, pod deletion): unwind so clusters and spill go."""


def _raise_terminated(signum: int, frame: object) -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated()


class _LineTracker:
    """stderr that remembers whether its last write ended a line, so a message printed after an
    interruption starts on a fresh line instead of being glued to an in-place progress bar."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.at_line_start = True

    def write(self, text: str) -> int:
        if text:
            self.at_line_start = text.endswith("\n")
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _say(line: str) -> None:
    """Print one line on stderr, on a line of its own (after an unfinished progress bar too)."""
    err = sys.stderr
    start = "\n" if isinstance(err, _LineTracker) and not err.at_line_start else ""
    print(f"{start}{line}", file=err)


RESUME_HINT = "continue an interrupted run with --resume (same config, --out and --seed)"


def _interrupted_run_hint(out: Path) -> str:
    """What an interrupted ``privcube run`` left in ``--out``: a run to ``--resume``, or nothing (a folder
    that is not a privcube run is never pointed to ``--resume``)."""
    try:
        from privcube.storage.outputs import RunDirectory

        state = RunDirectory(out).state()
    except Exception:  # noqa: BLE001 - a hint must not replace the message it completes
        return ""
    if state == "finished":
        return f"; the finished run in {str(out)!r} is unchanged"
    if state == "run":
        return f"; {RESUME_HINT}"
    if state == "foreign":
        return f"; nothing of this run was kept in {str(out)!r}"
    return f"; nothing was written to {str(out)!r}: run it again (without --resume)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (2 for a PrivcubeError, 130 interrupted, 143 terminated).

    SIGTERM is turned into an exception, like Ctrl-C, so that a cancelled job still closes the
    LocalCluster it started and deletes its private spill folder (exact partial counts) on the way
    out; a run stopped this way keeps its last checkpoint and continues with ``--resume``.
    """
    import signal
    import threading

    args = build_parser().parse_args(argv)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    original_stderr = sys.stderr
    sys.stderr = _LineTracker(original_stderr)
    hint = (lambda: _interrupted_run_hint(Path(args.out))) if args.command == "run" else (lambda: "")
    try:
        return _dispatch(args)
    except PrivcubeError as e:
        _say(f"privcube: error: {e}")
        return 2
    except KeyboardInterrupt:
        _say(f"privcube: interrupted (SIGINT){hint()}")
        return 130
    except BrokenPipeError:  # the reader went away (privcube plan --json | head): stop quietly, like cat
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    except Terminated:
        _say(f"privcube: terminated (SIGTERM){hint()}")
        return 143
    finally:
        if isinstance(sys.stderr, _LineTracker):
            sys.stderr = original_stderr
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def entry() -> None:
    """The ``privcube`` console command: ``main()``, then exit with its code.

    After a failed command (non-zero code) the process ends with ``os._exit`` once stdio and logging are
    flushed: tasks of the failed job may still run in native thread pools (e.g. Arrow readers), and a
    normal interpreter shutdown with such threads alive can abort ("terminate called without an active
    exception", exit -6) after the error was printed, losing the documented exit code. Nothing is
    pending by then: run directories are cleaned and clusters closed inside ``main``.
    """
    import logging
    import os

    code = main()
    if code == 0:
        sys.exit(0)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(code)


def _link_counts(values: list[str] | None) -> int | dict[str, int] | None:
    """``plan --links``: one count for every link (``M``) or counts per link (``NAME=M``, repeated)."""
    if not values:
        return None

    def count(text: str, what: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"plan: {what} must be a whole number of links, got {text!r}") from None

    plain = [v for v in values if "=" not in v]
    if plain and (len(values) > 1):
        raise ConfigError("plan: --links takes either one count M for every link or NAME=M per link, not both")
    if plain:
        return count(plain[0], "--links")
    out: dict[str, int] = {}
    for v in values:
        name, _, m = v.partition("=")
        if name.strip() in out:
            raise ConfigError(f"plan: --links names {name.strip()!r} twice")
        out[name.strip()] = count(m, f"--links {name.strip()}")
    return out


def _dispatch(args: argparse.Namespace) -> int:
    from privcube import api

    if args.command == "marginals":
        return _marginals(args)
    if args.command == "plan":
        summary = api.plan(args.config, links=_link_counts(args.links))
        if args.json:
            print(summary.to_json())  # its "warnings" list too
        else:
            _print_plan(summary)
        sys.stdout.flush()
        for warning in summary.warnings:  # the same lines a run prints at its end
            _say(f"privcube: warning: {warning}")
        return 0
    if args.command == "run":
        res = api.run(args.config, args.out, seed=args.seed, resume=args.resume,
                      scheduler_address=args.scheduler_address, scheduler_file=args.scheduler_file,
                      workers=args.workers, quiet=args.quiet, overwrite=args.overwrite)
        from privcube.core.progress import end_line

        end_line()  # a progress line left open (e.g. at 99.9%) must not run into what follows
        spent = res.ledger["spent"]
        for warning in (res.report or {}).get("warnings") or []:  # e.g. a schema inferred from the data
            _say(f"privcube: warning: {warning}")
        print(f"outputs: {res.out_dir}")
        print(f"privacy spent: rho={spent['rho']:.6g} epsilon={spent['epsilon']:.6g} delta={spent['delta']:.3g}")
        if not args.no_report:
            _report_after_run(res.out_dir)
        return 0
    if args.command == "report":
        from privcube import api
        from privcube.report import write_report

        print(f"report: {write_report(args.run_dir, replan=api.plan)}")
        return 0
    if args.command == "schema":
        return _schema(args)
    if args.command == "audit":
        return _audit(args)
    if args.command == "budget":
        return _budget(args)
    if args.command == "generate-census":
        return _generate_census(args)
    if args.command == "demo":
        from privcube.demo import run_demo

        summary = run_demo(out=args.out, rows=args.rows, seed=args.seed, workers=args.workers, quiet=args.quiet)
        _report_after_run(summary.out_dir)
        return 0
    raise AssertionError(args.command)


def _audit(args: argparse.Namespace) -> int:
    """``privcube audit``: the table of lower bounds; exit 0 when every bound is within its claim, else 1."""
    import json

    from privcube.audit.runner import format_table, run_audit
    from privcube.audit.cases import select, suite

    if not 0 < args.confidence < 1:
        raise ConfigError(f"audit: --confidence must lie strictly between 0 and 1, got {args.confidence:g}")
    if args.seed < 0:
        raise ConfigError(f"audit: --seed must be a non-negative integer, got {args.seed}")
    mode = "all" if args.all else "fast"
    cases = select(suite(), args.mechanism)  # named: every case of them; else --fast's subset, or all
    if not args.mechanism and mode == "fast":
        cases = [c for c in cases if c.fast_suite]

    def done(row) -> None:  # noqa: ANN001
        if not args.quiet:
            _say(f"audit: {row.mechanism} ({row.noise}, {row.neighbours}): bound {row.lower_bound:.3f} vs claim "
                 f"{row.claim:.3f}, {row.trials} trials per dataset, {row.seconds:.0f} s")

    rows = run_audit(cases, mode, seed=args.seed, confidence=args.confidence, on_row=done)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        print(format_table(rows))
    return 0 if all(r.passed for r in rows) else 1


def _generate_census(args: argparse.Namespace) -> int:
    """``privcube generate-census``: the flat generator, or the geography-aware one with ``--geography``."""
    import os
    import time

    units = {"states": args.states, "counties": args.counties, "tracts": args.tracts}
    given = [k for k, v in units.items() if v is not None]
    if given and not args.geography:
        raise ConfigError(f"generate-census: --{given[0]} needs --geography")
    start = time.perf_counter()
    if args.geography:
        from privcube.storage.census_geography import generate_census_geo

        sizes = {k: v for k, v in units.items() if v is not None}
        paths = generate_census_geo(args.out, args.rows, seed=args.seed, n_attributes=args.attributes,
                                    rows_per_file=args.rows_per_file or 2_000_000, workers=args.workers,
                                    overwrite=args.overwrite, **sizes)
        shown = [paths["persons"], paths["map"], paths["domain"], paths["schema"]]
    else:
        from privcube.storage.generate import generate_census

        files, _ = generate_census(args.out, args.rows, seed=args.seed, n_attributes=args.attributes,
                                   rows_per_file=args.rows_per_file or 1_000_000, overwrite=args.overwrite,
                                   workers=args.workers or min(os.cpu_count() or 1, 8))
        shown = [Path(args.out) / f"part-*.parquet ({len(files)} files)", Path(args.out) / "domain.json"]
    seconds = time.perf_counter() - start
    print(f"generated {args.rows} rows in {seconds:.1f} s ({args.rows / max(seconds, 1e-9):.3g} rows/s): "
          + ", ".join(str(p) for p in shown))
    return 0


def _budget(args: argparse.Namespace) -> int:
    """``privcube budget init`` / ``show``."""
    from privcube import dataset_budget

    if args.budget_command == "init":
        info = dataset_budget.init_budget(args.path, args.epsilon, args.delta)
        print(f"budget: {info['path']} (epsilon={info['epsilon']:g}, delta={info['delta']:g}, rho={info['rho']:.6g})")
        return 0
    status = dataset_budget.show_budget(args.path)
    if args.json:
        import json

        print(json.dumps(status, indent=2))
    else:
        print(dataset_budget.format_status(status))
    return 0


def _report_after_run(run_dir: Path) -> None:
    """Write the finished run's report.html; a rendering failure is one warning line, the run is kept."""
    try:
        from privcube import api
        from privcube.report import write_report

        print(f"report: {write_report(run_dir, replan=api.plan)}")
    except Exception as e:  # noqa: BLE001 - the run is complete and must not be lost to a plotting problem
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        print(f"privcube: warning: the run is complete but report.html was not written ({type(e).__name__}: "
              f"{reason}); retry with `privcube report {run_dir}`", file=sys.stderr)


def _marginals(args: argparse.Namespace) -> int:
    import contextlib

    import numpy as np
    import pandas as pd

    from privcube import api
    from privcube.graphs.cluster.handle import resolve_cluster
    from privcube.core.progress import set_quiet
    from privcube.storage.counts_file import check_counts_out, write_counts

    out = check_counts_out(args.out, [args.data, args.schema], force=args.force)  # before any data is read
    set_quiet(args.quiet)
    attrs = [a.strip() for a in args.attrs.split(",") if a.strip()]
    spec = {"type": "threads"} if not (args.scheduler_address or args.scheduler_file or args.workers) else {"type": "local"}
    with resolve_cluster(spec, scheduler_address=args.scheduler_address, scheduler_file=args.scheduler_file,
                         workers=args.workers) as client, contextlib.nullcontext():
        mu = api.exact_marginals(args.data, args.schema, attrs, client=client)
    grids = np.indices(mu.shape).reshape(len(attrs), -1)
    frame = pd.DataFrame({a: g.astype(np.int64) for a, g in zip(attrs, grids)})
    frame["count"] = np.asarray(mu, dtype=np.int64).ravel()
    write_counts(out, frame)
    print(f"NON-PRIVATE exact counts written to {args.out} ({len(frame)} cells); do not publish them.")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from privcube.storage.schema import load_schema

    if args.schema_command == "show":
        schema = load_schema(args.schema)
        if schema.inferred_from_data:
            _say("privcube: warning: this schema carries inferred_from_data: true (proposed by `privcube schema "
                 "infer` from the data, NON-PRIVATE); runs using it warn that the DP guarantee does not cover it")
        for a in schema.attributes:
            print(f"{a.name}\t{a.kind}\t{a.size}")
        print(f"cells: {schema.domain.size():.6g}")
        return 0
    from privcube.storage.infer import infer_schema

    out = Path(args.out) if args.out else None
    if out is not None:  # refused before the data is read: a hand-written schema is never replaced silently
        if out.is_dir():
            raise ConfigError(f"schema infer --out {str(out)!r} is a folder; give a file name such as "
                              f"{str(out / 'schema.yaml')!r}")
        if out.exists() and not args.force:
            raise ConfigError(f"schema infer --out {str(out)!r} exists (a schema written by hand?); it is left as it "
                              "is: give another file name, or add --force to replace it")
        if not out.parent.is_dir():
            raise ConfigError(f"schema infer --out {str(out)!r}: folder {str(out.parent)!r} does not exist")
    schema, warning = infer_schema(args.data)  # the schema carries inferred_from_data: true
    print(warning, file=sys.stderr)
    import yaml

    text = yaml.safe_dump(schema.to_dict(), sort_keys=False)  # inferred_from_data: true is its first key
    if out is not None:
        from privcube.core.atomic import atomic_write_text

        atomic_write_text(out, f"# {warning}\n# runs with this schema warn until it is replaced by a public "
                               "one (remove inferred_from_data only then)\n" + text)
        print(f"proposed schema written to {out}")
    else:
        print(text)
    return 0


def _print_plan(summary) -> None:  # noqa: ANN001
    print(f"mechanism: {summary.mechanism}")
    if summary.mechanism == "relational":
        _print_relational_plan(summary)
        return
    if summary.mechanism == "census":
        _print_census_plan(summary)
        return
    print(f"expected RMSE (all queries): {summary.rmse:.6g}")
    print("privacy: " + ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in summary.privacy.items() if not isinstance(v, dict)))
    unit, person = summary.privacy.get("privacy_unit"), summary.privacy.get("person_level")
    if isinstance(unit, dict) and isinstance(person, dict):  # the figures above are per row (see README)
        spent = ", ".join(f"{k}={v:.6g}" for k, v in person.items() if k in ("rho", "epsilon", "delta"))
        print(f"privacy unit: one person = rows sharing {unit['id']!r}, at most {unit['max_rows']} rows each; "
              f"per person: {spent}")
    if isinstance(summary.privacy.get("rho"), float):
        print(f"privacy cost (beta = 2 rho): {2 * summary.privacy['rho']:.6g}")
    print(f"query groups: {len(summary.groups)}")
    for g in summary.groups[:20]:
        queries = g.get("queries") or {}
        kinds = "" if all(q == "identity" for q in queries.values()) else \
            " [" + ", ".join(f"{a}: {q}" for a, q in queries.items()) + "]"
        weight = f" weight {g['weight']:g}" if g.get("weight", 1.0) != 1.0 else ""
        ci = f", {100 * g['ci_level']:g}% interval ±{g['ci_half_width']:.6g}" + (
            " (bound)" if g.get("ci_method") == "bound" else "") if "ci_half_width" in g else ""
        print(f"  {','.join(g['attributes']) or '(total)'}{kinds}{weight}: rmse {g['rmse']:.6g}{ci}")
    if len(summary.groups) > 20:
        print(f"  ... {len(summary.groups) - 20} more (use --json)")
    if summary.memory:
        _print_memory(summary.memory)
    if summary.measurements:
        print(f"measurements: {len(summary.measurements)}")
        for m in summary.measurements[:20]:
            where = (",".join(m["residual"]) or "(total)") if "residual" in m else str(m.get("strategy", "strategy"))
            info = ", ".join(f"{k} {v:.6g}" for k, v in m.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool))
            print(f"  {where}: {info}")
        if len(summary.measurements) > 20:
            print(f"  ... {len(summary.measurements) - 20} more (use --json)")


def _print_memory(mem: dict) -> None:
    """``plan``'s memory line: the estimated peak (largest step), where it runs, what it is compared with."""
    from privcube.core.machine import gib

    big = mem["largest_step"]
    if mem["workers"]:
        where = f"driver {gib(mem['driver_bytes'])} + {mem['workers']} workers x {gib(mem['worker_bytes'])}" + (
            f" (limit {gib(mem['worker_limit_bytes'])} each)" if mem.get("worker_limit_bytes") else "")
    else:
        where = ("in this process, " if mem["cluster"] == "in-process" else "driver; workers asked at run time, ") + \
            f"{mem['threads']} thread(s)"
    if mem["cluster"] != "remote":
        from privcube.admission import room

        there = f"; available {gib(room())}"
    else:
        there = ""
    verdict = "" if mem.get("fits") is not False else ": a run would be refused"
    print(f"memory: about {gib(mem['peak_bytes'])} at peak (largest step: {big['name']}, {big['what']}); {where}"
          f"{there}{verdict}")
    for note in mem.get("notes") or []:
        print(f"  note: {note}")


def _print_census_plan(summary) -> None:  # noqa: ANN001
    """The census plan: the budget, its split over levels, each level's expected error fitted and alone."""
    pr, d = summary.privacy, summary.details
    print("privacy: " + ", ".join(f"{k}={pr[k]:.6g}" for k in ("epsilon", "delta", "rho") if pr.get(k) is not None)
          + f"; split over levels by the {pr['split_chosen_by']}")
    for lv, info in d["levels"].items():
        print(f"level {lv}: {info['units']} units, share {info['share']:.3g} (rho {info['rho']:.6g}), expected "
              f"RMSE per cell {info['rmse']:.6g} (measured alone: {info['rmse_alone']:.6g}); tables: "
              + ", ".join(",".join(t) or "(total)" for t in info["tables"][:6])
              + (f" and {len(info['tables']) - 6} more" if len(info["tables"]) > 6 else ""))
    if d["invariants"]:
        print("invariants (published exactly, not protected: public facts): " + ", ".join(d["invariants"]))
    if d["structural_zeros"]:
        print(f"structural zeros: {len(d['structural_zeros'])} rule(s), zero in every output")
    print(f"output: {'whole counts (controlled rounding)' if d['integer'] else 'real counts'}, non-negative, "
          "children summing exactly to their parent")


def _print_relational_plan(summary) -> None:  # noqa: ANN001
    """The relational plan: the composed budget, each table's marginals, each link's schedule."""
    pr = summary.privacy
    print(f"privacy: epsilon={pr['epsilon']:.6g}, delta={pr['delta']:.6g}, rho={pr['rho']:.6g} "
          "(basic composition of the parts below)")
    for name, part in pr["parts"].items():
        print(f"  {name}: " + ", ".join(f"{k}={v:.6g}" for k, v in part.items() if isinstance(v, float)))
    for name in pr.get("public_tables", []):
        print(f"  {name}: public (released as it is, no budget)")
    for name, t in summary.details["tables"].items():
        print(f"table {name}: {t['marginals']} marginals, expected RMSE {t['rmse']:.6g} (counts)")
    for lp in summary.details["links"]:
        bound = "rho_per_measurement" not in lp  # m unknown under max_noise: bounds
        rho, std = (lp["rho_per_measurement_min"], lp["count_noise_std_max"]) if bound else \
            (lp["rho_per_measurement"], lp["count_noise_std"])
        noise = f"{std:.6g}" if math.isfinite(std) else "none"
        print(f"link {lp['link']} ({lp['kind']}): {lp['candidates']} candidate workloads, measurements: "
              f"{lp['measurements']}{'' if bound else ' at most'}; per measurement rho {'>= ' if bound else ''}"
              f"{rho:.6g}, count noise std "
              f"{'<= ' if bound else ''}{noise} (d_max {lp['d_max']}), selection epsilon {'<= ' if bound else ''}"
              f"{lp['em_epsilon']:.6g}"
              + (f", degrees rho {lp['rho_degrees']:.6g}" if lp["rho_degrees"] else "")
              + f"; selection score {lp['score']}")
        if lp.get("measure_all"):
            ma = lp["measure_all"]
            print(f"  measured first, without selection: {ma['workloads']} lowest-order workloads, rho {ma['rho']:.6g} "
                  f"in all, count noise std {ma['count_noise_std'][0]:.6g} to {ma['count_noise_std'][1]:.6g}"
                  + ("" if bound else f"; then {lp['drawn']} drawn at most"))
        if lp.get("degree_release"):
            print(f"  degree release: {lp['degree_release']}")
        if lp.get("warning"):
            print(f"  warning: {lp['warning']}")


if __name__ == "__main__":
    sys.exit(main())
