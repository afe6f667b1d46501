"""What machine this is (CPU model, last-level cache, the BLAS numpy calls), and how much of it
other processes took while a job measured. The timing jobs record these beside their numbers,
and the report's provenance repeats them."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

MiB = 1 << 20
ASSUMED_LLC_BYTES = 32 * MiB
BUSY_OTHER_FRACTION = 0.10  # above this share of the CPUs used by others, the run is marked machine_shared
ENV_FACTS = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
)


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


def llc_bytes() -> tuple[int, str]:
    """Size of the last-level cache and where it was read (sysfs, sysconf or assumed)."""
    best = (0, 0)
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        factor = {"K": 1024, "M": MiB, "G": 1 << 30}.get(size[-1:], 1)
        value = int(size.rstrip("KMG")) * factor
        best = max(best, (level, value))
    if best[1]:
        return best[1], f"sysfs L{best[0]}"
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            value = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if value and value > 0:
            return int(value), f"sysconf {name}"
    return ASSUMED_LLC_BYTES, "assumed (not readable on this machine)"


def machine_facts(threads: int) -> dict:
    size, source = llc_bytes()
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpus_usable": affinity,
        "threads": threads,
        "llc_bytes": size,
        "llc_source": source,
        "memory_bytes": memory_bytes(),
        "blas": blas_info(),
        "environment": {name: os.environ[name] for name in ENV_FACTS if name in os.environ},
    }


class CpuShare:
    """How much of the machine other processes used while we measured.

    Load average lags by a minute; this does not. From /proc/stat (every CPU's busy
    ticks) minus this process's own CPU time, over the elapsed wall time x CPUs. A
    figure near 0 means the machine was ours; 0.3 means a third of it went elsewhere.
    """

    def __init__(self):
        self._start = self._read()
        self._load_before = list(os.getloadavg())

    @staticmethod
    def _read():
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait (guest is inside user)
        own = os.times()
        return time.monotonic(), busy / os.sysconf("SC_CLK_TCK"), own.user + own.system

    def other_fraction(self) -> float | None:
        return other_cpu_fraction(self._start, self._read(), os.cpu_count() or 1)

    def record(self) -> dict:
        """What a job's summary says about the machine's other load since this share began."""
        other = self.other_fraction()
        return {
            "load_average_before": self._load_before,
            "load_average_after": list(os.getloadavg()),
            "other_processes_cpu_fraction": other,
            "machine_shared": bool(other is not None and other > BUSY_OTHER_FRACTION),
        }


def other_cpu_fraction(start, end, cpus: int) -> float | None:
    """(wall s, machine busy CPU-s, own CPU-s) at start and end -> others' share of the CPUs."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    others = (end[1] - start[1]) - (end[2] - start[2])
    return max(0.0, others / ((end[0] - start[0]) * cpus))
