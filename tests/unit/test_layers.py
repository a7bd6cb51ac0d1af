"""The package's parts depend on each other one way: utils < opts < data < models < loss <
translate, preprocess, convert < train < bin (docs/architecture.md). Every import is read with
``ast``, those inside functions too, so that a lazy import cannot hide a cycle."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "onmt_lite"

# A part may import the parts of a lower rank. train is above translate, but reaches it through one
# narrow function only (validation decodes greedily), in NARROW.
RANK = {
    "utils": 0,
    "opts": 1,
    "data": 2,
    "models": 3,
    "loss": 4,
    "translate": 5,
    "preprocess": 5,
    "convert": 5,
    "train": 6,
    "serve": 6,
    "bin": 7,
}
NARROW = {("train", "translate"): {"onmt_lite.translate.validation"}}


def part_of(module):
    """``onmt_lite.data.vocab`` -> ``data``; None for the package itself."""
    names = module.split(".")
    return names[1] if len(names) > 1 else None


def module_name(path, package):
    names = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def is_module(name, package):
    where = package.parent / name.replace(".", "/")
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def imports(path, package):
    """The onmt_lite modules ``path`` imports (``from onmt_lite.data import copy`` counts as
    ``onmt_lite.data.copy`` when that is a module, else as ``onmt_lite.data``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("onmt_lite")}
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.add("<relative>")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("onmt_lite"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if is_module(candidate, package) else node.module)
    return found


def violations(package=PACKAGE):
    """Every import against the layers, as text."""
    wrong = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        source = part_of(module)
        for imported in sorted(imports(path, package)):
            if imported == "<relative>":
                wrong.append(f"{module}: a relative import (use absolute ones)")
                continue
            target = part_of(imported)
            if source is None or target is None or target == source:
                continue  # the package's __init__ (its lazy ``Translator``), or within one part
            door = NARROW.get((source, target))
            if door is not None and imported not in door:
                wrong.append(f"{module} imports {imported}, not through {sorted(door)}")
            elif door is None and RANK[target] >= RANK[source]:
                wrong.append(f"{module} ({source}) imports {imported} ({target})")
    return wrong


def test_every_part_has_a_rank():
    parts = {part_of(module_name(p, PACKAGE)) for p in PACKAGE.rglob("*.py")} - {None}
    assert parts <= set(RANK), (
        f"place the new part(s) {sorted(parts - set(RANK))} in RANK and the architecture page"
    )


def test_imports_run_one_way_with_no_cycle():
    wrong = violations()
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_translate_imports_nothing_from_train():
    assert not [line for line in violations() if "(translate) imports" in line]
    assert RANK["translate"] < RANK["train"] and ("translate", "train") not in NARROW


@pytest.mark.parametrize(
    "source,target,line",
    [
        ("models", "train", "from onmt_lite.train import anything"),
        ("translate", "train", "from onmt_lite.train.checkpoint import load"),
        ("data", "models", "import onmt_lite.models.model"),
        ("train", "translate", "from onmt_lite.translate.translator import Translator"),
    ],
)
def test_the_check_sees_an_import_against_the_layers_even_inside_a_function(
    source, target, line, tmp_path
):
    package = tmp_path / "onmt_lite"
    for part in (source, target):
        (package / part).mkdir(parents=True, exist_ok=True)
        (package / part / "__init__.py").write_text("", encoding="utf-8")
    (package / target / "translator.py").write_text("", encoding="utf-8")
    (package / source / "new_module.py").write_text(f"def f():\n    {line}\n", encoding="utf-8")
    assert (
        len(violations(package)) == 1 and f"onmt_lite.{source}.new_module" in violations(package)[0]
    )
