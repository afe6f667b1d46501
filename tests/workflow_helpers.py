"""Run the workflow in a throwaway copy of the project, and check a run independently.

`independent_ffn` recomputes lesson 3 with gguf-py's own reader and dequantizer in float64,
sharing no code with the package, so the workflow's numbers are checked against a second
implementation on the same weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT_FILES = ("Snakefile", "config", "workflow")

# Timing settings small enough that the timing jobs take seconds on a tiny model.
QUICK_TIMING = {
    "batch_sizes": [1, 4, 256],
    "repeats": 3,
    "warmup": 1,
    "min_weight_bytes": 1 << 20,
    "stream_bytes": 8 << 20,
    "dequant_bytes": 1 << 20,
    "decode_tokens": 3,
    "prefill_sizes": [1, 8],
}


def copy_project(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def write_config(project: Path, **overrides) -> dict:
    config = yaml.safe_load((project / "config/config.yaml").read_text())
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    (project / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def snakemake(project: Path, *args: str, timeout: int = 900, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=project,
        env=env_with_venv(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


# What Snakemake sets for a job to its `threads` (snakemake.shell); a lesson rule declares none, so 1.
JOB_THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                        "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")  # fmt: skip
LESSON_JOB_THREADS = 1


def run_notebook(notebook: Path, executed: Path, *, cwd: Path, threads: int | None = None, **parameters) -> None:
    """Execute a notebook with papermill and the pinned python3 kernel, as a user would from `cwd`;
    with `threads`, on that many, as Snakemake sets a job's (JOB_THREAD_VARIABLES). BLAS sums in
    another order on another number of threads (seen on an AVX-512 machine: 1e-7 apart), so a run
    that should repeat the workflow's numbers exactly asks for LESSON_JOB_THREADS; a run compared
    with what the test process computes keeps the test's threads (None).

    Parameters go in as a YAML file, so a mapping (the `forward`, `generate` settings) arrives as a
    mapping and a string as a string, as the lesson rule passes them."""
    params = executed.with_name(executed.name + ".params.yaml")
    params.write_text(yaml.safe_dump({k: str(v) if isinstance(v, Path) else v for k, v in parameters.items()}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            "-k",
            "python3",
            "--no-progress-bar",
            "--cwd",
            str(cwd),
            str(notebook),
            str(executed),
            "-f",
            str(params),
        ],
        env=env_with_venv() | ({} if threads is None else dict.fromkeys(JOB_THREAD_VARIABLES, str(threads))),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def run_lesson_notebook(spec, gguf: Path, folder: Path, **params) -> tuple[dict, Path]:
    """A model-running lesson's notebook on `gguf`: the extract stage's metadata.json first, then the
    notebook with every output in `folder`/out (checked to be exactly the SPEC's files).
    Returns (metrics, the output folder)."""
    from bytesup.gguf.extract import extract
    from bytesup.lessons.spec import parameter

    extract(gguf, folder / "gguf", [])
    out = folder / "out"
    outputs = {parameter(name): out / name for name in spec.files}
    run_notebook(
        ROOT / "workflow" / "notebooks" / f"{spec.id}.ipynb",
        folder / "run.ipynb",
        cwd=ROOT,
        model_gguf=gguf,
        metadata_json=folder / "gguf" / "metadata.json",
        **outputs,
        **params,
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(spec.files)
    return json.loads((out / "metrics.json").read_text(encoding="utf-8")), out


def env_with_venv() -> dict:
    """The environment with this Python's bin folder first, so the python3 kernel is this Python."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_manifest(report_dir: Path, project: Path) -> dict:
    """`bytesup verify`: every cited file re-hashes, every cited number re-reads as printed."""
    from bytesup.report.verify import verify_path

    result = verify_path(report_dir, project)
    assert result.ok, "\n".join(result.problems[:20])
    assert result.files and result.numbers
    return json.loads((report_dir / "manifest.json").read_text())


def independent_ffn(gguf_path: Path, token_text: str = " cat") -> dict:
    """Lesson 3's numbers by gguf-py and float64 numpy only."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(gguf_path))
    fields = reader.fields

    def field(name):
        f = fields[name]
        return f.contents()

    arch = field("general.architecture")
    eps = float(field(f"{arch}.attention.layer_norm_rms_epsilon"))
    tokens = field("tokenizer.ggml.tokens")
    marker = "\u0120" if field("tokenizer.ggml.model") == "gpt2" else "\u2581"
    token_id = tokens.index(token_text.replace(" ", marker))

    def tensor(name):
        t = next(t for t in reader.tensors if t.name == name)
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape(tuple(int(d) for d in reversed(t.shape)))

    x = tensor("token_embd.weight")[token_id]
    norm = tensor("blk.0.ffn_norm.weight")
    gate, up, down = (tensor(f"blk.0.ffn_{n}.weight") for n in ("gate", "up", "down"))
    xn = x / np.sqrt(np.mean(x * x) + eps) * norm
    g = gate @ xn
    silu = g / (1 + np.exp(-g))
    out = down @ (silu * (up @ xn))
    y = x + out
    cos = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))
    return {
        "token_id": token_id,
        "x_rms": float(np.sqrt(np.mean(x * x))),
        "x_length": float(np.linalg.norm(x)),
        "gate_first": float(g[0]),
        "gate_negative_fraction": float(np.mean(g < 0)),
        "silu_abs_below_0_1_fraction": float(np.mean(np.abs(silu) < 0.1)),
        "silu_abs_below_0_01_fraction": float(np.mean(np.abs(silu) < 0.01)),
        "out_length": float(np.linalg.norm(out)),
        "cosine_x_y": cos,
        "angle_deg": float(np.degrees(np.arccos(np.clip(cos, -1, 1)))),
        "n_ff": len(g),
    }


def assert_metrics_match(metrics: dict, expected: dict, rel: float = 1e-5) -> None:
    expected = dict(expected)
    n_ff = expected.pop("n_ff")
    for key, want in expected.items():
        got = metrics[key]
        if key == "token_id":
            assert got == want
        elif key.endswith("_fraction"):
            # a share of n_ff values: float32 against float64 may move one value across the threshold
            assert abs(got - want) <= 1 / n_ff + 1e-12, (key, got, want)
        else:
            assert np.isclose(got, want, rtol=rel, atol=1e-7), (key, got, want)


def assert_refusals_reported(md: str, refused, architecture: str) -> None:
    """Each refused lesson's one line (it names the architecture) is in the report twice: in the
    closing section's list of what did not run, for maintainers, and in the lesson's own section."""
    for spec in refused:
        why = spec.refusal(architecture)
        assert f"'{architecture}'" in why and "\n" not in why, spec.id
        assert md.count(f"\n- {spec.heading}: {why}.") == 1, spec.id  # the list for maintainers
        assert md.count(f"Not run for this model: {why}.") >= 1, spec.id  # its section
    # lessons following the same architectures share their line: each lesson's line twice
    assert md.count("Not run for this model: ") == len(refused)
