"""Regenerate ``benchmarks/report-example.png``: the README's picture of a run's report.html.

Runs ``privcube demo`` (seeded, generated data, nothing downloaded) into a temporary folder, which writes
the run's ``report.html``, then photographs that page with headless Chromium (Debian package
``chromium``) from the network-less ``file://`` URL::

    python benchmarks/report_example.py [--rows 20000] [--height 2400] [--out benchmarks/report-example.png]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def main() -> None:
    """Demo run, then a screenshot of the top of its report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=2400)
    ap.add_argument("--out", default=str(Path(__file__).with_name("report-example.png")))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="privcube-report-example-") as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "privcube", "demo", "--out", tmp, "--rows", str(args.rows),
                        "--seed", "7", "--workers", "1", "--quiet"], check=True)
        page = Path(tmp) / "runs" / "run-001" / "report.html"
        print(f"demo run and report: {time.perf_counter() - t0:.1f} s; {page.stat().st_size / 1e3:.0f} kB")
        subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={Path(tmp) / 'profile'}",
                        f"--window-size={args.width},{args.height}", f"--screenshot={args.out}", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
    print(f"screenshot: {args.out}")


if __name__ == "__main__":
    main()
