"""The package's wings (STYLE §16): each imports only the wings below it, and only at the top of a module.

run < gguf < model < timing < lessons < report < the top (config, cli). `bytesup.errors` and the
package's own __init__ sit below every wing.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "bytesup"
FLOORS = ["errors", "run", "gguf", "model", "timing", "lessons", "report", "config", "cli"]


def floor_of(module: str) -> int:
    """The floor of a dotted module name inside bytesup ('bytesup' itself is the ground)."""
    parts = module.split(".")
    if parts[0] != "bytesup":
        raise ValueError(module)
    if len(parts) == 1:
        return -1
    return FLOORS.index(parts[1])


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, path


def bytesup_imports(tree: ast.AST):
    """(node, imported module) for every import of a bytesup module in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bytesup":
            if node.module == "bytesup":
                for alias in node.names:
                    yield node, f"bytesup.{alias.name}" if alias.name != "__version__" else "bytesup"
            else:
                yield node, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "bytesup":
                    yield node, alias.name


def test_every_module_is_in_a_wing():
    for name, _ in modules():
        if name != "bytesup":
            floor_of(name)  # raises for a module outside the listed wings


@pytest.mark.parametrize("name,path", list(modules()), ids=lambda v: v if isinstance(v, str) else "")
def test_imports_point_down_and_sit_at_the_top(name, path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(n) for n in tree.body}
    here = floor_of(name)
    for node, target in bytesup_imports(tree):
        assert id(node) in top_level, f"{name}:{node.lineno} imports {target} inside a function"
        assert floor_of(target) <= here, f"{name} (floor {FLOORS[here]}) imports {target} above it"


def test_every_exception_of_the_package_is_a_bytesup_error():
    import importlib
    import inspect

    from bytesup.errors import BytesupError

    seen = []
    for name, _ in modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name:
                seen.append(cls)
                assert issubclass(cls, BytesupError), f"{name}.{cls.__name__} does not derive from BytesupError"
    assert len(seen) >= 30  # every wing has its own


def test_a_bytesup_error_prints_its_message_as_written_even_as_a_key_error():
    from bytesup.gguf.file import TensorNotFoundError
    from bytesup.model.tokens import TokenError

    assert str(TokenError("' cat' is not a single entry")) == "' cat' is not a single entry"
    assert str(TensorNotFoundError("no tensor 'x'")) == "no tensor 'x'"


MAX_LINES = 600  # about the most one module holds before it is split by concern (issue 23)


def test_no_module_is_over_the_size_where_it_is_split_by_concern():
    big = {name: n for name, path in modules() if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"
