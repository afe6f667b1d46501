"""How long the workflow takes to find nothing to do, against Snakemake starting at all.

A no-op run (`snakemake --cores all` in a finished project) pays for the interpreter, Snakemake's
imports and plugins, and then the workflow's own part: reading the Snakefile and its rules, the
package's imports, building the DAG and checking every output. `snakemake --version` pays the first
part only. The benchmark runs the two in turns, `repeats` times each, and compares medians: the
target is a no-op within NOOP_OVER_VERSION_TARGET times `--version`.

It never runs a job: a `snakemake --dry-run` first must say "Nothing to be done", or it stops.

    python -m bytesup.timing.noop_bench [PROJECT] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bytesup.timing.measure import TimingError, summarize, target

NOOP_OVER_VERSION_TARGET = 1.5
NOTHING_TO_DO = "Nothing to be done"
NOISY_SPREAD = 0.10
RUN_TIMEOUT_S = 300  # one Snakemake start; a no-op takes seconds


def _snakemake(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """(wall seconds, the finished process) of one `snakemake ARGS` in the project's folder."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", *args],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as err:
        raise TimingError(f"{project}: snakemake {' '.join(args)} ran past {RUN_TIMEOUT_S} s") from err
    return time.perf_counter() - start, done


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"


def noop_bench(project: Path | str, repeats: int = 7) -> dict:
    """Times of a no-op run and of `snakemake --version` in turns, their medians, spreads and ratio,
    and the target's row. Raises TimingError where the project has work to do or Snakemake fails."""
    project = Path(project)
    if repeats < 1:
        raise TimingError(f"repeats must be at least 1, not {repeats}")
    # The check is also the warm-up: it reads the same files a no-op reads.
    _, check = _snakemake(project, "--dry-run")
    if check.returncode != 0:
        raise TimingError(f"{project}: snakemake --dry-run failed: {_last_line(check)}")
    if NOTHING_TO_DO not in check.stdout + check.stderr:
        raise TimingError(f"{project}: not a finished project (snakemake --dry-run has jobs to run); run it first")
    load_before = os.getloadavg()[0]
    noop, version = [], []
    for _ in range(repeats):
        seconds, done = _snakemake(project, "--cores", "all")
        if done.returncode != 0 or NOTHING_TO_DO not in done.stdout + done.stderr:
            raise TimingError(f"{project}: the no-op run did something: {_last_line(done)}")
        noop.append(seconds)
        seconds, done = _snakemake(project, "--version")
        if done.returncode != 0:
            raise TimingError(f"snakemake --version failed: {_last_line(done)}")
        version.append(seconds)
    noop_s, version_s = summarize(noop, NOISY_SPREAD), summarize(version, NOISY_SPREAD)
    ratio = noop_s["median_s"] / version_s["median_s"]
    noisy = noop_s["noisy"] or version_s["noisy"]
    return {
        "noop": noop_s,
        "version": version_s,
        "noop_over_version": ratio,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "target": target(
            "noop_run_over_snakemake_version",
            NOOP_OVER_VERSION_TARGET,
            ratio,
            "x",
            ratio <= NOOP_OVER_VERSION_TARGET,
            noisy,
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """A no-op run against `snakemake --version`, in turns: medians, spreads, their ratio and the target."""
    p = argparse.ArgumentParser(prog="python -m bytesup.timing.noop_bench", description=main.__doc__)
    p.add_argument("project", nargs="?", default=".", help="a finished project's folder (default: here)")
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args(argv)
    try:
        r = noop_bench(a.project, a.repeats)
    except TimingError as err:
        print(f"noop_bench: {err}", file=sys.stderr)
        return 2
    print(f"{a.project}: {a.repeats} runs of each, in turns; load average before {r['load_before']:.2f}, "
          f"after {r['load_after']:.2f} (on {os.cpu_count()} CPUs)")  # fmt: skip
    for name, key in (("no-op snakemake --cores all", "noop"), ("snakemake --version", "version")):
        s = r[key]
        print(f"{name:<28} median {s['median_s']:.2f} s  (p25-p75 {s['p25_s']:.2f}-{s['p75_s']:.2f} s)")
    t = r["target"]
    print(f"ratio {t['measured']:.2f}x  target <= {t['target']:.1f}x  {'met' if t['met'] else 'NOT met'}"
          f"{'  (noisy)' if t['noisy'] else ''}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
