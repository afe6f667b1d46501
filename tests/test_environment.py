"""environment.yml (conda) and pyproject.toml list the same dependencies."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _split(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement).groups()
    return re.sub(r"[-_.]+", "-", name).lower(), spec.replace(" ", "")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(_split(r) for r in project["dependencies"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed = {}
    for dep in env["dependencies"]:
        items = dep["pip"] if isinstance(dep, dict) else [dep]
        for item in items:
            if item.startswith("-") or item in ("pip",):
                continue
            name, spec = _split(item)
            if name != "python":
                listed[name] = spec
    assert listed == wanted
    assert any(isinstance(d, dict) and "--editable ." in d["pip"] for d in env["dependencies"])
