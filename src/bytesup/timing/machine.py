"""What machine this is: CPU model and the BLAS numpy calls. The timing jobs record these
beside their numbers, and the report's provenance repeats them."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model", "processor\t: arm")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_info() -> list[dict]:
    """The BLAS libraries numpy calls, with kernel and thread count (threadpoolctl)."""
    import numpy  # noqa: F401  threadpoolctl lists only libraries already loaded
    from threadpoolctl import threadpool_info

    keep = ("user_api", "internal_api", "prefix", "version", "num_threads", "architecture", "threading_layer")
    return [{k: info.get(k) for k in keep} for info in threadpool_info() if info.get("user_api") == "blas"]


def memory_bytes() -> int | None:
    """The machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
