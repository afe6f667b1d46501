"""The child side of a chat template's render: Jinja's sandbox, bounded, inside a process with limits.

A chat template is code that came with a downloaded file. bytesup.model.chat forks a child for each
render; this module is what that child runs, in two layers:

1. The child process holds the hard bounds, whatever the template does: before it touches the
   template it lowers its own resource limits (address space: ``memory_mb`` above what the fork
   started with; CPU time: ``cpu_seconds``; no core file; no file written), and the parent reads
   its answer through a pipe, at most ``4 * output_chars`` bytes, and kills it at ``seconds``
   of wall-clock time. A doubling ``~`` in a loop, a string method asked for a billion
   characters, a loop over a long string inside another: each ends as MemoryError, SIGXCPU or the
   parent's kill, and so as one line.
2. ``BoundedSandbox`` makes the cheap cases quick and their line precise. Jinja's
   ImmutableSandboxedEnvironment already refuses '_' attributes, unsafe calls and mutation of
   lists and dicts; this subclass also refuses, before the work is done, what is one C call away
   from a huge value: ``range()`` handing out more than ``range_items`` items in one render
   (so a loop inside a loop of range(100000) stops at once), ``**`` and ``*`` on integers past
   ``int_bits`` bits, ``*`` and ``+`` building a string or list longer than ``output_chars``,
   ``tojson`` asked for an indent or separator over 64 characters, and output past
   ``output_chars`` (streamed, counted as it is produced). Intercepting ``**``, ``*`` and ``+``
   also keeps Jinja from folding them at compile time, outside these checks.

Everything else is Jinja as transformers' ``apply_chat_template`` configures it (trim_blocks,
lstrip_blocks, loop controls, ``raise_exception``, ``strftime_now``, a ``namespace`` refusing '_'
names, a ``tojson`` that does not escape HTML), so a real template renders to the same text.

The child answers with one framed message: b"T" + the text (UTF-8), or b"E" + one line.
"""

from __future__ import annotations

import json
import math
import resource
import signal
from dataclasses import dataclass
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bytesup.errors import BytesupError

TEXT, ERROR = b"T", b"E"  # the first byte of the child's answer
LONGEST_MESSAGE = 300  # characters of an error line kept


@dataclass(frozen=True)
class Limits:
    """What one render may take. The defaults leave a real template (a few milliseconds) far inside."""

    seconds: float = 10.0  # wall clock, fork to answer (the parent kills the child after it)
    cpu_seconds: int = 5  # the child's CPU time (RLIMIT_CPU: SIGXCPU)
    memory_mb: int = 256  # address space the child may add to what it was forked with (RLIMIT_AS)
    output_chars: int = 1 << 20  # the rendered prompt, and any string or list built on the way
    range_items: int = 1_000_000  # items all range() calls of one render may hand out together
    int_bits: int = 1 << 16  # the largest integer ** or * may make (2**65536: 19,729 digits)

    def answer_bytes(self) -> int:
        """The most bytes a child's answer can take (4 per character in UTF-8, plus the frame)."""
        return 4 * self.output_chars + 4 * LONGEST_MESSAGE + 1


LIMITS = Limits()


class TemplateLimitError(BytesupError):
    """A template asked for more than its render may take; raised inside the child, before the work."""


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:LONGEST_MESSAGE]


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


class _Namespace(jinja2.utils.Namespace):
    """Jinja's namespace() refusing names that start with '_' (as transformers' does)."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with '_'")


_SEQUENCES = (str, list, tuple)


def _int(x) -> bool:
    return isinstance(x, int)  # bool too: True * 'a' is 'a'


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment with transformers' settings and helpers, and bounds (module docstring)."""

    intercepted_binops = frozenset({"**", "*", "+"})

    def __init__(self, limits: Limits = LIMITS):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
        self.limits = limits
        self.range_left = limits.range_items
        self.filters["tojson"] = self._tojson
        self.globals["range"] = self._range
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["namespace"] = _Namespace

    def _range(self, *args):
        items = range(*args)
        if len(items) > self.range_left:
            raise TemplateLimitError(f"range() asked for more than {self.limits.range_items:,} items in one render")
        self.range_left -= len(items)
        return items

    def _tojson(self, x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        for name, value in (("indent", indent), *(("separators", s) for s in (separators or ()))):
            size = len(value) if isinstance(value, str) else value if _int(value) else 0
            if size > 64:
                raise TemplateLimitError(f"tojson {name} of {size:,} characters (64 at most)")
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def _long(self, what: str, n: int) -> None:
        if n > self.limits.output_chars:
            raise TemplateLimitError(f"{what} of {n:,} items ({self.limits.output_chars:,} at most)")

    def _big(self, what: str, bits: int) -> None:
        if bits > self.limits.int_bits:
            raise TemplateLimitError(f"{what} of about {bits:,} bits ({self.limits.int_bits:,} at most)")

    def call_binop(self, context, op: str, left, right):
        if op == "**" and _int(left) and _int(right) and right > 0 and abs(left) > 1:
            self._big("a power", int(right * math.log2(abs(left))) + 1)
        elif op == "*":
            if _int(left) and _int(right):
                self._big("a product", abs(left).bit_length() + abs(right).bit_length())
            elif isinstance(left, _SEQUENCES) and _int(right):
                self._long("a repeated string or list", len(left) * right)
            elif isinstance(right, _SEQUENCES) and _int(left):
                self._long("a repeated string or list", len(right) * left)
        elif op == "+" and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
            self._long("a joined string or list", len(left) + len(right))
        return self.binop_table[op](left, right)


def render_bounded(template: str, context: dict, limits: Limits = LIMITS) -> str:
    """Compile and render in THIS process with the sandbox's bounds (layer 2 only): the child calls it."""
    env = BoundedSandbox(limits)
    compiled = env.from_string(template)
    parts, size = [], 0
    for chunk in compiled.generate(**context):
        size += len(chunk)
        if size > limits.output_chars:
            raise TemplateLimitError(f"output past {limits.output_chars:,} characters")
        parts.append(chunk)
    return "".join(parts)


def _lower_own_limits(limits: Limits) -> None:
    """Layer 1, set by the child on itself (a forked child of a threaded parent must not rely on
    the parent to do it between fork and exec)."""
    with open("/proc/self/statm", "rb") as fh:
        started = int(fh.read().split()[0]) * resource.getpagesize()
    cpu = max(1, int(limits.cpu_seconds))
    for which, soft, hard in (
        (resource.RLIMIT_AS, started + limits.memory_mb * 2**20, None),
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
        (resource.RLIMIT_CORE, 0, None),
        (resource.RLIMIT_FSIZE, 0, None),
    ):
        _, ceiling = resource.getrlimit(which)
        hard = soft if hard is None else hard
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(which, (soft, hard))
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)


def answer(template: str, context: dict, limits: Limits = LIMITS) -> bytes:
    """What the child sends back: the rendered text or one line why not. Never raises."""
    try:
        _lower_own_limits(limits)
        text = render_bounded(template, context, limits)
        return TEXT + text.encode("utf-8", "surrogatepass")
    except jinja2.TemplateSyntaxError as exc:
        why = f"the chat template does not parse (line {exc.lineno}): {one_line(exc)}"
    except jinja2.exceptions.SecurityError as exc:
        why = f"the chat template tried something unsafe and was stopped: {one_line(exc)}"
    except TemplateLimitError as exc:
        why = f"the chat template went past a limit and was stopped: {one_line(exc)}"
    except MemoryError:
        why = f"the chat template needed more than {limits.memory_mb} MB to render and was stopped"
    except BaseException as exc:  # a template is data: whatever it raises becomes one line
        why = f"the chat template failed ({type(exc).__name__}): {one_line(exc)}"
    return ERROR + why[: 2 * LONGEST_MESSAGE].encode("utf-8", "replace")
