"""Decode when the weights do not stay as float32: where the time of a step goes.

A model whose float32 weights exceed the resident budget (the course's specimen: 27 GB as float32,
7.16 GB as Q8_0) is streamed: every step dequantizes each block from the file into a scratch buffer,
then multiplies. `streamed_split()` clocks the two apart, with the weights provider wrapped in
bytesup.timing.steps.TimedWeights (which times its own work: block(), the head's chunks, the
embedding rows), so

    step = dequantization (the provider's time) + the rest (products, attention, norms)

and says which bounds the step. The products could instead read a form kept in memory that needs
no dequantizing pass: `q8_0_product()` times the one NumPy can run, Q8_0 kept as int8 blocks with
their scales, multiplied a tile of rows at a time (the tile turned into float32 in cache, each
block's dot product with x times the block's scale): it reads 1.125 bytes per weight instead of
float32's 4, so it would be memory-bound only if NumPy turned int8 into float32 and multiplied as
fast as memory delivers the bytes. The measurement says whether it does, beside the read ceiling of
the same job.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from threadpoolctl import threadpool_limits

from bytesup.model.forward import Model
from bytesup.timing.measure import TimingError, summarize, time_rotation
from bytesup.timing.steps import NumpyDecoder, interleave

log = logging.getLogger(__name__)

GGML_Q8_0 = GGMLQuantizationType.Q8_0
Q8_0_BLOCK, Q8_0_BLOCK_BYTES = GGML_QUANT_SIZES[GGML_Q8_0]  # 32 weights in 34 bytes: a float16 scale, 32 int8
Q8_0_DTYPE = np.dtype([("d", "<f2"), ("qs", "i1", (Q8_0_BLOCK,))])
Q8_0_RESIDENT_BYTES_PER_WEIGHT = 1 + 4 / Q8_0_BLOCK  # int8 weight + its block's float32 scale
TILE_BYTES = 1 << 20  # float32 bytes of one tile of rows: about a core's L2
STREAMED_TOKENS = 3  # streamed steps timed on a model that is otherwise resident


def split_summary(steps: list[float], provider: list[float], file_bytes: int, float32_bytes: int, noisy: float) -> dict:
    """Median step, median dequantization within it, the rest, and which of the two bounds the step."""
    s, d = summarize(steps, noisy), summarize(provider, noisy)
    rest = max(s["median_s"] - d["median_s"], 0.0)
    return {
        "tokens": len(steps),
        "step_median_s": s["median_s"],
        "step_rel_iqr": s["rel_iqr"],
        "tokens_per_s": 1.0 / s["median_s"],
        "dequant_median_s": d["median_s"],
        "rest_median_s": rest,
        "dequant_share": d["median_s"] / s["median_s"],
        "file_bytes_per_token": file_bytes,
        "float32_bytes_per_token": float32_bytes,
        "dequant_gbps": file_bytes / d["median_s"] / 1e9 if d["median_s"] > 0 else None,
        "rest_float32_gbps": float32_bytes / rest / 1e9 if rest > 0 else None,
        "bound": "dequantization" if d["median_s"] >= rest else "the products and the rest",
    }


def streamed_split(path, prompt, n_tokens: int, warmup: int, noisy: float) -> dict:
    """A few decode steps with the weights streamed (whatever the budget), split as split_summary()."""
    with Model.from_gguf(path, mode="streaming") as model:
        wb = model.weight_bytes_per_token()
        with NumpyDecoder(model, len(prompt) + warmup + n_tokens) as dec:
            dec.start(prompt)
            provider = []
            steps = interleave(
                {"ours": dec}, n_tokens, warmup, after_step=lambda _, d: provider.append(d.provider_seconds)
            )
    return split_summary(steps["ours"], provider, wb.file_bytes, wb.float32_bytes, noisy)


# --- Q8_0 kept as int8 blocks: the product that reads them directly ---------------------------


def q8_0_resident(raw: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A Q8_0 matrix's bytes (rows x blocks of 34) as the form the product reads: (int8 weights
    (rows, cols), float32 scales (rows, cols / 32)). The weights are the file's bytes as they are;
    only the scales widen from float16 (0.125 bytes per weight instead of 0.0625)."""
    rows, cols = shape
    blocks = np.frombuffer(np.ascontiguousarray(raw).reshape(-1), dtype=Q8_0_DTYPE).reshape(rows, cols // Q8_0_BLOCK)
    return np.ascontiguousarray(blocks["qs"]).reshape(rows, cols), blocks["d"].astype(np.float32)


def random_q8_0(rows: int, cols: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights (rows, cols), float32 scales (rows, cols / 32)): a Q8_0 matrix's resident form.
    Random: only its size matters to the clock."""
    if cols % Q8_0_BLOCK:
        raise TimingError(f"a Q8_0 row holds whole blocks of {Q8_0_BLOCK}; {cols} columns do not")
    rng = np.random.default_rng(seed)
    q = rng.integers(-127, 128, size=(rows, cols), dtype=np.int8)
    d = (rng.random((rows, cols // Q8_0_BLOCK), dtype=np.float32) * 0.01).astype(np.float32)
    return q, d


def q8_0_reference(q: np.ndarray, d: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The clear version: dequantize the whole matrix (each weight times its block's scale), then W x."""
    rows, cols = q.shape
    w = (q.reshape(rows, -1, Q8_0_BLOCK).astype(np.float32) * d[:, :, None]).reshape(rows, cols)
    return w @ x


class Q8_0Product:
    """y = W x for W kept as Q8_0 int8 blocks and scales, `threads` workers each over its own rows, a
    tile of rows at a time (in cache), as llama.cpp multiplies its blocks:

        t = the tile's int8 weights as float32
        p[r, b] = t[r, block b] . x[block b]          each block's dot product with its piece of x
        y[r] = sum over b of d[r, b] x p[r, b]        each block's dot times the block's scale

    Only the int8 weights and the scales come from memory."""

    def __init__(self, rows: int, cols: int, threads: int):
        self.tile = max(1, min(rows, TILE_BYTES // (4 * cols)))
        self.threads = max(1, threads)
        edges = [rows * i // self.threads for i in range(self.threads + 1)]
        self.parts = [(edges[i], edges[i + 1]) for i in range(self.threads)]
        self.scratch = [np.empty((self.tile, cols), np.float32) for _ in range(self.threads)]
        self.sums = [np.empty((self.tile, cols // Q8_0_BLOCK), np.float32) for _ in range(self.threads)]
        self.pool = ThreadPoolExecutor(max_workers=self.threads)

    def _rows(self, i: int, q, d, x, y, cast_only: bool) -> None:
        start, stop = self.parts[i]
        xb = x.reshape(-1, Q8_0_BLOCK)
        for r0 in range(start, stop, self.tile):
            r1 = min(r0 + self.tile, stop)
            t, p = self.scratch[i][: r1 - r0], self.sums[i][: r1 - r0]
            np.copyto(t, q[r0:r1], casting="unsafe")  # int8 -> float32, in cache
            if cast_only:
                continue
            np.einsum("rbi,bi->rb", t.reshape(r1 - r0, -1, Q8_0_BLOCK), xb, out=p)  # each block's dot with x
            np.multiply(p, d[r0:r1], out=p)  # times the block's scale
            np.sum(p, axis=1, out=y[r0:r1])

    def __call__(self, q, d, x, y, cast_only: bool = False) -> np.ndarray:
        list(self.pool.map(lambda i: self._rows(i, q, d, x, y, cast_only), range(self.threads)))
        return y

    def close(self) -> None:
        self.pool.shutdown()


def q8_0_product(
    shape: tuple[int, int], threads: int, repeats: int, warmup: int, noisy: float, seed: int, min_sample_s: float = 0.0
) -> dict:
    """Time Q8_0Product on two random matrices of `shape` (the timed calls alternate, so each reads
    from memory), and the same loop that only turns the int8 weights into float32, on `threads`
    workers (BLAS on one thread each). Checked against q8_0_reference on the first rows."""
    rows, cols = shape
    mats = [random_q8_0(rows, cols, seed + i) for i in range(2)]
    x = np.random.default_rng(seed).standard_normal(cols, dtype=np.float32)
    ys = [np.empty(rows, np.float32) for _ in mats]
    product = Q8_0Product(rows, cols, threads)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            out = {}
            for label, only in (("product", False), ("cast_only", True)):
                calls = [lambda m=m, y=y, only=only: product(m[0], m[1], x, y, only) for m, y in zip(mats, ys)]
                times, _ = time_rotation(calls, repeats, warmup, min_sample_s)
                out[label] = summarize(times, noisy)
            product(mats[0][0], mats[0][1], x, ys[0])
    finally:
        product.close()
    check = slice(0, min(rows, 64))
    want = q8_0_reference(mats[0][0][check], mats[0][1][check], x)
    if not np.allclose(ys[0][check], want, rtol=1e-4, atol=1e-3 * float(np.abs(want).max() or 1)):
        raise TimingError("the Q8_0 block product disagrees with dequantize-then-multiply")
    moved = rows * cols * Q8_0_RESIDENT_BYTES_PER_WEIGHT + 4 * (cols + rows)
    p, cast = out["product"], out["cast_only"]
    return {
        "shape": [rows, cols],
        "threads": threads,
        "tile_rows": product.tile,
        "bytes_per_weight": Q8_0_RESIDENT_BYTES_PER_WEIGHT,
        "bytes_per_call": int(moved),
        "median_s": p["median_s"],
        "rel_iqr": p["rel_iqr"],
        "noisy": p["noisy"],
        "gbps": moved / p["median_s"] / 1e9,
        "int8_to_float32_median_s": cast["median_s"],
        "int8_to_float32_share": cast["median_s"] / p["median_s"],
        "weights_per_s": rows * cols / p["median_s"],
    }
