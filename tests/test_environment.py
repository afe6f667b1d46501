"""The conda environments (environment.yml, the rules' workflow/envs/bytesup.yaml) and
pyproject.toml list the same dependencies."""

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _split(requirement: str) -> tuple[str, str]:
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement).groups()
    return re.sub(r"[-_.]+", "-", name).lower(), spec.replace(" ", "")


@pytest.mark.parametrize("env_file, editable", [("environment.yml", "."), ("workflow/envs/bytesup.yaml", "../..")])
def test_conda_environments_agree_with_pyproject(env_file, editable):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(_split(r) for r in project["dependencies"])
    env = yaml.safe_load((ROOT / env_file).read_text())
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
    assert any(isinstance(d, dict) and f"--editable {editable}" in d["pip"] for d in env["dependencies"])
