"""llama.cpp beside the NumPy decoder: on the file as it is, and on a float32 copy of the same bytes.

The quantized file is not like for like: llama.cpp multiplies Q4_1 blocks directly (and is
compute-bound on two cores), while the NumPy decoder reads float32. So the decode job also writes a
float32 GGUF of the same model, every tensor dequantized by the project's own dequantizers
(GGUFFile.load) and written through gguf-py's GGUFWriter, tensor by tensor (memory holds one tensor,
never the file), and llama.cpp decodes it on the same threads: both engines then read the very same
float32 bytes per token, and their tokens/s compare the decoders, not the formats.

llama-cpp-python is optional (the `llama` extra) and may be a build for instructions this CPU lacks:
bytesup.model.llama_cpp_ref.status() loads each file once in a child process before this process
touches it. Every refusal is one line in the summary ('skipped'), never a failed job.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from bytesup.gguf.file import GGUFFile
from bytesup.gguf.split import SPLIT_KEYS
from bytesup.model import llama_cpp_ref
from bytesup.timing.measure import TimingError

log = logging.getLogger(__name__)

DISK_HEADROOM_BYTES = 256 << 20  # free disk left beside the float32 copy
# Keys the writer sets itself (the architecture), or that must follow the new file (its type, alignment).
# a split model's split keys too: the copy is one file (bytesup.gguf.split)
_NOT_COPIED = {"general.architecture", "general.file_type", "general.alignment", *SPLIT_KEYS}
FILE_TYPE_ALL_F32 = 0  # llama.cpp's LLAMA_FTYPE_ALL_F32


def _value_type(type_name: str) -> tuple[GGUFValueType, GGUFValueType | None]:
    """GGUFFile's metadata type name ('UINT32', 'ARRAY[STRING]') as gguf-py's (type, array element type)."""
    if type_name.startswith("ARRAY[") and type_name.endswith("]"):
        inner = type_name[6:-1]
        if inner == "ARRAY":
            raise TimingError("a metadata array of arrays: the float32 copy does not write nested arrays")
        return GGUFValueType.ARRAY, GGUFValueType[inner]
    return GGUFValueType[type_name], None


def float32_copy_refusal(f32_bytes: int, resident_budget_bytes: int, folder: str | Path) -> str | None:
    """None when a float32 copy of `f32_bytes` tensor bytes may be written into `folder`, else one line why not."""
    if f32_bytes > resident_budget_bytes:
        return (
            f"the float32 copy ({f32_bytes / 1e9:.2f} GB) is over the resident budget "
            f"({resident_budget_bytes / 1e9:.2f} GB): the NumPy decoder streams this model, so there are no "
            "identical bytes to compare"
        )
    free = shutil.disk_usage(folder).free
    if f32_bytes + DISK_HEADROOM_BYTES > free:
        return f"the float32 copy ({f32_bytes / 1e9:.2f} GB) does not fit the {free / 1e9:.2f} GB free in {folder}"
    return None


def write_float32_copy(src: str | Path, dst: str | Path) -> dict:
    """Write every tensor of `src` dequantized to float32 (the project's dequantizers) into a new GGUF
    `dst` with the same metadata (file type ALL_F32), tensor by tensor; {'bytes', 'tensors', 'seconds'}.
    A TimingError (one line) for metadata the copy cannot write."""
    t0 = time.perf_counter()
    with GGUFFile(src) as f:
        writer = GGUFWriter(dst, f.metadata["general.architecture"])
        for key, value in f.metadata.items():
            if key not in _NOT_COPIED:
                vtype, sub = _value_type(f.metadata_types[key])
                writer.add_key_value(key, value, vtype, sub)
        writer.add_uint32("general.file_type", FILE_TYPE_ALL_F32)
        for info in f.tensors:
            writer.add_tensor_info(info.name, info.shape, np.dtype(np.float32), 4 * info.n_elements)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        total = 0
        for info in f.tensors:
            data = np.ascontiguousarray(f.load(info.name), dtype=np.float32)
            writer.write_tensor_data(data)
            total += data.nbytes
            del data
        writer.close()
    return {"bytes": total, "tensors": len(f.tensors), "seconds": time.perf_counter() - t0}


class LlamaDecoder:
    """llama.cpp on one GGUF, one token at a time: `step()` evaluates the next token and returns its
    seconds. Open it only after llama_cpp_ref.status() said the file runs here."""

    def __init__(self, path: str | Path, threads: int, n_ctx: int, n_batch: int = 512):
        from llama_cpp import Llama  # the optional extra, after the probe

        self.llm = Llama(
            model_path=llama_cpp_ref.model_path(path),  # a split model: its first part by llama.cpp's name
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_batch=n_batch,
            logits_all=False,
            verbose=False,
        )
        self._next = 0

    def start(self, prompt: list[int]) -> None:
        """A fresh context holding `prompt`; the next steps feed its last token again and again
        (the time of a step does not depend on which token it is)."""
        self.llm.reset()
        self.llm.eval([int(i) for i in prompt])
        self._next = int(prompt[-1])

    def step(self) -> float:
        t0 = time.perf_counter()
        self.llm.eval([self._next])
        return time.perf_counter() - t0

    def prefill(self, ids: list[int]) -> float:
        """Seconds of one pass over `ids` in a fresh context."""
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval([int(i) for i in ids])
        return time.perf_counter() - t0

    def close(self) -> None:
        if hasattr(self.llm, "close"):
            self.llm.close()

    def __enter__(self) -> LlamaDecoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def llama_version() -> str:
    import llama_cpp

    return getattr(llama_cpp, "__version__", "unknown")


def llama_cpp_on_file(
    path: str | Path, threads: int, prompt: list[int], n_tokens: int, prefill: dict[int, list[int]], repeats: int,
    warmup: int,
) -> dict:  # fmt: skip
    """llama.cpp's decode (n_tokens steps after `prompt` and `warmup` untimed steps) and one prefill per
    entry of `prefill` (N -> ids, `repeats` times after `warmup`) on the file as it is, or {'skipped': why}."""
    usable, why = llama_cpp_ref.status(path)
    if not usable:
        return {"skipped": why}
    n_ctx = max([len(prompt) + warmup + n_tokens, *map(len, prefill.values())]) + 8
    with LlamaDecoder(path, threads, n_ctx, n_batch=max([len(prompt), *map(len, prefill.values())])) as llm:
        llm.start(prompt)
        times = [llm.step() for _ in range(warmup + n_tokens)][warmup:]
        samples = {n: [llm.prefill(ids) for _ in range(warmup + repeats)][warmup:] for n, ids in prefill.items()}
    return {"version": llama_version(), "decode_times": times, "prefill": samples}
