"""Lesson 2, "Tokens and embeddings": from a word to its row of numbers, and what rows near it mean.

What is computed, in the lesson's order:
  1. the token: " cat" looked up in the GGUF's own vocabulary (tokenizer.ggml.tokens), with the
     way this tokenizer marks a leading space;
  2. the row: the token's id picks one row of token_embd.weight; its bytes are cut out of the
     GGUF and dequantized by hand (block by block), then compared bit for bit with the extract
     stage's float32 table and with gguf-py; its length and RMS;
  3. neighbours: cosine similarity of a few words' rows against every row of the vocabulary
     (one matrix product), the closest ones listed;
  4. how rare closeness is: cosines of random token pairs against each sampled token's nearest
     neighbour, beside what truly random directions of the same width would give;
  5. the course's two random 4,096-vectors (numpy default_rng(0)): their dot product and a
     self-dot, and which way of drawing them reproduces the printed -18.14 and 4077.07.

The embedding table is read as float32 (the extract stage's .npy, memory-mapped), a chunk of rows at
a time, so the job's memory does not grow with the vocabulary; cosines are computed in float32 on
unit-length rows, like a similarity search would.
"""

from __future__ import annotations

import math
import mmap as mmap_mod
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bytesup.gguf.dequant import bit_equal, reference_dequantize
from bytesup.gguf.file import GGUFFile
from bytesup.gguf.quants import QUANTS
from bytesup.gguf.sizes import tensor_bytes
from bytesup.lessons import LessonInputError, figure, legend_below, metadata_values
from bytesup.lessons import claims as claims_mod
from bytesup.lessons.spec import SERIES, Headline, LessonSpec
from bytesup.model.layers import rms
from bytesup.model.tokens import TokenError, display, lookup, tokenizer_of, vocab_form
from bytesup.model.vectors import length
from bytesup.run.files import release_mapped_pages

SPEC = LessonSpec(
    id="02_tokens_and_embeddings",
    title="Tokens and embeddings",
    kind=SERIES,
    position=2,
    source=(
        "Lesson 2 of the LLM Basics series (its text is not among the course files here), with the "
        'random-vector numbers of the chapter "Vectors and the functions that move them"'
    ),
    reads=("metadata_json", "tensors_index", "model_gguf"),
    tensors=("token_embd.weight",),
    tables=("token_row.csv", "nearest_neighbours.csv", "random_vector_variants.csv"),
    figures={
        "cosine_random_vs_nearest.png": "Cosine between embedding rows: random token pairs, the same pairs with the mean row subtracted, and nearest neighbours",
    },
    headlines=(
        Headline("token_id", "token id"),
        Headline("token_vocab_form", "stored in the vocabulary as"),
        Headline("row_length", "row length", fmt=".4g"),  # as lesson 3 writes the same row's |x| and RMS
        Headline("row_rms", "row RMS", fmt=".4g"),
        Headline("row_bit_exact_gguf_py", "row decoded by hand, bit-exact with gguf-py"),
        Headline("token_nearest", "nearest neighbour"),
        Headline("token_nearest_cosine", "its cosine", fmt=".3f"),
        Headline("random_pair_cosine_mean", "random token pairs: mean cosine", fmt=".3f"),
        Headline("random_pair_centred_cosine_sd", "random pairs, mean row subtracted: sd of cosine", fmt=".3f"),
        Headline("nearest_cosine_median", "nearest neighbours: median cosine", fmt=".3f"),
        Headline("random_dot", "two random 4096-vectors (default_rng(0)): a·b", fmt=".2f"),
        Headline("random_self_dot", "a·a", fmt=".2f"),
    ),
    config_keys=("token", "seed"),
    # the specimen's 32k x 4096 table a 64 MB chunk at a time: compute() peaks at 204 MB (it was 2.4 GB);
    # with papermill and the kernel the job stays under 600 MB (docs/memory.md)
    mem_mb=1000,
    runtime=10,
)
EMBEDDINGS = "token_embd.weight"
NEIGHBOUR_WORDS = (" cat", " dog", " king", " Paris", " seven", " red")
N_NEIGHBOURS = 8
N_RANDOM_PAIRS = 20_000
N_NEAREST_SAMPLE = 512
RANDOM_WIDTH = 4096  # the course's random vectors


# --- 1. the token --------------------------------------------------------------------------------


def token_facts(metadata: Mapping, token: str) -> dict:
    """The token's id and spelling in the vocabulary, and the tokenizer's space marker."""
    vocab, model = tokenizer_of(metadata)
    tid, form = lookup(metadata, token)
    marker = vocab_form(" ", model)
    try:
        bare = lookup(metadata, token.lstrip(" "))[0] if token.startswith(" ") else None
    except TokenError:
        bare = None  # the word without its space is not one token in this vocabulary
    return {
        "token": token,
        "token_id": tid,
        "token_vocab_form": form,
        "tokenizer_model": model,
        "space_marker": marker,
        "space_marker_codepoint": f"U+{ord(marker):04X}" if len(marker) == 1 else "",
        "token_without_space_id": bare,
        "vocab_size": len(vocab),
    }


# --- 2. the row, by hand -------------------------------------------------------------------------


# The block formulas the notebook shows for the row's first block: w = d * q, w = d * q + m (blocks of 32);
# bytesup.gguf.quants decodes more types than these (K-quants, floats), which the notebook does not explain.
FIRST_BLOCK_TYPES = ("Q8_0", "Q4_1")


@dataclass(frozen=True)
class Row:
    token_id: int
    type_name: str
    offset: int  # absolute byte offset of the row in the GGUF
    raw: bytes  # the row's bytes
    values: np.ndarray  # float32, dequantized by hand
    first_block: object | None  # gguf_on_disk.Block for Q8_0 / Q4_1 rows
    how: str


def row_by_hand(f: GGUFFile, token_id: int) -> Row:
    """Cut row ``token_id`` of the embedding table out of the GGUF and dequantize it by hand.

    Rows are contiguous in the file (GGUF's first dimension is the row), so row r of a table
    whose rows take B bytes starts B * r bytes into the tensor's data.
    """
    info = f.tensor(EMBEDDINGS)
    if len(info.shape) != 2 or not 0 <= token_id < info.shape[0]:
        raise LessonInputError(f"{f.path}: {EMBEDDINGS} has shape {info.shape}; no row {token_id}")
    n = info.shape[1]
    row_bytes = tensor_bytes(info.type_name, (n,))
    start = token_id * row_bytes
    raw = np.array(f.raw(EMBEDDINGS)[start : start + row_bytes])  # a copy of just these bytes
    if info.type_name in QUANTS:
        quant = QUANTS[info.type_name]  # the clear, block-layout version, not the fast one
        values, how = (
            quant.clear(raw).astype(np.float32, copy=False),
            f"bytesup.gguf.quants {quant.name} (clear version)",
        )
    else:
        values, how = reference_dequantize(raw, info.type_name, (n,)), "gguf.quants (no hand dequantizer)"
    first = None
    if info.type_name in FIRST_BLOCK_TYPES:
        quant = QUANTS[info.type_name]
        first = quant.decode_block(bytes(raw[: quant.type_size]))  # one block: the first 32 weights
    return Row(token_id, info.type_name, info.offset + start, bytes(raw), values, first, how)


def row_checks(row: Row, extracted: np.ndarray) -> dict:
    """The hand-made row against the extract stage's table and against gguf-py, bit for bit."""
    n = row.values.shape[0]
    reference = reference_dequantize(np.frombuffer(row.raw, np.uint8), row.type_name, (n,))
    out = {
        "row_type": row.type_name,
        "row_offset": row.offset,
        "row_bytes": len(row.raw),
        "row_blocks": n // 32 if row.type_name not in ("F32", "F16", "BF16") else None,
        "row_dequantizer": row.how,
        "row_bit_exact_extract": bit_equal(row.values, np.asarray(extracted, np.float32)),
        "row_bit_exact_gguf_py": bit_equal(row.values, reference),
    }
    if row.first_block is not None:
        b = row.first_block
        out.update({
            "row_first_block_d": b.d.value,
            "row_first_block_m": None if b.m is None else b.m.value,
            "row_first_block_q": b.q,
            "row_first_block_values": b.values,
            "row_first_block_matches_row": bit_equal(b.values, row.values[: len(b.q)]),
        })  # fmt: skip
    return out


def row_stats(x: np.ndarray) -> dict:
    x = np.asarray(x, np.float32)
    return {
        "row_first3": x[:3],
        "row_length": length(x),
        "row_rms": rms(x),
        "row_length_over_rms": length(x) / rms(x),  # = sqrt(number of elements)
        "row_min": x.min(),
        "row_max": x.max(),
        "row_mean": x.mean(),
    }


# --- 3. neighbours -------------------------------------------------------------------------------
#
# The table is read in chunks of rows (CHUNK_BYTES of float32 at a time), never whole: a 32k x 4096
# table is 0.5 GB as float32 and Llama-3-70B's 128k x 8192 is 4.2 GB, and a copy of unit rows would
# double that. Each chunk of a memory-mapped table is let go once used (release_pages), so the
# job's memory holds a few chunks, whatever the vocabulary.

CHUNK_BYTES = 64 * 2**20


def chunk_rows(E: np.ndarray, chunk_bytes: int | None = None) -> int:
    """Rows of E in one chunk: as many as fit in chunk_bytes (CHUNK_BYTES) of float32, at least one."""
    return max(1, (chunk_bytes or CHUNK_BYTES) // (4 * max(1, E.shape[1])))


def release_pages(E: np.ndarray) -> None:
    """Tell the kernel this process is done with the pages of a memory-mapped table read so far.

    They stay in the page cache (a second pass reads them from there), but no longer count as
    this job's resident memory. Plain arrays are left alone."""
    release_mapped_pages(getattr(E, "_mmap", None))


def row_chunks(E: np.ndarray, chunk: int | None = None):
    """(first row, float32 rows) of E, chunk by chunk."""
    chunk = chunk or chunk_rows(E)
    for s in range(0, E.shape[0], chunk):
        yield s, np.asarray(E[s : s + chunk], dtype=np.float32)
        release_pages(E)


def take_rows(E: np.ndarray, ids) -> np.ndarray:
    """Rows ``ids`` of E as float32. From a memory-mapped .npy each row is read with a plain read:
    touching scattered rows through the map maps the page cache's large pages (2 MB here) around
    every row, and 20,000 random rows would bring the whole table into the job's memory."""
    ids = np.asarray(ids)
    if not (isinstance(E, np.memmap) and isinstance(E.base, mmap_mod.mmap) and E.flags.c_contiguous):
        return np.asarray(E[ids], np.float32)
    out = np.empty((len(ids), E.shape[1]), E.dtype)
    row_bytes = E.shape[1] * E.itemsize
    with open(E.filename, "rb", buffering=0) as fh:
        for k, i in enumerate(ids.tolist()):
            os.preadv(fh.fileno(), [out[k]], E.offset + i * row_bytes)
    return out.astype(np.float32, copy=False)


def unit_rows(E: np.ndarray) -> np.ndarray:
    """Every row divided by its length (float32). Then a dot product is a cosine.

    A row of zeros (an unused token) stays zero, so its cosine with anything is 0, not NaN.
    """
    E = np.asarray(E, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", E, E))
    norms[norms == 0] = 1.0
    return E / norms[:, None]


def row_lengths(E: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """|row| of every row (float32), chunk by chunk."""
    out = np.empty(E.shape[0], np.float32)
    for s, rows in row_chunks(E, chunk):
        out[s : s + len(rows)] = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    return out


def cosines_to_all(E: np.ndarray, token_id: int, chunk: int | None = None) -> np.ndarray:
    """Cosine of one token's row with every row: unit rows times the token's unit row, chunk by chunk."""
    x = unit_rows(E[token_id : token_id + 1])[0]
    out = np.empty(E.shape[0], np.float32)
    for s, rows in row_chunks(E, chunk):
        out[s : s + len(rows)] = unit_rows(rows) @ x
    return out


def nearest(E: np.ndarray, token_id: int, k: int = N_NEIGHBOURS) -> list[tuple[int, float]]:
    """The k rows closest to ``token_id`` by cosine, itself left out, closest first.

    Ties are broken by the lower id, so the order is the same on every run.
    """
    c = cosines_to_all(E, token_id)
    c[token_id] = -np.inf
    k = min(k, c.shape[0] - 1)
    top = np.argpartition(-c, k)[: k + 1] if k < c.shape[0] - 1 else np.arange(c.shape[0])
    top = sorted(top.tolist(), key=lambda i: (-float(c[i]), i))[:k]
    return [(i, float(c[i])) for i in top]


def neighbour_table(E: np.ndarray, metadata: Mapping, words: Sequence[str], k: int = N_NEIGHBOURS):
    """(rows, missing): k nearest neighbours per word; words that are not one token are listed."""
    vocab, model = tokenizer_of(metadata)
    rows, missing = [], []
    for word in words:
        try:
            wid, _ = lookup(metadata, word)
        except TokenError:
            missing.append(word)
            continue
        for rank, (nid, cos) in enumerate(nearest(E, wid, k), 1):
            rows.append({
                "word": word, "word_id": wid, "rank": rank,
                "neighbour": display(vocab[nid], model), "neighbour_id": nid, "cosine": cos,
            })  # fmt: skip
    return rows, missing


# --- 4. how rare is closeness? -------------------------------------------------------------------


def random_pairs(n_vocab: int, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n_pairs pairs of distinct token ids, uniformly at random."""
    a = rng.integers(0, n_vocab, n_pairs)
    b = rng.integers(0, n_vocab - 1, n_pairs)
    b = b + (b >= a)  # skip a itself: b is uniform over the other n_vocab - 1 ids
    return a, b


def pair_cosines(E: np.ndarray, a: np.ndarray, b: np.ndarray, centre: np.ndarray | None = None,
                 chunk: int | None = None) -> np.ndarray:  # fmt: skip
    """Cosines of rows a[i] and b[i]; with ``centre``, of the rows minus that vector (pairs chunk by chunk)."""
    chunk = chunk or max(1, chunk_rows(E) // 2)
    out = np.empty(len(a), np.float32)
    for s in range(0, len(a), chunk):
        x = take_rows(E, a[s : s + chunk])
        y = take_rows(E, b[s : s + chunk])
        if centre is not None:
            x, y = x - centre, y - centre
        num = np.einsum("ij,ij->i", x, y)
        den = np.sqrt(np.einsum("ij,ij->i", x, x) * np.einsum("ij,ij->i", y, y))
        out[s : s + chunk] = num / np.where(den == 0, 1, den)
    return out


def nearest_cosines(E: np.ndarray, ids: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """For each id, the cosine of its nearest other row: the sampled unit rows against every unit
    row, one chunk of the table at a time, keeping the largest cosine seen so far."""
    ids = np.asarray(ids)
    sample = unit_rows(take_rows(E, ids))  # (len(ids), width)
    best = np.full(len(ids), -np.inf, np.float32)
    for s, rows in row_chunks(E, chunk):
        c = sample @ unit_rows(rows).T  # (len(ids), rows in this chunk)
        mine = (ids >= s) & (ids < s + len(rows))
        c[np.flatnonzero(mine), ids[mine] - s] = -np.inf  # a row is not its own neighbour
        np.maximum(best, c.max(axis=1), out=best)
    return best


def mean_row(E: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """The average row (float32; summed in float64 chunk by chunk)."""
    total = np.zeros(E.shape[1], np.float64)
    for _, rows in row_chunks(E, chunk):
        total += rows.sum(axis=0, dtype=np.float64)
    return (total / E.shape[0]).astype(np.float32)


def closeness(E: np.ndarray, seed: int, n_pairs: int = N_RANDOM_PAIRS, n_sample: int = N_NEAREST_SAMPLE,
              lengths: np.ndarray | None = None) -> tuple[dict, dict]:  # fmt: skip
    """(arrays for the figure, metrics): random-pair cosines raw and centred, nearest-neighbour cosines."""
    rng = np.random.default_rng(seed)
    n_vocab, width = E.shape
    a, b = random_pairs(n_vocab, n_pairs, rng)
    centre = mean_row(E)
    raw = pair_cosines(E, a, b)
    centred = pair_cosines(E, a, b, centre=centre)
    sample = rng.choice(n_vocab, size=min(n_sample, n_vocab), replace=False)
    nn = nearest_cosines(E, sample)
    lengths = row_lengths(E) if lengths is None else lengths
    arrays = {"random": raw, "random_centred": centred, "nearest": nn}
    metrics = {
        "random_pairs": int(n_pairs),
        "random_pair_cosine_mean": raw.mean(),
        "random_pair_cosine_sd": raw.std(),
        "random_pair_cosine_p99": np.quantile(raw, 0.99),
        "random_pair_centred_cosine_mean": centred.mean(),
        "random_pair_centred_cosine_sd": centred.std(),
        "nearest_sample": int(len(sample)),
        "nearest_cosine_median": np.median(nn),
        "nearest_cosine_min": nn.min(),
        "nearest_above_random_p99_fraction": np.mean(nn > np.quantile(raw, 0.99)),
        "mean_row_length": length(centre),
        "mean_row_length_over_median_row_length": length(centre) / float(np.median(lengths)),
        "gaussian_cosine_sd": 1 / math.sqrt(width),  # random directions in this many dimensions
    }
    return arrays, metrics


# --- 5. the course's two random 4,096-vectors ----------------------------------------------------


def _two_calls(seed, n):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal(n)


def _one_call_rows(seed, n):
    m = np.random.default_rng(seed).standard_normal((2, n))
    return m[0], m[1]


def _one_call_columns(seed, n):
    m = np.random.default_rng(seed).standard_normal((n, 2))
    return m[:, 0], m[:, 1]


def _normal_method(seed, n):
    rng = np.random.default_rng(seed)
    return rng.normal(size=n), rng.normal(size=n)


def _float32(seed, n):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def _two_generators(seed, n):
    return np.random.default_rng(seed).standard_normal(n), np.random.default_rng(seed).standard_normal(n)


def _seeds_0_and_1(seed, n):
    return np.random.default_rng(seed).standard_normal(n), np.random.default_rng(seed + 1).standard_normal(n)


def _legacy(seed, n):
    state = np.random.RandomState(seed)  # np.random.seed(0); np.random.randn(...) is this generator
    return state.randn(n), state.randn(n)


# name -> (the code it stands for, how it draws a and b)
RANDOM_VARIANTS: dict[str, tuple[str, Callable]] = {
    "two calls, one generator": (
        "rng = default_rng(0); a, b = rng.standard_normal(4096), rng.standard_normal(4096)",
        _two_calls,
    ),
    "one (2, 4096) call, rows": ("rng.standard_normal((2, 4096)); a, b = the two rows", _one_call_rows),
    "rng.normal instead": ("a, b = rng.normal(size=4096), rng.normal(size=4096)", _normal_method),
    "one (4096, 2) call, columns": ("rng.standard_normal((4096, 2)); a, b = the two columns", _one_call_columns),
    "float32 draws": ("rng.standard_normal(4096, dtype=np.float32), twice", _float32),
    "a fresh default_rng(0) each": ("default_rng(0).standard_normal(4096), twice", _two_generators),
    "seeds 0 and 1": ("default_rng(0) for a, default_rng(1) for b", _seeds_0_and_1),
    "legacy np.random.seed(0)": ("np.random.seed(0); np.random.randn(4096), twice", _legacy),
}
COURSE_RANDOM = {"dot": -18.14, "self_dot": 4077.07}  # as the vectors chapter prints them, rounded to 2 places
RANDOM_VARIANT_USED = "two calls, one generator"  # the text's own code; see random_variant_rows


def random_vectors(variant: str = RANDOM_VARIANT_USED, seed: int = 0, n: int = RANDOM_WIDTH):
    """The course's a and b: by default exactly the text's code,

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4096), rng.standard_normal(4096)
    """
    return RANDOM_VARIANTS[variant][1](seed, n)


def random_variant_rows(seed: int = 0, n: int = RANDOM_WIDTH) -> list[dict]:
    """Every drawing variant with its a.b and a.a rounded as the text rounds them, and whether
    both match the printed pair. The course's seed is 0, whatever the workflow's seed is."""
    rows = []
    for name, (code, draw) in RANDOM_VARIANTS.items():
        a, b = draw(seed, n)
        dot, self_dot = float(a @ b), float(a @ a)
        rows.append({
            "variant": name, "code": code, "dot": round(dot, 2), "self_dot": round(self_dot, 2),
            "matches_course": (round(dot, 2), round(self_dot, 2)) == (COURSE_RANDOM["dot"], COURSE_RANDOM["self_dot"]),
        })  # fmt: skip
    return rows


def random_vector_metrics() -> dict:
    a, b = random_vectors()
    dot, self_dot = float(a @ b), float(a @ a)
    rows = random_variant_rows()
    return {
        "random_variant": RANDOM_VARIANT_USED,
        "random_variants_matching": [r["variant"] for r in rows if r["matches_course"]],
        "random_dot": dot,
        "random_self_dot": self_dot,
        "random_self_dot_b": float(b @ b),
        "random_cosine": dot / math.sqrt(self_dot * float(b @ b)),
        # For standard normal vectors of n elements, a.a is about n and a.b about 0 give or take
        # sqrt(n): so the dot is sqrt(n) times smaller than the self-dot, 64 times at n = 4096.
        "random_dot_expected_sd": math.sqrt(RANDOM_WIDTH),
        "random_self_dot_expected": float(RANDOM_WIDTH),
        "random_dot_in_sds": dot / math.sqrt(RANDOM_WIDTH),
        "random_width": RANDOM_WIDTH,
    }


# --- the whole lesson ----------------------------------------------------------------------------


def embedding_table(tensors: Mapping, metadata: Mapping) -> np.ndarray:
    """token_embd.weight as (vocab, width), checked against the metadata."""
    if EMBEDDINGS not in tensors:
        raise LessonInputError(f"tensor {EMBEDDINGS!r} missing from the extracted tensors; add it to the selection")
    E = tensors[EMBEDDINGS]
    vocab, _ = tokenizer_of(metadata)
    if E.ndim != 2 or E.shape[0] != len(vocab):
        raise LessonInputError(f"{EMBEDDINGS} has shape {E.shape}; expected ({len(vocab)}, width): one row per token")
    return E


def compute(metadata: Mapping, tensors: Mapping, gguf: GGUFFile, token: str = " cat",
            words: Sequence[str] = NEIGHBOUR_WORDS, seed: int = 0) -> tuple[dict, dict]:  # fmt: skip
    """(metrics, tables): every number the lesson reports, and the arrays and rows behind them.

    ``metadata`` is the GGUF's key -> value mapping (metadata.json's document is unwrapped).

    tables holds "neighbours" (rows), "neighbours_missing", "variants" (rows), "closeness"
    (arrays for the figure) and "row" (the hand-made row).
    """
    metadata = metadata_values(metadata)
    m: dict = token_facts(metadata, token)
    arch = metadata.get("general.architecture", "")
    m["embedding_length"] = metadata.get(f"{arch}.embedding_length")
    E = embedding_table(tensors, metadata)
    m["embedding_shape"] = list(E.shape)
    m["embedding_type"] = gguf.tensor(EMBEDDINGS).type_name
    m["tied_embeddings"] = "output.weight" not in gguf.tensor_names
    m["course_embedding_width"] = claims_mod.published_value(SPEC.id, "embedding.width")  # the specimen's
    m["embedding_table_mb"] = gguf.tensor(EMBEDDINGS).n_bytes / 1e6
    m["tied_table_mb"] = m["embedding_table_mb"] if m["tied_embeddings"] else None  # also the output head

    row = row_by_hand(gguf, m["token_id"])
    m.update(row_checks(row, E[m["token_id"]]))
    m.update(row_stats(row.values))

    words = list(dict.fromkeys([token, *words]))  # the lesson's token first, each word once
    nb_rows, missing = neighbour_table(E, metadata, words)
    m["neighbour_words"] = [w for w in words if w not in missing]
    m["neighbour_words_missing"] = missing
    top1 = [r for r in nb_rows if r["word"] == token and r["rank"] == 1]
    m["token_nearest"] = top1[0]["neighbour"] if top1 else None
    m["token_nearest_cosine"] = top1[0]["cosine"] if top1 else None

    arrays, close = closeness(E, seed)
    m.update(close)
    m.update(random_vector_metrics())
    m["seed"] = seed
    tables = {"neighbours": nb_rows, "neighbours_missing": missing, "variants": random_variant_rows(),
              "closeness": arrays, "row": row}  # fmt: skip
    return m, tables


def evaluate_claims(metrics: Mapping, *, model: str, sha256: str = "", metadata: Mapping | None = None,
                    specimen: bool = False):  # fmt: skip
    """Check the lesson's published claims; ``specimen`` is the workflow's flag, or-ed with is_specimen."""
    md = metadata_values(metadata) if metadata is not None else None
    context = claims_mod.run_context(model, sha256, md, extra=["specimen"] if specimen else [])
    return claims_mod.check_all(claims_mod.load_claims(SPEC.id), metrics, context)


# --- figures -------------------------------------------------------------------------------------


def plot_closeness(arrays: Mapping[str, np.ndarray], width: int, title: str = ""):
    """Histograms: cosines of random token pairs (raw and centred) against nearest-neighbour cosines."""
    fig, ax = figure()
    bins = np.linspace(-0.5, 1.0, 151)
    kw = {"bins": bins, "density": True, "histtype": "stepfilled", "alpha": 0.45}
    ax.hist(arrays["random"], color="C0", label=f"random pairs ({len(arrays['random']):,})", **kw)
    ax.hist(arrays["random_centred"], color="C2", label="random pairs, mean row subtracted", **kw)
    n_near = len(arrays["nearest"])
    ax.hist(arrays["nearest"], color="C3", label=f"nearest neighbour of a random token ({n_near})", **kw)
    sd = 1 / math.sqrt(width)
    z = np.linspace(-4 * sd, 4 * sd, 401)
    ax.plot(z, np.exp(-0.5 * (z / sd) ** 2) / (sd * math.sqrt(2 * math.pi)), color="k", lw=0.8,
            label=f"random directions in {width} dimensions (sd {sd:.3f})")  # fmt: skip
    ax.set_xlim(-0.5, 1.0)
    ax.set_xlabel("cosine similarity of two embedding rows")
    ax.set_ylabel("density")
    legend_below(fig, ax)
    if title:
        ax.set_title(title)
    return fig
