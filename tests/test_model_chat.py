"""Chat templates: the default model's template against transformers, real templates exactly as plain Jinja
renders them, and hostile templates stopped by the sandbox or by the child's limits, in one line."""

from __future__ import annotations

import json
import os
import time

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bytesup.gguf.file import GGUFFile
from bytesup.model import chat_sandbox
from bytesup.model.chat import (
    TEMPLATE_KEY,
    ChatTemplateError,
    chat_template,
    render_chat,
    render_chat_from_metadata,
)
from bytesup.model.chat_sandbox import Limits

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SMOLLM_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def metadata(default_gguf):
    return GGUFFile(default_gguf).metadata


def test_default_model_template(metadata):
    assert render_chat_from_metadata(metadata, QUESTION, source="smollm2-135m.gguf") == SMOLLM_PROMPT
    no_prompt = render_chat_from_metadata(metadata, QUESTION, add_generation_prompt=False)
    assert no_prompt == SMOLLM_PROMPT.removesuffix("<|im_start|>assistant\n")
    with_system = [{"role": "system", "content": "Be brief."}, *QUESTION]
    assert render_chat_from_metadata(metadata, with_system).startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


@pytest.mark.slow
def test_default_model_template_matches_transformers(default_gguf, metadata):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(default_gguf.parent), gguf_file=default_gguf.name)
    expected = hf.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    assert render_chat_from_metadata(metadata, QUESTION) == expected == SMOLLM_PROMPT
    two_turns = [*QUESTION, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And Italy?"}]
    assert render_chat_from_metadata(metadata, two_turns) == hf.apply_chat_template(
        two_turns, tokenize=False, add_generation_prompt=True
    )


def test_helpers_behave_as_in_transformers():
    t = "{{ messages[0] | tojson }}{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}"
    assert render_chat(t, [{"role": "user", "content": "<b>é</b>"}], bos_token="", eos_token="") == (
        '{"role": "user", "content": "<b>é</b>"}'  # no HTML escaping, no ASCII escaping
    )
    with pytest.raises(ChatTemplateError, match="one message only"):
        render_chat(t, QUESTION * 2, bos_token="", eos_token="")
    # trim_blocks / lstrip_blocks: block tags leave no newline or indentation behind
    t2 = "{{ bos_token }}\n  {% for m in messages %}\n{{ m.content }}|\n  {% endfor %}\n{{ eos_token }}"
    assert render_chat(t2, QUESTION, bos_token="<s>", eos_token="</s>") == (
        "<s>\nWhat is the capital of France?|\n</s>"
    )
    ns = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    assert render_chat(ns, QUESTION * 3, bos_token="", eos_token="") == "3"


def test_missing_template_names_the_key():
    with pytest.raises(ChatTemplateError) as err:
        chat_template({"tokenizer.ggml.model": "llama"}, source="gemma.gguf")
    msg = str(err.value)
    assert "tokenizer.chat_template" in msg and "gemma.gguf" in msg and "\n" not in msg


def test_bad_syntax_is_one_line():
    with pytest.raises(ChatTemplateError) as err:
        render_chat("{% for m in messages %}{{ m }", QUESTION, bos_token="", eos_token="")
    assert "does not parse" in str(err.value) and "\n" not in str(err.value)


# --- hostile templates ------------------------------------------------------------------------


@pytest.fixture
def trap(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-7f3a")
    return {"secret": secret, "marker": tmp_path / "pwned"}


HOSTILE = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "{{ joiner.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ lipsum.__globals__ }}",
    "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "{{ open('SECRET').read() }}",
    "{% include 'SECRET' %}",
    "{% set x = [] %}{{ x.append(1) }}",
    "{% set d = {} %}{{ d.update({'a': 1}) }}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
    "{{ messages.__class__ }}",
    "{{ raise_exception.__globals__ }}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}",
    "{{ self.__init__.__globals__ }}",
    "{{ range.__self__.__import__('os').system('touch MARKER') }}",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_template_is_stopped(template, trap):
    template = template.replace("MARKER", str(trap["marker"])).replace("SECRET", str(trap["secret"]))
    try:
        out = render_chat(template, QUESTION, bos_token="<s>", eos_token="</s>")
    except ChatTemplateError as err:
        assert "\n" not in str(err)
    else:  # rendering harmlessly is allowed: it must show nothing of the machine
        assert "SECRET-7f3a" not in out and "subprocess" not in out.lower() and "<module" not in out
        assert "class" not in out
    assert not trap["marker"].exists()


def test_hostile_mutation_raises(trap):
    with pytest.raises(ChatTemplateError, match="unsafe"):
        render_chat("{% set x = [] %}{{ x.append(1) }}", QUESTION, bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError):
        render_chat("{{ ''.__class__.__mro__[1].__subclasses__() }}", QUESTION, bos_token="", eos_token="")
    with pytest.raises(ChatTemplateError):
        render_chat(f"{{{{ open('{trap['secret']}').read() }}}}", QUESTION, bos_token="", eos_token="")


def test_messages_are_plain_data():
    class Sneaky(dict):
        def dangerous(self):  # a method the sandbox cannot know about
            raise AssertionError("called")

    out = render_chat(
        "{{ messages[0].content }}{{ messages[0].dangerous }}",
        [Sneaky(role="user", content="hi")],
        bos_token="",
        eos_token="",
    )
    assert out == "hi"  # rebuilt as a plain dict: 'dangerous' is undefined, renders empty


# --- real templates render as before: the same text as Jinja's plain sandbox gives ------------------

# In the shape of Gemma 3 instruct's published template (the 270M base GGUF the tests use carries
# none): a system prompt folded into the first user turn, roles checked with %, string + string.
GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}"""
GEMMA3_PROMPT = (
    "<bos><start_of_turn>user\nBe brief.\n\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"
)
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>'"
    " + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
TOOLS = "{% for m in messages %}{{ m | tojson(indent=2) }}{{ '-' * 3 }}{{ 2 ** 10 }}{% endfor %}{{ range(3) | list }}"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And Italy? \x00\u2028"},
]


def plain_jinja(template: str, messages, **context) -> str:
    """What rendering was before the bounds: ImmutableSandboxedEnvironment, in this process, unbounded."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )
    env.globals["raise_exception"] = chat_sandbox._raise_exception
    return env.from_string(template).render(messages=messages, **context)


def test_gemma3_shaped_template():
    prompt = render_chat(GEMMA3, CONVERSATION[:2], bos_token="<bos>", eos_token="<eos>")
    assert prompt == GEMMA3_PROMPT
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        render_chat(GEMMA3, [QUESTION[0], QUESTION[0]], bos_token="<bos>", eos_token="<eos>")


@pytest.mark.parametrize("name", ["smollm2", "gemma3", "llama3", "tools"])
def test_real_templates_render_exactly_as_plain_jinja(name, metadata):
    template = {"smollm2": chat_template(metadata), "gemma3": GEMMA3, "llama3": LLAMA3, "tools": TOOLS}[name]
    for messages in (CONVERSATION[1:2], CONVERSATION, CONVERSATION[1:]):
        for add in (True, False):
            context = {"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": add}
            try:
                want = plain_jinja(template, messages, **context)
            except jinja2.TemplateError as err:  # a template's own raise_exception: the same words
                with pytest.raises(ChatTemplateError, match=str(err)[:20]):
                    render_chat(template, messages, **context)
                continue
            assert render_chat(template, messages, **context) == want, (name, messages, add)


# --- hostile templates are bounded: the cases of issue 21 and what the sandbox alone does not know ----

ISSUE_21 = [  # each hung the job or took gigabytes before
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "range() asked for more"),
    ("{{ (10**100000)**1000 }}", "a power of about"),
    ("{{ messages | tojson(indent=10**9) }}", "tojson indent of 1,000,000,000"),
    ("{{ 'a' * 10**8 }}", "a repeated string or list of 100,000,000"),
    ("{{ 'a' * 10**9 }}", "a repeated string or list of 1,000,000,000"),
]


@pytest.mark.parametrize("template,why", ISSUE_21, ids=[c[1][:18] for c in ISSUE_21])
def test_the_sandbox_refuses_the_work_before_doing_it(template, why):
    start = time.monotonic()
    with pytest.raises(ChatTemplateError) as err:
        render_chat(template, QUESTION, bos_token="", eos_token="", source="evil.gguf: tokenizer.chat_template")
    msg = str(err.value)
    assert msg.startswith("evil.gguf: tokenizer.chat_template: the chat template went past a limit") and why in msg
    assert "\n" not in msg
    assert time.monotonic() - start < 5  # refused up front, not by the 10 s kill (a hang would be minutes)


def test_output_is_capped_as_it_streams():
    small = Limits(output_chars=1000)
    assert render_chat("{{ 'x' * 999 }}", QUESTION, bos_token="", eos_token="", limits=small) == "x" * 999
    with pytest.raises(ChatTemplateError, match="output past 1,000 characters"):
        render_chat("{% for m in range(3) %}{{ 'x' * 999 }}{% endfor %}", QUESTION, bos_token="", eos_token="",
                    limits=small)  # fmt: skip
    with pytest.raises(ChatTemplateError, match="joined string or list of 1,998"):
        render_chat("{% set x = 'x' * 999 %}{{ x + x }}", QUESTION, bos_token="", eos_token="", limits=small)


def test_the_child_holds_what_the_sandbox_lets_through(monkeypatch):
    """Layer 1 alone: with the sandbox's size checks switched off (the fork inherits the patch), the
    issue's 'a' * 10**9 and a doubling ~ run into the child's address-space limit."""
    monkeypatch.setattr(chat_sandbox.BoundedSandbox, "_long", lambda self, what, n: None)
    small = Limits(memory_mb=128)
    for template in ("{{ 'a' * 10**9 }}", "{{ '{:>999999999}'.format(1) }}",
                     "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"):  # fmt: skip
        with pytest.raises(ChatTemplateError, match="needed more than 128 MB to render") as err:
            render_chat(template, QUESTION, bos_token="", eos_token="", limits=small)
        assert "\n" not in str(err.value)


def test_a_template_that_runs_too_long_is_killed():
    loops = "{% for a in 'x' * 3000 %}{% for b in 'x' * 3000 %}{% for c in 'x' * 3000 %}{% endfor %}{% endfor %}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"took longer than 1 s|more than 1 s of CPU"):
        render_chat(loops, QUESTION, bos_token="", eos_token="", limits=Limits(seconds=1, cpu_seconds=1))
    assert time.monotonic() - start < 4


@pytest.mark.parametrize(
    "template",
    [
        "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",  # RecursionError
        "{{ 2 ** 65537 }}",
        "{{ 10 ** 5000 }}",  # a fine power, too long to print (Python's 4300-digit limit)
        "{% set ns = namespace(n=2) %}{% for i in range(30) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    ],
)
def test_other_runaway_templates_are_one_line(template):
    with pytest.raises(ChatTemplateError) as err:
        render_chat(template, QUESTION, bos_token="", eos_token="")
    assert "\n" not in str(err.value) and str(err.value).startswith("tokenizer.chat_template: the chat template ")


def test_control_characters_come_back_as_the_template_wrote_them():
    """The render is exact (a NUL in a prompt is the model's business); pages escape them (test_report)."""
    out = render_chat("{{ 'a\\x00b\\x1b[31m' }}{{ messages[0].content }}", [{"role": "user", "content": "\ud800"}],
                      bos_token="", eos_token="")  # fmt: skip
    assert out == "a\x00b\x1b[31m\ud800"


def test_lesson_5_prints_a_template_past_a_limit_as_one_chat_line(tmp_path):
    from bytesup.lessons import generating_text
    from bytesup.model.synthetic import write_tiny_llama

    gguf = write_tiny_llama(tmp_path / "evil.gguf", extra_metadata={TEMPLATE_KEY: "{{ 'a' * 10**9 }}"})
    plan = generating_text.prepare(GGUFFile(gguf).metadata, "the cat", None, 0, source="evil.gguf")
    assert plan.chat_prompt is None and "\n" not in plan.chat_note
    assert plan.chat_note.startswith(
        "chat part skipped: evil.gguf: tokenizer.chat_template: the chat template went past"
    )
