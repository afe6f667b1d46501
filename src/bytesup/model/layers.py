"""What a layer is made of: matvecs, RMSNorm, softmax, and one non-linear function.

Shapes are numpy order, rows x columns: W_gate is (n_ff, n_embd), so W_gate @ x takes n_embd
numbers in and gives n_ff out. (GGUF writes the same dims the other way round; gguf_file.py is
the one place that flips them.)

Arithmetic follows the inputs' dtype. Given float32 weights and a float32 vector, every step here
runs in float32, like the model; only ``matvec_naive`` uses Python's 64-bit floats.

RMSNorm, softmax, soft-capping and the activations are the one copy the whole package uses: the
lessons, the NumPy forward pass (bytesup.model.forward) and its torch twin (forward_torch), which
hands them torch tensors. They work along the last axis, so a vector, each row (token) of a matrix and each
head of a (tokens, heads, head_dim) array are all the same call.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np


def namespace(x):
    """The array library x belongs to: torch for a torch tensor, numpy for anything else.

    torch is looked up among the modules already imported, never imported here: a torch tensor
    can only exist once torch is. (The array API standard's idea, for the two libraries used.)
    """
    if isinstance(x, np.ndarray):
        return np
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else np


def asarray(x):
    """x as an array of its library: an array or torch tensor as it is, anything else through np.asarray."""
    return x if isinstance(x, np.ndarray) or namespace(x) is not np else np.asarray(x)


# --- the one operation: y = W · x -----------------------------------------------------------


def matvec_naive(W, x) -> list[float]:
    """y[r] = sum over c of W[r][c] * x[c], written as the two loops of the course.

    This is where a model spends its time: every weight is read once and used for one multiply
    and one add (2 FLOPs per weight). Plain Python floats are 64-bit, so the sums here are
    slightly more exact than numpy's float32 ones; float32 inputs convert to them without loss.
    """
    rows = W.tolist() if hasattr(W, "tolist") else [list(r) for r in W]
    x = x.tolist() if hasattr(x, "tolist") else list(x)
    if any(len(row) != len(x) for row in rows):
        raise ValueError(f"matvec: every row of W needs {len(x)} columns to match x")
    y = [0.0] * len(rows)
    for r, row in enumerate(rows):
        s = 0.0
        for c in range(len(x)):
            s += row[c] * x[c]
        y[r] = s
    return y


def matvec(W, x) -> np.ndarray:
    """The same y = W · x by numpy: identical arithmetic, done by an optimised routine (BLAS)."""
    W, x = np.asarray(W), np.asarray(x)
    if W.ndim != 2 or x.ndim != 1 or W.shape[1] != x.shape[0]:
        raise ValueError(f"matvec: W {W.shape} needs as many columns as x {x.shape} has elements")
    return W @ x


# --- RMSNorm: rescale to a standard size ----------------------------------------------------


def rms(x):
    """Root mean square, read right to left: square, take the mean, take the square root.

    Squaring first stops positive and negative values cancelling, so this measures size.
    """
    x = np.asarray(x)
    return np.sqrt(np.mean(x * x))


def rms_norm(x, weight, eps, out=None):
    """x divided by its RMS, then times a learned per-element gain (the norm tensor), along the
    last axis: a vector, each row (token) of a matrix, each head of (tokens, heads, head_dim).

    eps (read from the file, never assumed) keeps an all-zero x from dividing by zero; it joins
    x's dtype (a float32 model adds it as a float32). out: an array to write the result into.
    """
    xp = namespace(x)
    x, weight = asarray(x), asarray(weight)
    if tuple(weight.shape) != tuple(x.shape[-1:]):
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} must match the last axis of x {tuple(x.shape)}")
    mean_square = (x * x).sum(-1, keepdims=True) / x.shape[-1]  # np.mean's arithmetic, without its overhead
    scale = xp.sqrt(mean_square + float(eps))
    return xp.multiply(xp.divide(x, scale, out=out), weight, out=out)


# --- softmax: scores into weights that sum to 1 ----------------------------------------------


def softmax(z, temperature: float = 1.0, out=None):
    """exp(z / T - max) / sum, along the last axis: weights >= 0 that sum to 1.

    Subtracting the maximum first keeps exp() from overflowing and changes nothing else; a
    masked score (-inf) gives exactly 0. The result has z's float dtype (float32 scores stay
    float32, as attention's); lists and integers become float64. out: where to write it.
    """
    if not temperature > 0:
        raise ValueError(f"softmax: temperature = {temperature!r}, it must be above 0")
    xp = namespace(z)
    z = asarray(z)
    if xp is np and z.dtype.kind != "f":
        z = z.astype(np.float64)
    if temperature != 1:
        z = z / temperature
    top = z.max(-1, keepdims=True) if xp is np else z.amax(-1, keepdims=True)  # torch's max() also gives indices
    e = xp.subtract(z, top, out=out)  # z - max: at most 0
    xp.exp(e, out=e)
    return xp.divide(e, e.sum(-1, keepdims=True), out=e)


def softcap(z, cap: float, out=None):
    """cap * tanh(z / cap), element by element: about z while |z| is well below cap, never beyond
    +-cap (Gemma 2 caps its attention scores at 50 and its logits at 30). out: where to write it."""
    xp = namespace(z)
    z = asarray(z)
    y = xp.divide(z, cap, out=out)
    xp.tanh(y, out=y)
    return xp.multiply(y, cap, out=y)


# --- the non-linear step ---------------------------------------------------------------------


def sigmoid(z):
    """A smooth dial from 0 to 1: 1 / (1 + e^(-z)).

    For very negative z, e^(-z) overflows to inf and the result is exactly 0, which is the
    right answer, so the overflow warning is silenced rather than the formula changed.
    """
    z = asarray(z)
    with np.errstate(over="ignore"):
        return 1 / (1 + namespace(z).exp(-z))


def silu(z):
    """SiLU(z) = z · sigmoid(z): passes large positive z, shuts off large negative z.

    Its lowest value is about -0.278 (near z = -1.278), so a negative gate can only pass a small
    negative fraction of what it multiplies.
    """
    z = asarray(z)
    return z * sigmoid(z)


def relu(z):
    """max(z, 0): the simplest non-linearity, a hard switch at zero."""
    return np.maximum(np.asarray(z), 0)


def gelu(z, approximate: str = "tanh"):
    """GELU, z times the normal distribution's CDF at z.

    approximate="tanh" is the formula GPT-2 and llama.cpp use; "none" is the exact erf form.
    """
    z = asarray(z)
    if approximate == "tanh":
        return 0.5 * z * (1 + namespace(z).tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    if approximate == "none":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return (0.5 * z * (1 + erf(z / math.sqrt(2)))).astype(np.result_type(z, np.float32))
    raise ValueError(f"gelu: approximate must be 'tanh' or 'none', not {approximate!r}")


def tanh(z):
    """tanh: an S-curve from -1 to 1 (the activation of older networks)."""
    return np.tanh(np.asarray(z))


# --- the feed-forward network, one token ----------------------------------------------------


class FFNTrace(NamedTuple):
    """Every intermediate of one token's walk through an FFN half-block."""

    xn: np.ndarray  # RMSNorm(x) * ffn_norm        (n_embd)
    g: np.ndarray  # W_gate · xn                   (n_ff)   the valves
    u: np.ndarray  # W_up · xn                     (n_ff)   the values
    h: np.ndarray  # SiLU(g) * u, element by element (n_ff)
    out: np.ndarray  # W_down · h                  (n_embd) the adjustment
    y: np.ndarray  # x + out                       (n_embd) the residual stream, on to the next block


def ffn(x, w_gate, w_up, w_down, ffn_norm, eps) -> FFNTrace:
    """The FFN half of a llama block with its residual: y = x + W_down(SiLU(W_gate xn) * W_up xn).

    Three matvecs carry nearly all the work; the norm, SiLU, product and add are cheap.
    """
    x = np.asarray(x)
    xn = rms_norm(x, ffn_norm, eps)
    g = matvec(w_gate, xn)  # n_embd -> n_ff
    u = matvec(w_up, xn)  # n_embd -> n_ff
    h = silu(g) * u  # SwiGLU: g decides how much of each u gets through
    out = matvec(w_down, h)  # n_ff -> n_embd
    y = x + out  # add an adjustment, don't replace the vector
    return FFNTrace(xn=xn, g=g, u=u, h=h, out=out, y=y)
