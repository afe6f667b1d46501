"""A small run's outputs, written by hand, so the report and verify can be tested in a second.

    run = fake_run(tmp_path)        # writes the files under tmp_path (the project root)
    report_dir = build_and_publish(tmp_path, run)

The files mimic the workflow's layout (resources/models, results/<model>/lessons/...,
results/timing/...) with a few numbers, a claims table, a figure and hostile strings where a
GGUF could put them.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from contextlib import contextmanager
from pathlib import Path

DATE = "2026-01-02"
MODEL = "m"
LESSON = "99_test_lesson"  # not in the registry: its numbers are every scalar in metrics.json
HOSTILE = '<script>alert(1)</script> "><img src=x onerror=alert(2)> [x](javascript:alert(3))'


def png(width: int = 3, height: int = 2) -> bytes:
    """A valid RGB PNG, built with zlib so no plotting library is needed."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes([200, 30, 30] * width) for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


@contextmanager
def chdir(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _write(root: Path, rel: str, data: str | bytes) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    return rel


def fake_run(root: Path, date: str = DATE) -> dict:
    lesson_dir = f"results/{MODEL}/lessons/{LESSON}"
    record = _write(
        root,
        f"resources/models/{MODEL}.json",
        json.dumps({"name": MODEL, "source": "path", "size": 22080, "sha256": "ab" * 32}),
    )
    metrics = _write(
        root,
        f"{lesson_dir}/metrics.json",
        json.dumps(
            {
                "token_id": 2644,
                "x_rms": 0.0854512,
                "x_length": 2.0507,
                "gate_first": 0.668406,
                "gate_first_naive": 0.668406,
                "gate_negative_fraction": 0.451,
                "silu_abs_below_0_1_fraction": 0.337,
                "silu_abs_below_0_01_fraction": 0.035,
                "out_length": 89.1,
                "cosine_x_y": 0.031,
                "angle_deg": 88.2,
            }
        ),
    )
    claims = _write(
        root,
        f"{lesson_dir}/claims.csv",
        "claim_id,lesson,description,published,measured,unit,tolerance,status\n"
        f"a,{LESSON},RMS of x (text 001),0.1708,0.0854512,,,specimen differs\n"
        f'b,{LESSON},"token {HOSTILE}",7,7,,0.5,reproduced\n'
        f"c,{LESSON},share of negative gates,45 %,0.451,%,,reproduced\n",
    )
    table = _write(
        root,
        f"{lesson_dir}/flops_per_token.csv",
        "step,rows,flops,share\n" + "".join(f"step {HOSTILE} {i},{576 + i},{2 * i},{i / 100}\n" for i in range(210)),
    )
    figure = _write(root, f"{lesson_dir}/gate_histogram.png", png())
    cpu = _write(
        root,
        f"results/timing/{MODEL}/cpu/summary.json",
        json.dumps(
            {
                "stream_copy_gbps": 65.3,
                "stream_triad_gbps": 41.2,
                "matvec_cold_gbps": 49.7,
                "matvec_fraction_of_copy": 0.76,
                "read_ceiling_gbps": 70.2,
                "matvec_fraction_of_read_ceiling": 0.708,
                "matmul_ratio_256_over_1": 48.1,
                "other_processes_cpu_fraction": 0.05,
                "machine_shared": False,
                "targets": [{"name": "matvec_fraction", "target": 0.7, "measured": 0.76, "met": True}],
            }
        ),
    )
    meta = _write(
        root,
        f"results/{MODEL}/gguf/metadata.json",
        json.dumps(
            {
                "gguf": {"version": 3, "tensor_count": 3, "metadata_count": 4},
                "metadata": {
                    "general.architecture": "llama",
                    "general.name": HOSTILE,
                    "llama.block_count": 2,
                    "llama.embedding_length": 32,
                },
            }
        ),
    )
    index = _write(root, f"results/{MODEL}/gguf/extract.json", json.dumps({"gguf": {"sha256": "ab" * 32}}))
    tensors = _write(
        root,
        f"results/{MODEL}/gguf/tensors.csv",
        f"name,type,shape\ntoken_embd.weight,Q8_0,100x32\nblk.0.ffn_up.weight,Q4_0,64x32\n{HOSTILE},F32,32\n",
    )
    sweep = _write(root, f"results/timing/{MODEL}/cpu/sweep.csv", "op,n,gbps\nmatvec,1,49.7\nmatmul,256,1.2\n")
    decode = _write(
        root,
        f"results/timing/{MODEL}/cpu/decode.json",
        json.dumps(
            {
                "decode_tokens_per_s": 812.4,
                "decode_bytes_per_token": 538062336,
                "decode_ceiling_tokens_per_s": 1213.6,
                "decode_fraction_of_read_ceiling": 0.669,
                "llama_cpp": {"skipped": "llama-cpp-python is not installed"},
            }
        ),
    )
    gpu = _write(
        root, f"results/timing/{MODEL}/gpu/summary.json", json.dumps({"status": "skipped", "skipped": "no CUDA device"})
    )
    sources = {
        "fetch": {"record": record},
        "extract": {"metadata": meta, "index": index, "tensors_csv": tensors},
        "timing_cpu": {"summary": cpu, "sweep": sweep},
        "timing_gpu": {"summary": gpu},
        "timing_decode": {"summary": decode},
        f"lesson_{LESSON}": {
            "metrics_json": metrics,
            "claims_csv": claims,
            "flops_per_token_csv": table,
            "gate_histogram_png": figure,
        },
    }
    return {
        "date": date,
        "started": "2026-01-02T10:00:00+00:00",
        "config": {"model": MODEL, "seed": 0, "token": HOSTILE},
        "machine": {
            "python": "3.11.7",
            "os": "Linux",
            "hostname": HOSTILE,
            "cpu_model": "Test CPU",
            "cores": 2,
            "memory_bytes": 1 << 30,
            "load_average": [0.5, 0.25, 0.125],
            "gpus": [],
            "blas": [{"internal_api": "openblas", "version": "0.3", "num_threads": 2, "threading_layer": "pthreads"}],
        },
        "packages": {"bytesup": "0.1.0", "snakemake": "9.0"},
        "git_describe": "abc1234-dirty",
        "sources": sources,
        "refused": {},
        "job_times": {
            metrics: {"job_started": "2026-01-02T09:00:00+00:00", "job_finished": "2026-01-02T09:01:00+00:00"}
        },
    }


def build_and_publish(root: Path, run: dict) -> Path:
    """Build the report as the report rule does; returns report/<date>/ (absolute)."""
    from bytesup.report import build, publish

    with chdir(root):
        final = Path("report") / run["date"]
        stage = final.with_name(f".{final.name}.building")
        build.build(run, stage)
        publish.publish(stage, final, Path("report") / f"{run['date']}.zip")
    return root / "report" / run["date"]


_MD_CITE = re.compile(r'\[((?:\\.|[^\]\\])*)\]\(<[^>]*> "(?:\\.|[^"\\])*"\)')


def md_plain(md: str) -> str:
    """report.md with each cited number's link taken off: '[2.051](<../../x.json> "tip")[^3]' -> '2.051[^3]',
    and each glossary link: '[KV cache](<glossary.html#g-kv-cache>)' -> 'KV cache'."""
    return _MD_TERM.sub(lambda m: m.group(1), _MD_CITE.sub(lambda m: m.group(1), md))


_MD_TERM = re.compile(r"\[((?:\\.|[^\]\\])*)\]\(<(?:\.\./)*glossary\.html#g-[a-z0-9-]+>\)")
