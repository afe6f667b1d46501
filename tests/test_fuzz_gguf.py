"""Fuzzing the reader: damaged GGUFs either parse or raise GGUFFormatError, fast and small.

Thousands of seeded mutations of a small valid file (truncations at every byte of the
structure, bit flips, every header/metadata/tensor-info number overwritten with edge
values, random byte runs), plus hypothesis-generated headers. For each case: opening
the file either works, and then loading every tensor works or raises GGUFFormatError,
or opening raises GGUFFormatError with a one-line message. Nothing else, no case over
a second, and memory stays bounded.
"""

from __future__ import annotations

import random
import resource
import struct
import tempfile
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bytesup.gguf.file import GGUFFile, GGUFFormatError
from bytesup.model.synthetic import write_tiny_llama

SEED = 20240531
MAX_SECONDS_PER_CASE = 1.0
EDGE_U32 = [0, 1, 2, 3, 7, 8, 9, 12, 13, 31, 32, 33, 2**31 - 1, 2**31, 2**32 - 1]
EDGE_U64 = [0, 1, 4, 5, 32, 255, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> bytes:
    path = write_tiny_llama(tmp_path_factory.mktemp("fuzz") / "base.gguf", n_layers=1, seed=SEED % 1000)
    return path.read_bytes()


@pytest.fixture(scope="module")
def number_fields(base, tmp_path_factory) -> list[tuple[int, int]]:
    """(byte offset, width) of every number in the header, metadata and tensor infos,
    located independently of our reader, with gguf-py's GGUFReader."""
    path = tmp_path_factory.mktemp("fuzz-fields") / "base.gguf"
    path.write_bytes(base)
    reader = gguf.GGUFReader(path)
    fields = list(reader.fields.values()) + [t.field for t in reader.tensors]
    out = []
    for field in fields:
        pos = field.offset
        for part in field.parts:
            if part.dtype != np.uint8:
                out += [(pos + i * part.itemsize, part.itemsize) for i in range(part.size)]
            pos += part.nbytes
    return sorted(set(out))


class Checker:
    """Runs one case and keeps the tallies."""

    def __init__(self, directory: Path):
        self.path = directory / "case.gguf"
        self.outcomes = {"parsed": 0, "rejected": 0, "tensor_rejected": 0}
        self.slowest = 0.0

    def __call__(self, data: bytes, label: str) -> None:
        self.path.write_bytes(data)
        start = time.perf_counter()
        try:
            try:
                f = GGUFFile(self.path)
            except GGUFFormatError as err:
                message = str(err)
                assert "\n" not in message and message.startswith(f"{self.path}: "), (label, message)
                self.outcomes["rejected"] += 1
                return
            with f:
                acc = f.byte_accounting()
                assert acc["file_size"] == len(data), label
                for t in f.tensors:
                    try:
                        array = f.load(t.name)
                    except GGUFFormatError:
                        self.outcomes["tensor_rejected"] += 1
                        continue
                    assert array.dtype == np.float32 and array.shape == t.shape, label
            self.outcomes["parsed"] += 1
        except AssertionError:
            raise
        except Exception as err:  # anything but GGUFFormatError is a bug in the reader
            raise AssertionError(f"{label}: {type(err).__name__}: {err}") from err
        finally:
            elapsed = time.perf_counter() - start
            self.slowest = max(self.slowest, elapsed)
            assert elapsed < MAX_SECONDS_PER_CASE, (label, elapsed)


def structure_end(base: bytes) -> int:
    """Where the tensor data starts (the header, metadata and infos come before)."""
    with tempfile.NamedTemporaryFile(suffix=".gguf") as tmp:
        tmp.write(base)
        tmp.flush()
        with GGUFFile(tmp.name) as f:
            return f.data_offset


def test_valid_base_file_parses(base, tmp_path):
    checker = Checker(tmp_path)
    checker(base, "unmodified")
    assert checker.outcomes == {"parsed": 1, "rejected": 0, "tensor_rejected": 0}


def test_truncations(base, tmp_path):
    """Cut at every byte of the structure and at 300 places in the data: all rejected."""
    checker = Checker(tmp_path)
    end = structure_end(base)
    rng = random.Random(SEED)
    cuts = list(range(0, end + 1)) + rng.sample(range(end + 1, len(base)), 300)
    for cut in cuts:
        checker(base[:cut], f"truncated to {cut} bytes")
    assert checker.outcomes["rejected"] == len(cuts) and checker.outcomes["parsed"] == 0


@pytest.mark.slow
def test_number_fields_overwritten(base, number_fields, tmp_path):
    """Every count, length, type, dim and offset set to edge values, under tracemalloc."""
    checker = Checker(tmp_path)
    rng = random.Random(SEED + 1)
    assert len(number_fields) > 250
    tracemalloc.start()
    worst = (0, "")
    try:
        for pos, width in number_fields:
            values = EDGE_U32 if width == 4 else EDGE_U64
            for value in rng.sample(values, 6) + [rng.getrandbits(8 * width)]:
                data = bytearray(base)
                data[pos : pos + width] = value.to_bytes(width, "little")
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                checker(bytes(data), f"{width}-byte field at {pos} = {value}")
                peak = tracemalloc.get_traced_memory()[1] - before
                worst = max(worst, (peak, f"field at {pos} = {value}"))
    finally:
        tracemalloc.stop()
    # the base file is 15 kB and the largest load is a few kB of float32: nothing near a MB
    assert worst[0] < 2_000_000, worst
    assert checker.outcomes["rejected"] > 500 and checker.outcomes["parsed"] > 100, checker.outcomes


@pytest.mark.slow
def test_bit_flips_and_byte_runs(base, tmp_path):
    checker = Checker(tmp_path)
    rng = random.Random(SEED + 2)
    end = structure_end(base)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(2500):
        data = bytearray(base)
        pos = rng.randrange(end) if i % 5 else rng.randrange(len(base))  # mostly the structure
        data[pos] ^= 1 << rng.randrange(8)
        checker(bytes(data), f"bit flip at byte {pos}")
    for _ in range(700):
        data = bytearray(base)
        pos, n = rng.randrange(end), rng.randrange(1, 17)
        data[pos : pos + n] = rng.randbytes(n)
        checker(bytes(data), f"{n} random bytes at {pos}")
    for _ in range(200):  # whole chunks duplicated or deleted
        a, b = sorted(rng.sample(range(len(base)), 2))
        data = base[:a] + base[b:] if rng.random() < 0.5 else base[:b] + base[a:b] + base[b:]
        checker(data, f"splice {a}:{b}")
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert rss_growth_kib < 200_000, rss_growth_kib
    assert checker.outcomes["parsed"] > 300 and checker.outcomes["rejected"] > 1000, checker.outcomes


@settings(max_examples=400, deadline=1000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    version=st.sampled_from([2, 3]) | st.integers(0, 2**32 - 1),
    n_tensors=st.integers(0, 4) | st.integers(0, 2**64 - 1),
    n_kv=st.integers(0, 4) | st.integers(0, 2**64 - 1),
    body=st.binary(max_size=400),
)
def test_generated_headers(tmp_path, version, n_tensors, n_kv, body):
    Checker(tmp_path)(b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + body, "generated")


@settings(max_examples=300, deadline=1000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    vtype=st.integers(0, 14),
    etype=st.integers(0, 14),
    count=st.integers(0, 3) | st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=64),
)
def test_generated_metadata_values(tmp_path, vtype, etype, count, payload):
    """One metadata value of any (even unknown) type, arrays with any element type and count."""
    value = struct.pack("<I", etype) + struct.pack("<Q", count) + payload if vtype == 9 else payload
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", vtype) + value
    Checker(tmp_path)(data, f"value type {vtype}")
