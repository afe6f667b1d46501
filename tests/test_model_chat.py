"""Chat templates: the default model's template against transformers, and hostile templates in the sandbox."""

from __future__ import annotations

import os

import pytest

from bytesup.gguf.file import GGUFFile
from bytesup.model.chat import (
    ChatTemplateError,
    chat_template,
    render_chat,
    render_chat_from_metadata,
)

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
