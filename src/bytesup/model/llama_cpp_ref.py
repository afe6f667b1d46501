"""llama.cpp (llama-cpp-python, the optional `llama` extra) as a reference engine: is it usable here?

llama-cpp-python is compiled on the machine that installs it. A build for instructions this CPU
lacks (AVX-512 on a machine without it, AMX under a VM) does not fail at import but kills the
process with SIGILL at the first model it loads. `status()` therefore loads the model once in a
child process: only when that survives does the caller use llama.cpp in its own process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from bytesup.gguf.file import GGUFFile
from bytesup.run.files import PART_NAME, part_name

# On an assertion ggml forks a debugger to print a backtrace; without ptrace (a sandbox, a
# container) that child waits forever. A refusal should end at once, with no orphans.
ENVIRONMENT = {"GGML_NO_BACKTRACE": "1"}

INSTALL = (
    "pip install --no-cache-dir -e '.[llama]' with CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX=ON "
    "-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON\" (README, 'Reference engines')"
)

_PROBE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=32, n_threads=1, verbose=False)
llm.eval(llm.tokenize(b"The capital", add_bos=False)[:2] or [1])
print("ok")
"""


def model_path(gguf_path: str | Path) -> str:
    """The path to give llama.cpp. It finds a split model's other parts from the first part's own name,
    which must end in -00001-of-<n>.gguf; the fetch links that name to resources/models/<model>.gguf."""
    path = Path(gguf_path)
    if PART_NAME.fullmatch(path.name):
        return str(path)
    with GGUFFile(path) as f:
        n = len(f.parts)
    stem = path.name[: -len(".gguf")] if path.name.endswith(".gguf") else path.name
    alias = path.with_name(part_name(stem, 1, n))
    return str(alias) if n > 1 and alias.exists() else str(path)


def status(gguf_path: str | Path, timeout: float = 120) -> tuple[bool, str]:
    """(True, version) when llama.cpp loads and runs this file here, else (False, one line why)."""
    try:
        import llama_cpp
    except ImportError:
        return False, f"llama-cpp-python is not installed: {INSTALL}"
    version, name = getattr(llama_cpp, "__version__", "unknown"), Path(gguf_path).name
    os.environ.update(ENVIRONMENT)  # for the caller's own llama.cpp too
    child = subprocess.Popen(
        [sys.executable, "-c", _PROBE, model_path(gguf_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the probe and anything it started
        child.communicate()
        return False, f"llama-cpp-python {version} did not load and run {name} within {timeout:g} s"
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    if proc.returncode == 0 and proc.stdout.strip().endswith("ok"):
        return True, version
    if proc.returncode == -signal.SIGILL:
        return False, (
            f"llama-cpp-python {version} crashed with SIGILL (an instruction this CPU lacks: rebuild it): {INSTALL}"
        )
    if proc.returncode < 0:  # llama.cpp aborts (GGML_ASSERT) on a file it will not take
        return (
            False,
            f"llama-cpp-python {version} refused {name}: it stopped with {signal.Signals(-proc.returncode).name}",
        )
    last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
    return False, f"llama-cpp-python {version} could not run {name}: {last}"
