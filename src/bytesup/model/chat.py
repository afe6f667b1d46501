"""Chat messages to the prompt text an instruct model was trained on, with the file's own template.

A GGUF may carry ``tokenizer.chat_template``: a Jinja template that turns
``[{"role": "user", "content": "..."}]`` into text such as
``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``. The template comes with a
downloaded file, so it is untrusted code, bounded in time, memory and output:

- each render runs in a child process forked for it (``os.fork``: the child starts with Jinja
  already imported, in milliseconds, and sees the messages without any copying). The child lowers
  its own limits first (address space, CPU time, no files), renders in ``BoundedSandbox``
  (bytesup.model.chat_sandbox: Jinja's ImmutableSandboxedEnvironment with transformers' settings
  and helpers, plus bounds on range(), ``**``, ``*``, ``+``, tojson and the output) and writes the
  text or one line why not into a pipe;
- this process reads at most ``Limits.answer_bytes()`` from the pipe and kills the child at
  ``Limits.seconds`` (a fork of a threaded process that deadlocks ends there too).

Whatever a template does, the caller gets the prompt text or a ChatTemplateError whose message is
one line (lesson 5 prints it as "chat part skipped: ..."). The limits are in ``chat_sandbox.Limits``.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Mapping, Sequence

from bytesup.errors import BytesupError
from bytesup.model.chat_sandbox import ERROR, LIMITS, TEXT, Limits, answer

TEMPLATE_KEY = "tokenizer.chat_template"


class ChatTemplateError(BytesupError, ValueError):
    """A chat template that is missing, does not parse, raises, tries something unsafe or takes too much."""


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


def _read_answer(fd: int, limits: Limits) -> tuple[bytes, str | None]:
    """The child's answer, or (what came, why it was cut off) past the deadline or the byte cap."""
    deadline, cap = time.monotonic() + limits.seconds, limits.answer_bytes()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"", f"the chat template took longer than {limits.seconds:g} s to render and was stopped"
        if not poller.poll(left * 1000):
            continue
        block = os.read(fd, 1 << 16)
        if not block:
            return b"".join(chunks), None
        size += len(block)
        if size > cap:
            return b"", f"the chat template wrote more than {limits.output_chars:,} characters and was stopped"
        chunks.append(block)


def _stopped(status: int, limits: Limits) -> str:
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return f"the chat template used more than {limits.cpu_seconds} s of CPU to render and was stopped"
    how = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else "no answer"
    return f"the chat template's renderer stopped ({how})"


def _render_in_child(template: str, context: dict, limits: Limits) -> tuple[str | None, str | None]:
    """(text, None) or (None, one line why not), from a child forked for this one render."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's atexit or flushing its files
        code = 1
        try:
            os.close(read_fd)
            data = memoryview(answer(template, context, limits))
            while data:
                data = data[os.write(write_fd, data) :]
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    status = None
    try:
        reply, cut = _read_answer(read_fd, limits)
        if cut is None:
            _, status = os.waitpid(pid, 0)  # the pipe closed: the child has exited or is exiting
    finally:
        os.close(read_fd)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if cut is not None:
        return None, cut
    if reply[:1] == TEXT:
        return reply[1:].decode("utf-8", "surrogatepass"), None
    if reply[:1] == ERROR:
        return None, reply[1:].decode("utf-8", "replace")
    return None, _stopped(status, limits)


def render_chat(
    template: str,
    messages: Sequence[Mapping],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    source: str = TEMPLATE_KEY,
    limits: Limits = LIMITS,
) -> str:
    """The prompt text for ``messages`` under ``template``, rendered in a bounded child (module docstring)."""
    context = {
        "messages": _plain(list(messages)),
        "bos_token": bos_token,
        "eos_token": eos_token,
        "add_generation_prompt": bool(add_generation_prompt),
    }
    text, why = _render_in_child(template, context, limits)
    if why is not None:
        raise ChatTemplateError(f"{source}: {why}")
    return text


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
