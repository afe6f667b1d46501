"""Chat messages to the prompt text an instruct model was trained on, with the file's own template.

A GGUF may carry ``tokenizer.chat_template``: a Jinja template that turns
``[{"role": "user", "content": "..."}]`` into text such as
``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``. The template comes with a
downloaded file, so it is untrusted code: it is rendered in Jinja's ImmutableSandboxedEnvironment
(no attribute starting with '_', no calls to unsafe methods, no mutation of lists or dicts), with
the settings and helpers transformers' ``apply_chat_template`` gives it (trim_blocks,
lstrip_blocks, loop controls, ``raise_exception``, a ``tojson`` that does not escape HTML).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bytesup.errors import BytesupError

TEMPLATE_KEY = "tokenizer.chat_template"


class ChatTemplateError(BytesupError, ValueError):
    """A chat template that is missing, does not parse, raises, or tries something unsafe."""


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


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


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _Namespace
    return env.from_string(template)


def _plain(value):
    """Messages rebuilt from plain JSON types, so the template sees no object with extra methods."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    raise ChatTemplateError(f"chat message value of type {type(value).__name__} is not plain JSON data")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def render_chat(
    template: str,
    messages: Sequence[Mapping],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    source: str = TEMPLATE_KEY,
) -> str:
    """The prompt text for ``messages`` under ``template`` (rendered in the sandbox)."""
    try:
        compiled = _compile(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(
            f"{source}: the chat template does not parse (line {exc.lineno}): {_one_line(exc)}"
        ) from None
    try:
        return compiled.render(
            messages=_plain(list(messages)),
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=bool(add_generation_prompt),
        )
    except jinja2.exceptions.SecurityError as exc:
        raise ChatTemplateError(
            f"{source}: the chat template tried something unsafe and was stopped: {_one_line(exc)}"
        ) from None
    except Exception as exc:  # a template is data: whatever it raises becomes one line
        raise ChatTemplateError(
            f"{source}: the chat template failed ({type(exc).__name__}): {_one_line(exc)}"
        ) from None


def chat_template(metadata: Mapping, source: str = "<metadata>") -> str:
    """``tokenizer.chat_template`` from GGUF metadata, or a one-line error naming the key."""
    template = metadata.get(TEMPLATE_KEY)
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError(
            f"{source}: no {TEMPLATE_KEY} in this file; write the prompt as plain text or use an instruct model's GGUF"
        )
    return template


def render_chat_from_metadata(
    metadata: Mapping, messages: Sequence[Mapping], *, add_generation_prompt: bool = True, source: str = "<metadata>"
) -> str:
    """Render ``messages`` with the file's own template and its BOS/EOS token texts."""
    template = chat_template(metadata, source)
    tokens = metadata.get("tokenizer.ggml.tokens") or []

    def token(key: str) -> str:
        i = metadata.get(f"tokenizer.ggml.{key}")
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""

    return render_chat(
        template,
        messages,
        bos_token=token("bos_token_id"),
        eos_token=token("eos_token_id"),
        add_generation_prompt=add_generation_prompt,
        source=f"{source}: {TEMPLATE_KEY}",
    )
