"""Three tools for vectors: dot product, length, and the angle between two vectors.

Everything a layer does is built from these. They work the same in 2 dimensions, where you can
check them by hand, and in 4,096, where you cannot draw them.

Each function keeps the dtype it is given: float32 in, float32 arithmetic, as the model does.
"""

from __future__ import annotations

import math

import numpy as np


def _same_length(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"need two 1-D vectors of the same length, got shapes {a.shape} and {b.shape}")
    return a, b


def dot_naive(a, b) -> float:
    """Multiply matching elements, add them up: the loop written out, in plain Python floats."""
    a, b = _same_length(a, b)
    s = 0.0
    for ai, bi in zip(a.tolist(), b.tolist()):
        s += ai * bi
    return s


def dot(a, b):
    """The same sum, by numpy (one call into optimised code instead of a Python loop).

    Large when a and b have big values of the same sign in the same places; but it also grows
    with the vectors' sizes, so on its own it mixes "how aligned" with "how big".
    """
    a, b = _same_length(a, b)
    return np.dot(a, b)


def length(a):
    """|a|: the square root of the sum of squares (Pythagoras in any number of dimensions)."""
    a = np.asarray(a)
    return np.sqrt(dot(a, a))


def cosine(a, b):
    """Alignment with size divided out: dot(a, b) / (|a| |b|), between -1 and 1."""
    return dot(a, b) / (length(a) * length(b))


def angle_deg(a, b) -> float:
    """The angle between a and b in degrees (cosine 1 -> 0°, 0 -> 90°, -1 -> 180°)."""
    return angle_from_cosine(cosine(a, b))


def angle_from_cosine(c: float) -> float:
    """Degrees for a given cosine, e.g. to check a printed "cosine 0.95 is about 18°".

    The cosine is clipped to [-1, 1] first: rounding can push cosine(a, a) to 1.0000001.
    """
    return math.degrees(math.acos(min(1.0, max(-1.0, float(c)))))
