"""Facts about the run that make a report checkable: hashes, versions, machine, git.

These are the volatile values (dates, hostnames, versions); only the report rule calls
this module, so upstream outputs never depend on them.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from bytesup.timing.machine import blas_info, cpu_model, memory_bytes

PACKAGES = (
    "bytesup",
    "snakemake",
    "numpy",
    "gguf",
    "pandas",
    "matplotlib",
    "papermill",
    "huggingface_hub",
    "threadpoolctl",
    "jsonschema",
    "torch",
)


def git_describe(cwd: str | Path = ".") -> str:
    """`git describe --always --dirty`, or a note saying why there is none."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unknown ({err.__class__.__name__})"
    return out.stdout.strip() if out.returncode == 0 else "unknown (not a git checkout)"


def package_versions(names=PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def config_sha256(config: dict) -> str:
    """The sha256 of the config as canonical JSON (sorted keys), as the manifest records it."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def gpus() -> list[dict]:
    """The GPUs nvidia-smi sees on this machine (name, driver, memory); [] when none or no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            mib = int(parts[2]) if parts[2].isdigit() else None
            found.append({"name": parts[0], "driver": parts[1], "memory_mib": mib})
    return found


def _timestamp(seconds) -> str | None:
    if not isinstance(seconds, (int, float)):
        return None
    return datetime.datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def job_times(path: str, snakemake_dir: str | Path = ".snakemake") -> dict:
    """When the Snakemake job that wrote `path` started and ended, from Snakemake's own record.

    Snakemake keeps one JSON record per output in .snakemake/metadata/, named by the
    url-safe base64 of the path (split into '@'-prefixed folders past the file-name limit).
    Returns {"job_started": iso or None, "job_finished": iso or None}; None when there is no
    record (another Snakemake version, a file made outside Snakemake).
    """
    times = {"job_started": None, "job_finished": None}
    name = base64.urlsafe_b64encode(str(path).encode()).decode()
    meta = Path(snakemake_dir) / "metadata"
    try:
        limit = os.pathconf(meta, "PC_NAME_MAX") or 255
    except (OSError, ValueError, AttributeError):
        limit = 255
    parts = [name[i : i + limit - 1] for i in range(0, len(name), limit - 1)]
    record = meta.joinpath(*(["@" + p for p in parts[:-1]] + parts[-1:]))
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return times
    times["job_started"] = _timestamp(data.get("starttime"))
    times["job_finished"] = _timestamp(data.get("endtime"))
    return times


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "blas": blas_info(),
        "load_average": [round(x, 2) for x in load] if load else None,
        "gpus": gpus(),
    }
