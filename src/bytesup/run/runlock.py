"""Tell a killed run's leftover Snakemake lock from a live run's, and end the jobs it left running.

Snakemake locks the working directory while it runs (files under .snakemake/locks) and
refuses a second run beside it: that protects the first run. But a run killed with
SIGKILL, or a laptop that lost power, leaves the lock behind, and the next run would
refuse too. So each run records who holds the lock (pid and process start time) once
it has it; a later run removes the lock only when that process is gone.

Killing only the `snakemake` process leaves its jobs running (a notebook, an extract): they
would go on writing the files the next run writes. So each run also puts a token in its
environment (BYTESUP_RUN), which every job and kernel it starts inherits; a later run that
finds the owner gone looks for live processes carrying that token and ends them (SIGTERM,
then SIGKILL after a grace period) before it goes on, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

PIDFILE = "bytesup-run.json"
RUN_ENV = "BYTESUP_RUN"  # the token every job of a run inherits
GRACE_S = 5.0  # how long a left-over job gets to end on SIGTERM before SIGKILL


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (so a reused pid is not mistaken)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record_owner(workdir: str | Path = ".") -> None:
    """Called once the run holds the lock (Snakemake's onstart): who owns it, and the token its
    jobs (started after this) inherit."""
    pid = os.getpid()
    start = _start_time(pid)
    token = f"{pid}-{start}"
    os.environ[RUN_ENV] = token
    path = Path(workdir, ".snakemake", PIDFILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "start": start, "run": token}))


def clear_owner(workdir: str | Path = ".") -> None:
    """Called when the run ends, well or badly (onsuccess, onerror)."""
    Path(workdir, ".snakemake", PIDFILE).unlink(missing_ok=True)


def processes_of_run(token: str) -> list[int]:
    """Live processes (other than this one) whose environment carries BYTESUP_RUN=token."""
    marker = f"{RUN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def _alive(pid: int, start: str | None) -> bool:
    now = _start_time(pid)
    if now is None or now != start:
        return False
    try:  # a zombie has ended; only its parent has not collected it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end_processes(pids: list[int], grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM each process, wait up to grace_s for them to end, SIGKILL the rest; return the
    pids that had to be killed."""
    starts = {pid: _start_time(pid) for pid in pids}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p, s) for p, s in starts.items()):
        time.sleep(0.05)
    killed = []
    for pid, start in starts.items():
        if _alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def remove_stale_lock(workdir: str | Path = ".") -> str | None:
    """Remove the lock when its recorded owner is no longer running, after ending the jobs it
    left running; say what was done.

    Returns None when there was nothing to do, or a live run holds the lock (Snakemake
    will then refuse with its own message), or nobody recorded owning it.
    """
    locks = Path(workdir, ".snakemake", "locks")
    owner_file = Path(workdir, ".snakemake", PIDFILE)
    if not owner_file.is_file():
        return None
    try:
        owner = json.loads(owner_file.read_text())
        pid, start = int(owner["pid"]), owner.get("start")
    except (ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid() or (_start_time(pid) is not None and _start_time(pid) == start):
        return None
    said = []
    orphans = processes_of_run(owner["run"]) if owner.get("run") else []
    if orphans:
        killed = end_processes(orphans)
        how = f"; {len(killed)} needed SIGKILL" if killed else ""
        said.append(
            f"ended {len(orphans)} job process(es) the interrupted run (pid {pid}) left running "
            f"(pids {', '.join(map(str, orphans))}){how}, so they cannot write beside this run"
        )
    if locks.is_dir() and any(locks.iterdir()):
        shutil.rmtree(locks)
        said.append(
            f"removed the lock left by an interrupted run (pid {pid}, no longer running); "
            "its unfinished outputs will be redone"
        )
    owner_file.unlink(missing_ok=True)
    return "\n".join(said) or None
