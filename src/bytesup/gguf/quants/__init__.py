"""One record per ggml type the project dequantizes by hand (as gguf-py's quants.py has one class per
type), registered in QUANTS: the one table the dequantizer, the lessons, the timing job and the
tests read. Each record (base.Quant) holds the type's block size and bytes (from gguf-py's
GGML_QUANT_SIZES), its fields, its formula, its clear and fast dequantizers and its one-block
decoder. A type not listed here is dequantized by gguf.quants (bytesup.gguf.dequant says so).

To add a type: write its record in the module of its family (or a new one) and list it below; the
README's "Adding a quant type" says what to write and which tests check it.
"""

from __future__ import annotations

from bytesup.gguf.quants.base import Quant
from bytesup.gguf.quants.floats import BF16, F16, F32
from bytesup.gguf.quants.iq4 import IQ4_NL, IQ4_XS
from bytesup.gguf.quants.kquants import Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
from bytesup.gguf.quants.legacy import Q4_0, Q4_1, Q5_0, Q5_1, Q8_0

QUANTS: dict[str, type[Quant]] = {
    q.name: q for q in (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)
}

__all__ = ["QUANTS", "Quant"]
