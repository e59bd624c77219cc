"""The package's shape (issue 26): no module over 450 lines, no private name used across modules, and no import
cycle among the modules' top-level imports. Read from the source with ``ast``: nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attention_course"
MODULES = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def name_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` names."""
    if not node.level:
        return node.module or ""
    base = name_of(path).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported(path: Path, nodes):
    """The absolute names the import statements among ``nodes`` bring in: each module, and module.name."""
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            source = resolve(path, node)
            yield source
            yield from (f"{source}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def test_no_module_is_over_450_lines():
    lines = {name_of(p): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES}
    long = {name: n for name, n in lines.items() if n > 450}
    assert not long, f"modules over 450 lines (usually two jobs): {long}"


def test_no_private_name_is_used_across_modules():
    names = {name_of(p) for p in MODULES}
    found = []
    for path, tree in MODULES.items():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = resolve(path, node)
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    if target in names:
                        aliases[alias.asname or alias.name] = target
                    elif alias.name.startswith("_") and source in names and source != name_of(path) \
                            and not source.split(".")[-1].startswith("_"):
                        found.append(f"{name_of(path)} imports {source}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{name_of(path)} uses {aliases[node.value.id]}.{node.attr}")
    assert not found, "private names used outside their module:\n" + "\n".join(found)


def test_no_import_cycle_at_module_level():
    names = {name_of(p) for p in MODULES}
    graph = {}
    for path, tree in MODULES.items():
        edges = set(imported(path, tree.body))  # imports inside functions run later, when both modules exist
        graph[name_of(path)] = {e for e in edges if e in names and e != name_of(path)}

    def cycle_from(start, node, seen):
        for nxt in graph.get(node, ()):
            if nxt == start:
                return seen + [nxt]
            if nxt not in seen:
                found = cycle_from(start, nxt, seen + [nxt])
                if found:
                    return found
        return None

    # a package's __init__ importing its own modules is how packages work, not a cycle
    graph = {m: {e for e in es if not m.startswith(e + ".")} for m, es in graph.items()}
    cycles = [c for m in graph if (c := cycle_from(m, m, [m]))]
    assert not cycles, f"import cycles: {cycles[:3]}"


def test_the_package_leaves_the_developers_tools_outside():
    """Scaffolding (demo class, bench, synthetic hand-ins, loopback cluster) lives in tools/, which imports the
    package and is never imported by it; a student's kernel imports the helpers and nothing of the grader."""
    found = {f"{name_of(p)} imports {m}" for p, tree in MODULES.items() for m in imported(p, ast.walk(tree))
             if m.split(".")[0] == "tools"}
    assert not found, found
    assert not {"bench", "submissions"} & {p.stem for p in MODULES}, "scaffolding is back in the package"
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c", "import sys, attention_course; "
                             "print(' '.join(m for m in sys.modules if m.startswith('attention_course')))"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert sorted(loaded) == ["attention_course", "attention_course._notebook"], loaded


def test_an_assignment_is_its_folder(tmp_path):
    """Adding an assignment is adding source/<NN_name>/: nothing else lists the assignments."""
    from attention_course.grading.course import available

    for name in ("07_attention_backward", "01_self_attention", ".ipynb_checkpoints", "notes", "10_later"):
        (tmp_path / "source" / name).mkdir(parents=True)
    (tmp_path / "source" / "08_a_file.txt").write_text("")
    assert available(tmp_path) == ["01_self_attention", "07_attention_backward", "10_later"]
    assert available(tmp_path / "nowhere") == []
    # its catalogue of synthetic hand-ins is in the same folder, and every assignment of the course has one
    from attention_course.grading.course import ROOT, catalogue_path

    assert catalogue_path("07_attention_backward", tmp_path) == tmp_path / "source" / "07_attention_backward" / "catalogue.py"
    assert all(catalogue_path(a).is_file() for a in available(ROOT)), "an assignment without source/<id>/catalogue.py"


def test_the_trust_ledger_is_true():
    """Every function ARCHITECTURE.md's trust ledger names exists, and so does every test it names; the first
    table's rules are all in the trust package."""
    import importlib
    import re

    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    ledger = text[text.index("## Trust ledger"):text.index("## Where the code is")]
    rows = [line.split(" | ") for line in ledger.splitlines() if line.startswith("| ") and not line.startswith("| rule")]
    assert len(rows) >= 20, "the ledger lost its rows"
    first = ledger[:ledger.index("### What a hand-in's code may do")]
    for line in first.splitlines():
        if line.startswith("| ") and not line.startswith("| rule"):
            enforced = line.split(" | ")[1]
            assert re.match(r"`trust\.\w+`", enforced), f"a rule of the first table is enforced outside trust/: {line}"
    for rule, enforced, attacked in rows:
        for dotted in re.findall(r"`(\w+(?:\.\w+)+)`", enforced):
            module, *attrs = dotted.split(".")
            try:  # a module of the grading package, else of the student package (nbgrader_settings)
                obj = importlib.import_module(f"attention_course.grading.{module}")
            except ModuleNotFoundError:
                obj = importlib.import_module(f"attention_course.{module}")
            for attr in attrs:
                assert hasattr(obj, attr), f"the ledger names {dotted}, which does not exist ({rule})"
                obj = getattr(obj, attr)
        for test_file, test in re.findall(r"(test_\w+\.py)::(\w+)", attacked):
            source = (ROOT / "tests" / test_file).read_text(encoding="utf-8")
            assert f"def {test}(" in source, f"the ledger names {test_file}::{test}, which does not exist"
        for test_file in re.findall(r"`?(test_\w+\.py)", attacked):
            assert (ROOT / "tests" / test_file).exists(), f"the ledger names {test_file}, which does not exist"
