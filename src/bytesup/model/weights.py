"""The weights, read through the project's own dequantizers, with memory designed.

Two providers, one interface (forward.py uses only this):

    w = provider.block(i)          # BlockWeights: attn_norm, wq wk wv wo, ffn_norm, w_gate w_up w_down
    provider.embed_rows(ids)       # (len(ids), d_model) float32: only the rows asked for
    provider.output_norm           # (d_model,)
    provider.rope_factors          # (n_rot/2,) per-pair rope frequency factors, or None (ArchSpec.rope_factors)
    provider.head_chunks()         # yields (first_row, rows x d_model float32) of the output head

* Resident: every tensor dequantized once to float32 and kept. Q, K and V of a block sit in one
  fused (q_dim + 2 kv_dim, d_model) matrix, gate and up in one (2 d_ff, d_model) matrix, so a
  decode step does one matvec where it would do three (or two); wq, wk, ... are row views
  into them, no copies. A file that stores them stacked already (Phi-3's attn_qkv, and its ffn_up
  of gate rows then up rows) is read straight into the same matrices: the table's
  ArchSpec.stacked_rows says where each tensor's rows go. How each matrix lies in memory is the
  layout (LAYOUTS, below): row-major as the file stores its rows unless asked otherwise. They live
  in one private memory map (Arena), in the order a step reads them, on 2 MiB pages where the OS
  has transparent huge pages: one page walk per 2 MiB, not per 4 KiB (numpy asks for huge pages
  only for arrays from 4 MiB, and a block's Q K V, output and down are smaller). SmolLM2's steps
  took 18.0 and 20.4 ms on the huge pages against 21.3 and 23.7 in the same map on 4 KiB pages
  (alternate processes, one minute, an AMD Zen 5 machine of 2 cores). Chosen when
  `float32_bytes(spec)` fits the budget.
* Streaming: nothing is kept. block(i) dequantizes block i from the map into one reusable
  scratch buffer (valid until the next block() call), embedding rows are dequantized one row's
  bytes at a time (a quantized row is tensor_bytes(type, (d_model,)) contiguous bytes), and the
  head comes in chunks of rows. Peak memory: one block's float32 weights plus one head chunk
  plus activations (a 6.7B Q8_0 model: ~800 MB, not 27 GB). Pages of the file map count in
  RSS once touched; streaming hands each tensor's pages back (madvise DONTNEED) after
  dequantizing it, so RSS shows what the pass holds, not the whole file. (They stay in the
  kernel's page cache, so the next token may still read them from memory, not disk.)
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bytesup.errors import quote
from bytesup.gguf.dequant import dequantize
from bytesup.gguf.file import GGUFFile
from bytesup.gguf.quants import QUANTS
from bytesup.gguf.sizes import tensor_bytes
from bytesup.model.arch import ArchMetadataError, ArchSpec
from bytesup.model.param_counts import per_token_reads, tensor_rows

DEFAULT_RESIDENT_BUDGET = 4 * 2**30  # float32 weights up to 4 GiB are kept resident
HEAD_CHUNK_BYTES = 64 * 2**20  # streaming: float32 bytes of output head per chunk
ROW_CHUNK_BYTES = 16 * 2**20  # float32 bytes dequantized at a time on the way into a column-major matrix

# How a resident matrix lies in memory, the layout. Same shape, same numbers, the same product: only
# the order BLAS walks the bytes in differs. "rows": row-major, as the file stores its rows; each
# output is a dot product along one contiguous row. "long-runs": each matrix with its longer side
# contiguous, column-major where it has at least as many rows (outputs) as columns (inputs): Q K V,
# W_o, gate|up and the head, whose product then adds whole contiguous columns, each times one input;
# W_down, wider than tall, stays row-major. Which reads faster depends on the machine. SmolLM2's
# decode steps in turns, medians of 60, 2 threads: on an AMD Zen 4 machine (2.6 GHz, OpenBLAS's
# SkylakeX kernels) rows 32.3, 34.0 and 32.7 ms against long-runs 27.8, 29.3 and 25.7; on an AMD
# Zen 5 (OpenBLAS's Haswell kernels) rows 16.2, 17.0 and 17.9 against 16.6, 18.8 and 19.3. So the
# lessons use rows, and the timing job measures both and times the decode on the faster
# (bytesup.timing.decode).
LAYOUTS = ("rows", "long-runs")


def check_layout(layout: str) -> str:
    """`layout` when it is one of LAYOUTS; else a one-line ValueError."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not known (known: {', '.join(LAYOUTS)})")
    return layout


def column_major(shape: tuple[int, int], layout: str) -> bool:
    """Whether a (rows, columns) matrix lies column-major in `layout` (LAYOUTS)."""
    return check_layout(layout) == "long-runs" and shape[0] >= shape[1]


def empty_matrix(empty, shape: tuple[int, int], layout: str) -> np.ndarray:
    """An uninitialised (rows, columns) matrix made by `empty(shape)`, laid out as `layout` says
    (column-major: the transpose of a row-major (columns, rows) array, numpy's order "F")."""
    return empty(shape[::-1]).T if column_major(shape, layout) else empty(shape)


@dataclass
class BlockWeights:
    """One block's float32 weights (numpy shapes: rows = outputs, columns = inputs)."""

    attn_norm: np.ndarray  # (d_model,)
    wqkv: np.ndarray  # (q_dim + 2 kv_dim, d_model): Q rows, then K rows, then V rows
    wo: np.ndarray  # (d_model, q_dim)
    ffn_norm: np.ndarray  # (d_model,)
    w_gate_up: np.ndarray  # (2 d_ff, d_model): gate rows, then up rows
    w_down: np.ndarray  # (d_model, d_ff)
    q_dim: int
    kv_dim: int
    file_bytes: int  # bytes these tensors occupy in the file, as stored
    # optional roles, None where the architecture's table row has none (arch.OPTIONAL_ROLES)
    bqkv: np.ndarray | None = None  # (q_dim + 2 kv_dim,): Q, K, V biases (qwen2)
    q_norm: np.ndarray | None = None  # (head_dim,): per-head RMSNorm of q (gemma3)
    k_norm: np.ndarray | None = None  # (head_dim,): per-head RMSNorm of k
    post_attn_norm: np.ndarray | None = None  # (d_model,): on attention's output, before the residual add
    post_ffn_norm: np.ndarray | None = None  # (d_model,): on the FFN's output, before the residual add

    @property
    def wq(self) -> np.ndarray:
        return self.wqkv[: self.q_dim]

    @property
    def wk(self) -> np.ndarray:
        return self.wqkv[self.q_dim : self.q_dim + self.kv_dim]

    @property
    def wv(self) -> np.ndarray:
        return self.wqkv[self.q_dim + self.kv_dim :]

    @property
    def w_gate(self) -> np.ndarray:
        return self.w_gate_up[: self.w_gate_up.shape[0] // 2]

    @property
    def w_up(self) -> np.ndarray:
        return self.w_gate_up[self.w_gate_up.shape[0] // 2 :]

    @property
    def bq(self) -> np.ndarray | None:
        return None if self.bqkv is None else self.bqkv[: self.q_dim]

    @property
    def bk(self) -> np.ndarray | None:
        return None if self.bqkv is None else self.bqkv[self.q_dim : self.q_dim + self.kv_dim]

    @property
    def bv(self) -> np.ndarray | None:
        return None if self.bqkv is None else self.bqkv[self.q_dim + self.kv_dim :]

    def arrays(self) -> list[np.ndarray]:
        """Every array this block holds (fused ones once)."""
        optional = (self.bqkv, self.q_norm, self.k_norm, self.post_attn_norm, self.post_ffn_norm)
        return [self.attn_norm, self.wqkv, self.wo, self.ffn_norm, self.w_gate_up, self.w_down] + [
            a for a in optional if a is not None
        ]

    @property
    def float32_bytes(self) -> int:
        return sum(a.nbytes for a in self.arrays())


# -- what the weights cost --------------------------------------------------------------


def block_float32_elements(spec: ArchSpec) -> int:
    """float32 numbers in one block: two norms, Q K V O, gate up down (and the architecture's
    extra roles: biases, q/k norms, post norms)."""
    return sum(math.prod(spec.role_shape(r)) for r in spec.roles)


def float32_bytes(spec: ArchSpec) -> int:
    """Bytes that residency costs: every tensor as float32 (a tied head is counted once)."""
    embedding = spec.vocab * spec.d_model
    head = 0 if spec.tied else spec.vocab * spec.d_model
    return 4 * (embedding + spec.n_layers * block_float32_elements(spec) + spec.d_model + head)


HUGE_PAGE = 2 << 20  # a transparent huge page on x86-64 and most arm64 kernels
ALIGN = 64  # bytes: each array of the arena starts a cache line


class Arena:
    """Uninitialised float32 arrays carved one after another out of one anonymous memory map of
    `nbytes` (plus alignment), marked for transparent huge pages where the OS has them (madvise);
    the map lives as long as any of its arrays. Past its end, `empty` falls back to np.empty."""

    def __init__(self, nbytes: int):
        # private: a shared anonymous map is shmem, which takes huge pages only where the machine's
        # shmem_enabled allows (here: never), whatever madvise asks
        self._map = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        whole = np.frombuffer(self._map, np.uint8)
        self._used = -whole.ctypes.data % HUGE_PAGE  # start on a 2 MiB boundary
        self._bytes = whole
        if hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._map.madvise(mmap.MADV_HUGEPAGE)
            except OSError:  # a kernel without transparent huge pages: 4 KiB pages
                pass

    def empty(self, shape) -> np.ndarray:
        n = 4 * math.prod(shape) if isinstance(shape, tuple) else 4 * int(shape)
        start, end = self._used, self._used + n
        if end > self._bytes.size:
            return np.empty(shape, np.float32)
        self._used = -(-end // ALIGN) * ALIGN
        return self._bytes[start:end].view(np.float32).reshape(shape)


def choose_mode(spec: ArchSpec, resident_budget_bytes: int = DEFAULT_RESIDENT_BUDGET) -> str:
    """'resident' when float32 weights fit the budget, else 'streaming'."""
    return "resident" if float32_bytes(spec) <= resident_budget_bytes else "streaming"


@dataclass(frozen=True)
class WeightBytes:
    """Weight bytes one decode step reads: as stored in the file, and as float32 used."""

    file_bytes: int
    float32_bytes: int
    per_tensor: dict  # name -> (file bytes, float32 bytes)


def weight_bytes_per_token(gguf: GGUFFile, spec: ArchSpec) -> WeightBytes:
    """Bytes of weights read to produce one token (decode), by the one rule of
    bytesup.model.param_counts.per_token_reads: every block tensor, the final norm, the whole output head,
    and ONE row of the token embedding (a tied head is token_embd read whole, on top of that row).
    The rope tensors (n_rot/2 factors, made into the angle table once per pass) are left out.

    per_tensor keys: tensor names, 'token_embd.weight[row]' for the embedding row.
    """
    names = [name for name, _ in spec.tensor_shapes() if name not in spec.rope_tensors]
    rows = tensor_rows(gguf.tensor(name) for name in names)  # every weight the recipe multiplies by
    per: dict[str, tuple[int, int]] = {}
    for r in per_token_reads(rows):
        key = r["name"]
        if r.get("second_pass"):  # the tied head: token_embd read whole
            key = spec.tensor_name("token_embd")
        elif r["part"] == "token_embd":  # the token's own row
            key = "token_embd.weight[row]"
        per[key] = (r["bytes_read"], 4 * r["elements_read"])
    return WeightBytes(sum(v[0] for v in per.values()), sum(v[1] for v in per.values()), per)


# -- dequantizing into place ------------------------------------------------------------


def _dequantize_into(gguf: GGUFFile, name: str, out: np.ndarray, shape: tuple[int, ...]) -> int:
    """Dequantize tensor `name` into `out`, an array of numpy `shape` (a matrix, a block of its rows, or
    rows of a column-major matrix); return its file bytes. The hand fast dequantizers write in place
    (out=) where `out` is row-major, and a chunk of rows at a time through a bounded scratch where it is
    not; other types go through GGUFFile.load.
    """
    info = gguf.tensor(name)
    if info.shape != shape:
        raise ArchMetadataError(f"{gguf.path}: tensor {quote(name)} has shape {info.shape}, the metadata says {shape}")
    with np.errstate(all="ignore"):
        if info.type_name not in QUANTS:
            values = gguf.load(name)  # a one-line UnsupportedTypeError when nothing reads it
            gguf.check_finite(name, values)  # NaN or infinity: one line naming the tensor (once per tensor)
            out[...] = values
        elif out.flags.c_contiguous:
            QUANTS[info.type_name].fast(gguf.raw(name), out=out.reshape(-1))
            gguf.check_finite(name, out.reshape(-1))
        else:  # column-major ("long-runs"): each quantized row is contiguous bytes, so rows a chunk at a time
            cols = shape[-1]
            per_chunk = max(1, ROW_CHUNK_BYTES // (4 * cols))
            scratch = np.empty((min(per_chunk, shape[0]), cols), np.float32)
            row_bytes, raw = tensor_bytes(info.type_name, (cols,)), gguf.raw(name)
            for a in range(0, shape[0], per_chunk):
                b = min(shape[0], a + per_chunk)
                part = scratch[: b - a]
                QUANTS[info.type_name].fast(raw[a * row_bytes : b * row_bytes], out=part.reshape(-1))
                gguf.check_finite(name, part, start=a * cols)
                out[a:b] = part
    return info.n_bytes


def rope_factors(gguf: GGUFFile, spec: ArchSpec) -> np.ndarray | None:
    """The file's per-pair rope frequency factors (spec.rope_factors: Llama 3.1's rope_freqs.weight,
    Phi-3's rope_factors_short.weight) as float32, or None; a factor that is not a positive number
    is refused in one line (it would send an angle to infinity)."""
    if not spec.rope_factors:
        return None
    out = np.empty(spec.n_rot // 2, np.float32)
    _dequantize_into(gguf, spec.rope_factors, out, (spec.n_rot // 2,))
    bad = ~(np.isfinite(out) & (out > 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ArchMetadataError(f"{gguf.path}: tensor {spec.rope_factors!r} holds {out[i]} at pair {i}; rope"
                                " frequency factors must be positive numbers")  # fmt: skip
    return out


ARRAYS_PER_BLOCK = 11  # at most: two norms, Q K V (and its bias), output, gate|up, down, four more norms


def float32_empty(shape) -> np.ndarray:
    return np.empty(shape, np.float32)


class _Provider:
    mode = "?"

    def __init__(self, gguf: GGUFFile, spec: ArchSpec, *, head_chunk_bytes: int = HEAD_CHUNK_BYTES):
        self.gguf, self.spec = gguf, spec
        d = spec.d_model
        # streaming dequantizes the head a chunk of rows at a time (resident: one chunk, one product)
        self.head_chunk_rows = max(1, min(spec.vocab, head_chunk_bytes // (4 * d)))
        self.output_norm = np.empty(d, np.float32)
        _dequantize_into(gguf, spec.tensor_name("output_norm"), self.output_norm, (d,))
        emb = gguf.tensor(spec.tensor_name("token_embd"))
        if emb.shape != (spec.vocab, d):
            raise ArchMetadataError(f"{gguf.path}: tensor {quote(emb.name)} has shape {emb.shape},"
                                    f" the metadata says ({spec.vocab}, {d})")  # fmt: skip
        self.rope_factors = rope_factors(gguf, spec)

    def _fill_block(self, i: int, w: BlockWeights) -> BlockWeights:
        """Dequantize block i's tensors into w: each into its rows of the stacked matrices (Q, K and
        V into wqkv, gate and up into w_gate_up, the biases into bqkv; a file's own stacks whole)."""
        s, n = self.spec, 0
        for role in s.roles:
            array, rows = s.stacked_rows(role)
            n += _dequantize_into(self.gguf, s.tensor_name(role, i), getattr(w, array)[rows], s.role_shape(role))
        w.file_bytes = n
        return w

    def _empty_block(self, empty=float32_empty, layout: str = "rows") -> BlockWeights:
        """A block's arrays, uninitialised, made by `empty(shape)` in the order a step reads them, the
        matrices laid out as `layout` says (LAYOUTS)."""
        s, d = self.spec, self.spec.d_model
        return BlockWeights(
            attn_norm=empty(d),
            bqkv=empty(s.q_dim + 2 * s.kv_dim) if s.has("bq") else None,
            wqkv=empty_matrix(empty, (s.q_dim + 2 * s.kv_dim, d), layout),
            **{r: empty(s.role_shape(r)) for r in ("q_norm", "k_norm") if s.has(r)},
            wo=empty_matrix(empty, (d, s.q_dim), layout),
            **{r: empty(s.role_shape(r)) for r in ("post_attn_norm",) if s.has(r)},
            ffn_norm=empty(d),
            w_gate_up=empty_matrix(empty, (2 * s.d_ff, d), layout),
            w_down=empty_matrix(empty, (d, s.d_ff), layout),
            **{r: empty(s.role_shape(r)) for r in ("post_ffn_norm",) if s.has(r)},
            q_dim=s.q_dim,
            kv_dim=s.kv_dim,
            file_bytes=0,
        )  # fmt: skip

    def head_file_bytes(self) -> int:
        return self.gguf.tensor(self.spec.tensor_name("output")).n_bytes

    def row_file_bytes(self) -> int:
        return tensor_bytes(self.gguf.tensor(self.spec.tensor_name("token_embd")).type_name, (self.spec.d_model,))


class ResidentWeights(_Provider):
    """Everything dequantized once to float32 (fused QKV and gate|up per block), the matrices laid
    out as `layout` says (LAYOUTS: "rows" unless asked)."""

    mode = "resident"

    def __init__(self, gguf: GGUFFile, spec: ArchSpec, layout: str = "rows"):
        check_layout(layout)  # before any work
        super().__init__(gguf, spec)
        d = spec.d_model
        # one map for all of it, in the order a step reads it: embedding, blocks, head
        arena = Arena(float32_bytes(spec) + ALIGN * (ARRAYS_PER_BLOCK * spec.n_layers + 2))
        # a lookup reads rows of the embedding; a tied one is the head too, and is laid out as the head
        self.token_embd = empty_matrix(arena.empty, (spec.vocab, d), layout if spec.tied else "rows")
        _dequantize_into(gguf, spec.tensor_name("token_embd"), self.token_embd, (spec.vocab, d))
        self.blocks = [self._fill_block(i, self._empty_block(arena.empty, layout)) for i in range(spec.n_layers)]
        if spec.tied:
            self.head = self.token_embd  # same array: unembedding reuses the embedding
        else:
            self.head = empty_matrix(arena.empty, (spec.vocab, d), layout)
            _dequantize_into(gguf, spec.tensor_name("output"), self.head, (spec.vocab, d))
        self.head_chunk_rows = spec.vocab  # the whole head in one product

    def block(self, i: int) -> BlockWeights:
        return self.blocks[i]

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        return self.token_embd[ids]

    def head_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """Row views of the head (no copies): all of it at once unless head_chunk_rows says otherwise."""
        for start in range(0, self.spec.vocab, self.head_chunk_rows):
            yield start, self.head[start : start + self.head_chunk_rows]


def _release_pages(gguf: GGUFFile, name: str) -> None:
    """Tell the kernel this process is done with a tensor's pages of GGUFFile's map (RSS drops; the
    page cache keeps them)."""
    gguf.release_pages(name)  # from the part that holds it, for a split model


class StreamingWeights(_Provider):
    """Nothing kept: each block dequantized from the map when asked, into one scratch buffer."""

    mode = "streaming"

    def __init__(self, gguf: GGUFFile, spec: ArchSpec, **kw):
        super().__init__(gguf, spec, **kw)
        self._scratch: BlockWeights | None = None

    def block(self, i: int) -> BlockWeights:
        """Block i's weights; the arrays are reused by the next call (one block's memory at a time)."""
        if self._scratch is None:
            self._scratch = self._empty_block()
        w = self._fill_block(i, self._scratch)
        for role in self.spec.roles:
            _release_pages(self.gguf, self.spec.tensor_name(role, i))
        return w

    def release(self) -> None:
        """Drop the block scratch buffer (the next block() allocates it again)."""
        self._scratch = None

    def _rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Dequantize only the given rows of a 2-D tensor: each row is contiguous bytes."""
        info = self.gguf.tensor(name)
        row_bytes = tensor_bytes(info.type_name, info.shape[-1:])
        raw = self.gguf.raw(name).reshape(info.shape[0], row_bytes)
        picked = np.ascontiguousarray(raw[rows])  # copies len(rows) rows of bytes, nothing more
        return self.gguf.check_finite(name, dequantize(picked.reshape(-1), info.type_name, (len(rows), info.shape[-1])),
                                      start=None)  # fmt: skip

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        return self._rows(self.spec.tensor_name("token_embd"), np.asarray(ids))

    def head_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """The head in chunks of rows (64 MiB of float32 each by default), one buffer reused."""
        info = self.gguf.tensor(self.spec.tensor_name("output"))
        d, n = self.spec.d_model, self.spec.vocab
        row_bytes = tensor_bytes(info.type_name, (d,))
        raw = self.gguf.raw(info.name)
        buf = np.empty((self.head_chunk_rows, d), np.float32)
        for start in range(0, n, self.head_chunk_rows):
            stop = min(n, start + self.head_chunk_rows)
            out = buf[: stop - start]
            part = raw[start * row_bytes : stop * row_bytes]
            if info.type_name in QUANTS:
                with np.errstate(all="ignore"):
                    QUANTS[info.type_name].fast(part, out=out.reshape(-1))
            else:
                out[...] = dequantize(part, info.type_name, out.shape)
            self.gguf.check_finite(info.name, out, start=start * d)  # the first pass checks it, the rest trust it
            yield start, out
        _release_pages(self.gguf, info.name)


def open_weights(gguf: GGUFFile, spec: ArchSpec, mode: str, layout: str = "rows"):
    """The provider for mode 'resident' or 'streaming'; `layout` (LAYOUTS) is the resident matrices'
    (a streamed block lands in row-major scratch)."""
    if mode == "resident":
        return ResidentWeights(gguf, spec, layout)
    if mode == "streaming":
        if layout != "rows":
            raise ValueError(f"layout {layout!r} is for resident weights; streamed ones are dequantized row-major")
        return StreamingWeights(gguf, spec)
    raise ValueError(f"weights mode must be 'resident' or 'streaming', not {mode!r}")
