"""Config validation: one schema, defaults filled in, errors on one line.

The schema (workflow/schemas/config.schema.yaml) is the single description of every key.
`validate()` checks a config against it, fills in the defaults, and turns the first
problem into a `ConfigError` whose message names the key and what was expected.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from bytesup.errors import BytesupError, quote
from bytesup.lessons import registry

SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# libyaml's loader where PyYAML was built with it (its wheels are): the same documents as
# yaml.SafeLoader gives, several times faster (the schema is read at every workflow start)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigError(BytesupError, ValueError):
    """A config value the workflow cannot use; the message is one line."""


def check_config_file(path: str | Path) -> None:
    """Refuse a config file that is not YAML, naming the file, line and column (1-based)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot read it ({err.strerror}); restore it from git (git checkout {path})"
        ) from None
    try:
        yaml.load(text, Loader=SAFE_LOADER)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(p for p in (err.context, err.problem) if p)
        raise ConfigError(f"{path}{where}: not valid YAML ({what}); fix it there") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]}); fix it there") from None


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "null": type(None), "array": list, "object": dict}
YAML_BOOLEANS = ("true", "false")  # YAML 1.2's; 1.1's yes/no/on/off are strings here, not booleans


def _is_integer(checker, instance) -> bool:
    """An integer is an int: not a bool, and not a float such as 7.0 (JSON Schema's own rule takes 7.0)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(checker, instance) -> bool:
    """A number is finite: NaN passes every minimum and maximum of JSON Schema, so it is refused here."""
    return isinstance(instance, (int, float)) and not isinstance(instance, bool) and math.isfinite(instance)


# Types as this config means them: strict integers and finite numbers (booleans are strict already).
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def _allows(schema: dict, value, root: dict) -> bool:
    """Whether the schema's `type` (or one of its oneOf/anyOf branches') admits the value."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].split("/")[-1]]
    types = schema.get("type")
    if types is None:
        return any(_allows(s, value, root) for s in schema.get("oneOf", []) + schema.get("anyOf", []))
    types = [types] if isinstance(types, str) else types
    if isinstance(value, bool):
        return "boolean" in types
    return any(isinstance(value, _JSON_TYPES[t]) for t in types if t in _JSON_TYPES)


def _typed(instance: Any, schema: dict, root: dict) -> Any:
    """Read as YAML the strings where the schema wants another type.

    `snakemake --config` parses nested values with YAML's BaseLoader, which keeps every scalar a
    string: `--config "timing={repeats: 3}"` arrives as {'repeats': '3'}. A string whose key
    wants an integer, number, boolean or null is read as YAML, as it would be in config.yaml.
    """
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].split("/")[-1]]
    if isinstance(instance, str):
        try:
            value = yaml.load(instance, Loader=SAFE_LOADER)
        except yaml.YAMLError:
            return instance
        if isinstance(value, bool) and instance.strip().lower() not in YAML_BOOLEANS:
            return instance  # 'yes', 'on', 'y': not a boolean, so the schema names the key
        return value if not isinstance(value, str) and _allows(schema, value, root) else instance
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub:
                instance[key] = _typed(value, sub, root)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        instance[:] = [_typed(v, schema["items"], root) for v in instance]
    return instance


def load_schema(path: str | Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=SAFE_LOADER)


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _one_line(error: jsonschema.ValidationError) -> str:
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties" and not error.schema.get("additionalProperties", True):
        known = ", ".join(sorted(error.schema.get("properties", {})))
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        where = "" if key == "(top level)" else f" in {key}"
        return f"unknown key {', '.join(map(repr, extra))}{where}; expected one of: {known}"
    if error.validator == "pattern":
        desc = " ".join(error.schema.get("description", "").split()).split("; ")[0]  # its first clause, one line
        hint = f" ({desc.rstrip('.')})" if desc else ""
        return f"{key}: {quote(error.instance)} does not match {error.validator_value!r}{hint}"
    if error.validator == "type":
        wanted = error.validator_value
        if isinstance(error.instance, float) and not math.isfinite(error.instance):
            wanted = f"a finite {' or '.join(wanted) if isinstance(wanted, list) else wanted}"
        elif wanted == "boolean" or (isinstance(wanted, list) and "boolean" in wanted):
            wanted = f"{wanted} (true or false)"
        return f"{key}: expected {wanted}, got {type(error.instance).__name__} {quote(error.instance)}"
    if error.validator == "enum":
        options = ", ".join(map(repr, error.validator_value))
        return f"{key}: {quote(error.instance)} is not one of {options}"
    forms = [f.get("description") for f in error.validator_value] if error.validator == "oneOf" else []
    if forms and all(forms):  # alternatives the schema names: say which to give, not the whole entry
        return f"{key}: give exactly one of: {'; or '.join(forms)}"
    if error.validator == "required":
        return f"{key}: {error.message}"
    return f"{key}: {error.message}"


def _model_branch(schema: dict, source: str) -> dict | None:
    """The oneOf branch of the model schema for one source (pypi, hf, path)."""
    model = schema["$defs"]["model"]
    for branch in model["oneOf"]:
        if branch["properties"]["source"].get("const") == source:
            merged = {k: v for k, v in model.items() if k != "oneOf"}
            merged = copy.deepcopy(merged)
            # A branch lists shared keys as {} only to allow them; keep the shared definition.
            own = {k: v for k, v in branch["properties"].items() if v}
            merged["properties"] = {**model["properties"], **own}
            merged["required"] = sorted(set(model.get("required", [])) | set(branch.get("required", [])))
            merged["additionalProperties"] = branch.get("additionalProperties", True)
            if "oneOf" in branch:  # a source with two forms (pypi: package + member, or members)
                merged["oneOf"] = branch["oneOf"]
            merged["$defs"] = schema["$defs"]
            return merged
    return None


def _fill_defaults(instance: Any, schema: dict, root: dict) -> None:
    """Fill in missing keys from the schema's `default`s, recursively."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].split("/")[-1]]
    if not isinstance(instance, dict):
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if key in instance:
            _fill_defaults(instance[key], sub, root)


def validate(config: dict, schema_path: str | Path) -> dict:
    """Check `config` in place against the schema, fill defaults, raise ConfigError on the first problem."""
    schema = load_schema(schema_path)
    if not isinstance(config, dict):
        raise ConfigError(f"the config must be a mapping of keys, got {type(config).__name__}")
    _typed(config, schema, schema)
    # YAML 1.1 reads an unquoted `gpu: on` as true: take it as the user meant it.
    if isinstance(config.get("gpu"), bool):
        config["gpu"] = "on" if config["gpu"] else "off"
    _fill_defaults(config, schema, schema)

    # Each model entry first, against the branch its `source` picks: the error then
    # names that entry's key rather than "not valid under any of the given schemas".
    models = config.get("models")
    if isinstance(models, dict):
        for name, spec in models.items():
            prefix = ["models", name]
            if not isinstance(spec, dict):
                raise ConfigError(f"{_key(prefix)}: expected a mapping with a 'source' key")
            branch = _model_branch(schema, spec.get("source"))
            if branch is None:
                raise ConfigError(
                    f"{_key(prefix + ['source'])}: {spec.get('source')!r} is not one of 'pypi', 'hf', 'path'"
                )
            _typed(spec, branch, schema)
            _fill_defaults(spec, branch, schema)
            err = jsonschema.exceptions.best_match(_Validator(branch).iter_errors(spec))
            if err is not None:
                err.path.extendleft(reversed(prefix))
                raise ConfigError(_one_line(err))

    validator = _Validator(schema)
    err = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if err is not None:
        raise ConfigError(_one_line(err))
    model_spec(config, config["model"])
    config["lessons"] = lesson_ids(config["lessons"])
    return config


def lesson_ids(wanted) -> list[str]:
    """`all` -> every lesson in the course's order; a list -> the same ids, checked, in the course's order."""
    known = list(registry())
    if wanted == "all":
        return known
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ConfigError(f"lessons: {', '.join(map(quote, unknown))} not known; known lessons: {', '.join(known)}")
    return [k for k in known if k in wanted]


def model_spec(config: dict, name: str) -> dict:
    """The models-table entry for `name`, with a one-line error when it is unknown."""
    models = config.get("models") or {}
    if name not in models:
        known = ", ".join(sorted(models)) or "(none)"
        raise ConfigError(f"model: {quote(name)} is not in the models table; known models: {known}")
    return models[name]
