"""Whether llama.cpp can run here is decided in a child process: a build for another CPU kills
its process with SIGILL, and that must end as a one-line reason, not as a crashed job."""

import sys
import types

import pytest

from bytesup.model import llama_cpp_ref


@pytest.fixture
def stand_in(monkeypatch):
    """These tests replace the child's script, so the parent needs only a module named llama_cpp:
    a stand-in lets them run where the `llama` extra is not installed."""
    module = types.ModuleType("llama_cpp")
    module.__version__ = "0.0-stand-in"
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    return module


def test_not_installed_says_how_to_install(monkeypatch, tiny_gguf):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now raises ImportError
    usable, why = llama_cpp_ref.status(tiny_gguf)
    assert not usable and why.startswith("llama-cpp-python is not installed: ") and "GGML_NATIVE=OFF" in why


def test_a_crash_in_the_child_is_a_reason_not_a_crash(monkeypatch, tiny_gguf, stand_in):
    monkeypatch.setattr(llama_cpp_ref, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    usable, why = llama_cpp_ref.status(tiny_gguf)
    assert not usable and why.startswith("llama-cpp-python 0.0-stand-in crashed with SIGILL (an instruction this CPU")
    assert "\n" not in why


def test_an_error_in_the_child_names_the_file(monkeypatch, tiny_gguf, stand_in):
    monkeypatch.setattr(llama_cpp_ref, "_PROBE", "raise SystemExit('failed to load model')")
    usable, why = llama_cpp_ref.status(tiny_gguf)
    assert not usable and why == "llama-cpp-python 0.0-stand-in could not run tiny.gguf: failed to load model"


def test_a_file_llama_cpp_aborts_on_and_a_hang_are_reasons(monkeypatch, tiny_gguf, stand_in):
    monkeypatch.setattr(llama_cpp_ref, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGABRT)")
    usable, why = llama_cpp_ref.status(tiny_gguf)
    assert not usable and why.endswith("refused tiny.gguf: it stopped with SIGABRT")
    monkeypatch.setattr(llama_cpp_ref, "_PROBE", "import time; time.sleep(30)")
    usable, why = llama_cpp_ref.status(tiny_gguf, timeout=1)
    assert not usable and why == "llama-cpp-python 0.0-stand-in did not load and run tiny.gguf within 1 s"
