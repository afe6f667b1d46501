"""llama.cpp (llama-cpp-python, the optional `llama` extra) as a reference engine: is it usable here?

llama-cpp-python is compiled on the machine that installs it. A build for instructions this CPU
lacks (AVX-512 on a machine without it, AMX under a VM) does not fail at import but kills the
process with SIGILL at the first model it loads. `status()` therefore loads the model once in a
child process: only when that survives does the caller use llama.cpp in its own process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

INSTALL = ("pip install --no-cache-dir -e '.[llama]' with CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX=ON "
           "-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON\" (README, 'Reference engines')")

_PROBE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=32, n_threads=1, verbose=False)
llm.eval(llm.tokenize(b"The capital", add_bos=False)[:2] or [1])
print("ok")
"""


def status(gguf_path: str | Path, timeout: float = 300) -> tuple[bool, str]:
    """(True, version) when llama.cpp loads and runs this file here, else (False, one line why)."""
    try:
        import llama_cpp
    except ImportError:
        return False, f"llama-cpp-python is not installed: {INSTALL}"
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(gguf_path)], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode == 0 and proc.stdout.strip().endswith("ok"):
        return True, getattr(llama_cpp, "__version__", "unknown")
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        why = " (an instruction this CPU lacks: rebuild it)" if name == "SIGILL" else ""
        return False, f"llama-cpp-python {llama_cpp.__version__} crashed with {name}{why}: {INSTALL}"
    last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
    return False, f"llama-cpp-python {llama_cpp.__version__} could not run {Path(gguf_path).name}: {last}"
