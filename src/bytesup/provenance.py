"""Facts about the run that make a report checkable: hashes, versions, machine, git.

These are the volatile values (dates, hostnames, versions); only the report rule calls
this module, so upstream outputs never depend on them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

PACKAGES = (
    "bytesup", "snakemake", "numpy", "gguf", "pandas", "matplotlib", "papermill",
    "huggingface_hub", "threadpoolctl", "jsonschema", "torch",
)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


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


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def blas_info() -> list[dict]:
    from threadpoolctl import threadpool_info

    keep = ("user_api", "internal_api", "version", "num_threads", "architecture", "threading_layer")
    return [{k: info.get(k) for k in keep} for info in threadpool_info()]


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
        "load_average": list(load) if load else None,
    }
