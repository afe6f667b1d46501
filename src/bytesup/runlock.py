"""Tell a killed run's leftover Snakemake lock from a live run's.

Snakemake locks the working directory while it runs (files under .snakemake/locks) and
refuses a second run beside it: that protects the first run. But a run killed with
SIGKILL, or a laptop that lost power, leaves the lock behind, and the next run would
refuse too. So each run records who holds the lock (pid and process start time) once
it has it; a later run removes the lock only when that process is gone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

PIDFILE = "bytesup-run.json"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (so a reused pid is not mistaken)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record_owner(workdir: str | Path = ".") -> None:
    """Called once the run holds the lock (Snakemake's onstart)."""
    pid = os.getpid()
    path = Path(workdir, ".snakemake", PIDFILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "start": _start_time(pid)}))


def clear_owner(workdir: str | Path = ".") -> None:
    """Called when the run ends, well or badly (onsuccess, onerror)."""
    Path(workdir, ".snakemake", PIDFILE).unlink(missing_ok=True)


def remove_stale_lock(workdir: str | Path = ".") -> str | None:
    """Remove the lock when its recorded owner is no longer running; say what was done.

    Returns None when there was nothing to do, or a live run holds the lock (Snakemake
    will then refuse with its own message), or nobody recorded owning it.
    """
    locks = Path(workdir, ".snakemake", "locks")
    owner_file = Path(workdir, ".snakemake", PIDFILE)
    if not locks.is_dir() or not any(locks.iterdir()) or not owner_file.is_file():
        return None
    try:
        owner = json.loads(owner_file.read_text())
        pid, start = int(owner["pid"]), owner.get("start")
    except (ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid() or (_start_time(pid) is not None and _start_time(pid) == start):
        return None
    shutil.rmtree(locks)
    owner_file.unlink(missing_ok=True)
    return (
        f"removed the lock left by an interrupted run (pid {pid}, no longer running); "
        "its unfinished outputs will be redone"
    )
