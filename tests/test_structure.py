"""The package's shape (issues 26 and 62): sub-packages by job, each saying its job and exporting its public names;
no module over 400 lines; no private name used across modules; no import cycle, counting the imports inside
functions; nothing patched on import. Read from the source with ``ast``: nothing is imported or run, but for the
checks that say so."""

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


def test_no_module_is_over_400_lines():
    lines = {name_of(p): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES}
    long = {name: n for name, n in lines.items() if n > 400}
    assert not long, f"modules over 400 lines (usually two jobs): {long}"


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


#: The imports that stay inside a function, each with its reason: a heavy or optional dependency that most uses of
#: the module never need. Any other import inside a function is a cycle hidden from this test, or an import that
#: belongs at the top of the file.
LATE_IMPORTS = {
    "distributed": "Dask, only for grading on a cluster (the course command without --scheduler never loads it)",
    "dask": "Dask, only for grading on a cluster",
    "copydetect": "the similarity report's fingerprints, only when a report is written",
    "matplotlib": "plots (the report, the solutions' pages, a notebook's figures): seconds to import",
    "seaborn": "the report's and a notebook's heat maps, with matplotlib",
    "torch": "PyTorch, seconds to import, for the few paths that handle tensors",
    "numpy": "arrays on the wire, only when a value is one; the similarity report's fingerprints, only when one is "
             "written (the course command loads no NumPy, whose thread pool would keep it from forking its grading "
             "processes, run.worker.worker_context)",
    "IPython": "a notebook's display and IPython's own cell syntax: present in a kernel, not where the package is "
               "imported without one",
    "ipykernel": "the kernel itself, started only in a forked child of the fork server",
    "pyseccomp": "the seccomp filter's library, loaded once where a sandbox is set up (it may be missing: said so)",
    "alembic": "the gradebook schema's version, read from nbgrader's migration scripts only when a gradebook is made "
               "(70 ms of every nbgrader command's start otherwise)",
    "psutil": "whether a scratch folder's maker still runs, asked only when such a folder is found",
    "attention_course.checks": "the notebooks' checks, imported by the agent in the kernel only: the fork server "
                               "that imports the agent must not load the notebooks' package",
}
#: Imports inside functions allowed only in these modules: the fork server imports the judge and the agent, and
#: with them trust/ (and nothing else of the grader), and every kernel and judge is forked from it; the student
#: package imports nothing heavy when it is imported (test_the_fork_server_loads_no_notebook_machinery).
LIGHT = ("attention_course.grading.trust", "attention_course.nbgrader_settings")
LATE_IN_LIGHT = {
    "nbgrader": "nbgrader (a thousand modules and 65 MiB with SQLAlchemy, tornado and jupyter_server), in a rule or "
                "a Validate setting that needs it",
    "nbconvert": "nbconvert, where a rule or a Validate setting needs it",
    "nbformat": "nbformat's NotebookNode, where a rule makes cells or outputs",
    "nh3": "the HTML sanitiser, where a page's HTML is cleaned",
}


def late_imports(tree):
    """The import statements inside functions (and classes) of a module, at any depth."""
    top = set(map(id, tree.body))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top
            and not _guarded_at_top(n, tree)]


def _guarded_at_top(node, tree):
    """An import in a module-level ``try``/``if`` block (an optional dependency at import time) is a top import."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.Try, ast.If)) and any(n is node for n in ast.walk(stmt)):
            return not any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and
                           any(n is node for n in ast.walk(f)) for f in ast.walk(stmt))
    return False


def import_graph():
    names = {name_of(p) for p in MODULES}
    graph = {}
    for path, tree in MODULES.items():
        edges = set(imported(path, ast.walk(tree)))  # every import, at the top or inside a function
        graph[name_of(path)] = {e for e in edges if e in names and e != name_of(path)}
    # a package's __init__ importing its own modules is how packages work, not a cycle
    return {m: {e for e in es if not m.startswith(e + ".")} for m, es in graph.items()}


def test_no_import_cycle_counting_imports_inside_functions():
    graph = import_graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def strong(v):  # Tarjan: the strongly connected components of the import graph
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"


def test_an_import_inside_a_function_is_a_listed_heavy_dependency():
    found = []
    for path, tree in MODULES.items():
        for node in late_imports(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [resolve(path, node)]
            light = name_of(path).startswith(LIGHT)
            for mod in mods:
                listed = {**LATE_IMPORTS, **(LATE_IN_LIGHT if light else {})}
                if not any(mod == k or mod.startswith(k + ".") for k in listed):
                    found.append(f"{name_of(path)}:{node.lineno} imports {mod} inside a function")
    assert not found, ("imports inside functions that are not a heavy optional dependency (LATE_IMPORTS); put them at "
                       "the top of the file:\n" + "\n".join(found))


#: The grading package's layers, lowest first: a module imports only modules of its own layer or lower ones. Judging
#: and the kernels are one layer: the fork server forks the judge's process, and a kernel is reached through the
#: judge's connection. ARCHITECTURE.md's map lists them in this order.
LAYERS = [
    {"cells", "wire", "errors", "exports"},
    {"trust"},
    {"course"},
    {"judging", "kernels"},
    {"nbgrader_glue", "similarity", "deploy"},
    {"run"},
    {"service"},
    {"__main__"},
]


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["attention_course", "grading"] or len(parts) < 3:
        return None
    return next(i for i, names in enumerate(LAYERS) if parts[2] in names)


def test_each_module_imports_only_its_layer_and_those_below():
    found = []
    for module, targets in import_graph().items():
        mine = layer_of(module)
        for target in targets:
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} imports {target}")
    assert not found, "imports of a higher layer (tests/test_structure.py LAYERS):\n" + "\n".join(sorted(found))


def test_the_architecture_map_names_every_folder_and_module():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    where = text[text.index("## Where the code is"):]
    grading = PACKAGE / "grading"
    missing = []
    for path in sorted(grading.rglob("*.py")):
        if "__pycache__" in path.parts or path.name == "__init__.py":
            continue
        rel = path.relative_to(grading)
        folder = f"`grading/{rel.parent.as_posix()}/`" if rel.parent.parts else None
        if folder and folder not in where:
            missing.append(folder)
        if f"`{rel.name}`" not in where:
            missing.append(str(rel))
    assert not missing, f"ARCHITECTURE.md's map does not name: {sorted(set(missing))}"
    names = [n for layer in LAYERS for n in sorted(layer)]
    assert all(n in {p.stem for p in grading.glob("*.py")} | {p.name for p in subpackages()} for n in names), \
        "LAYERS names a module or package that is not there"


def subpackages():
    grading = PACKAGE / "grading"
    return sorted(p.parent for p in grading.glob("*/__init__.py"))


def test_each_sub_package_says_its_job_and_exports_its_public_names():
    import importlib

    for folder in subpackages():
        init = folder / "__init__.py"
        tree = MODULES[init]
        doc = ast.get_docstring(tree)
        assert doc and len(doc) > 80, f"{init} does not say the package's job"
        modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
        for module in modules:  # the docstring names every module of the package
            assert f":mod:`.{module}`" in doc or folder.name == "trust", f"{init}'s docstring does not name {module}"
        package = importlib.import_module(name_of(init))
        exported = getattr(package, "__all__", None)
        assert exported, f"{init} exports nothing"
        clash = sorted(set(exported) & modules)  # package.name would be a function, or the module once imported
        assert not clash, f"{name_of(init)} exports names of its own modules: {clash}"
        for name in exported:
            assert getattr(package, name, None) is not None, f"{name_of(init)} exports {name}, which does not exist"


def test_the_setup_lists_every_package():
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {name_of(p / "__init__.py") for p in subpackages()} | {"attention_course", "attention_course.grading"}
    assert listed == folders, f"pyproject.toml's packages differ from the folders: {listed ^ folders}"


def test_nothing_is_patched_on_import():
    """Importing any module of the package changes no other library: nbgrader's classes are the same objects with
    the same attributes before and after; the course's changes come from an explicit ``patches.install()``."""
    import subprocess
    import sys

    probe = """
import importlib, pkgutil, sys
import nbgrader.apps.baseapp, nbgrader.api, nbgrader.exchange.default.collect, nbgrader.exchange.default.release_assignment
import nbgrader.server_extensions.formgrader.apihandlers, nbgrader.converters.autograde, nbgrader.preprocessors
def state():
    out = {}
    for name, mod in list(sys.modules.items()):
        if name.startswith("nbgrader") and mod is not None:
            for k, v in list(vars(mod).items()):
                out[(name, k)] = id(v)
                if isinstance(v, type):
                    for a, b in list(vars(v).items()):
                        out[(name, k, a)] = id(b)
    return out
before = state()
import attention_course.grading as g
for m in pkgutil.walk_packages(g.__path__, g.__name__ + "."):
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
after = state()
changed = sorted(str(k) for k in before if k in after and before[k] != after[k])
print(chr(10).join(changed[:20]))
"""
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = ran.stdout
    assert not out.strip(), "importing the package changed nbgrader:\n" + out
    config = ast.parse((ROOT / "nbgrader_config.py").read_text(encoding="utf-8"))
    # nbgrader's configuration names the steps it configures (the glue, the judged execution, the trust filters, the
    # course's facts) and installs the patches; it imports nothing that runs a class (run/, service/, deploy/...)
    grading = {m for m in imported(ROOT / "nbgrader_config.py", ast.walk(config)) if m.startswith("attention_course.grading.")}
    allowed = ("attention_course.grading.nbgrader_glue", "attention_course.grading.judging.executor",
               "attention_course.grading.trust", "attention_course.grading.course", "attention_course.grading.errors")
    beyond = sorted(m for m in grading if not m.startswith(allowed))
    assert not beyond, f"nbgrader_config.py imports the grading code that runs a class: {beyond}"
    source = (ROOT / "nbgrader_config.py").read_text(encoding="utf-8")
    assert "patches.install()" in source, "nbgrader_config.py no longer installs the course's nbgrader changes"


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
            parts = dotted.split(".")
            obj = None
            for n in range(len(parts), 0, -1):  # the longest module of the grading package (or the student package)
                for prefix in ("attention_course.grading.", "attention_course."):
                    try:
                        obj = importlib.import_module(prefix + ".".join(parts[:n]))
                    except ModuleNotFoundError:
                        continue
                    break
                if obj is not None:
                    break
            assert obj is not None, f"the ledger names {dotted}, whose module does not exist ({rule})"
            attrs = parts[n:]
            for attr in attrs:
                assert hasattr(obj, attr), f"the ledger names {dotted}, which does not exist ({rule})"
                obj = getattr(obj, attr)
        for test_file, test in re.findall(r"(test_\w+\.py)::(\w+)", attacked):
            source = (ROOT / "tests" / test_file).read_text(encoding="utf-8")
            assert f"def {test}(" in source, f"the ledger names {test_file}::{test}, which does not exist"
        for test_file in re.findall(r"`?(test_\w+\.py)", attacked):
            assert (ROOT / "tests" / test_file).exists(), f"the ledger names {test_file}, which does not exist"


def test_the_maintainers_map_names_what_exists():
    """docs/maintaining.md's walk names modules (`folder/module.py`) and what they define (`function`,
    `Class.method`): each exists, so the map stays true as the code moves."""
    import importlib
    import re

    text = (ROOT / "docs" / "maintaining.md").read_text(encoding="utf-8")
    grading = PACKAGE / "grading"
    missing, named = [], 0
    for line in text.splitlines():
        # each `path.py`: `name`, `name` ... up to the next path or the end of the cell
        for path, names in re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`: ((?:`[\w.]+`(?:, | → )?)+)", line):
            module_file = grading / path
            if not module_file.is_file():
                if not (ROOT / path).is_file():
                    missing.append(path)
                continue
            module = importlib.import_module(name_of(module_file))
            for dotted in re.findall(r"`([\w.]+)`", names):
                obj = module
                for part in dotted.split("."):
                    obj = getattr(obj, part, None)
                named += 1
                if obj is None:
                    missing.append(f"{path}: {dotted}")
    assert named > 40, "the map lost its names"
    assert not missing, f"docs/maintaining.md names what does not exist: {missing}"


def test_library_code_raises_the_courses_errors_not_system_exit():
    """Only a command line turns a problem into an exit code (``__main__`` blocks, and the sandbox's launcher, a
    command of its own): library code raises :mod:`attention_course.grading.errors`' classes, which a service or a
    worker can catch without catching an exit."""
    found = []
    for path, tree in MODULES.items():
        entry = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                entry.update(map(id, ast.walk(node)))
            if isinstance(node, ast.FunctionDef) and node.name == "main" and name_of(path).endswith("kernels.sandbox"):
                entry.update(map(id, ast.walk(node)))
        for node in ast.walk(tree):
            if id(node) in entry:
                continue
            exits = (isinstance(node, ast.Raise) and node.exc is not None and "SystemExit" in ast.unparse(node.exc)) \
                or (isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "exit"))
            if exits:
                found.append(f"{name_of(path)}:{node.lineno}")
    assert not found, f"library code that exits instead of raising the course's errors: {found}"


def test_the_fork_server_loads_no_notebook_machinery():
    """The fork server imports the agent, the judge's process, the sandbox and the kernel's root before it forks
    every kernel and judge: none of nbgrader, nbconvert, nbformat, SQLAlchemy, tornado or the Jupyter server comes
    with them (a thousand modules and 65 MiB in every grading process's zygote, and in the pages each fork
    touches)."""
    import subprocess
    import sys

    probe = ("import sys\n"
             "import attention_course.grading.kernels.forkserver, attention_course.grading.judging.agent\n"
             "import attention_course.grading.judging.judgeproc, attention_course.grading.kernels.rootfs\n"
             "import attention_course.grading.kernels.sandbox\n"
             "heavy = ('nbgrader', 'nbconvert', 'nbformat', 'sqlalchemy', 'tornado', 'jupyter_server', 'nh3', 'jinja2')\n"
             "print(' '.join(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy})))")
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert not ran.stdout.split(), f"the fork server's modules load {ran.stdout.split()}"
    student = subprocess.run([sys.executable, "-c", "import sys, attention_course.nbgrader_settings; "
                              "print(' '.join(m for m in sys.modules if m.startswith('nbgrader')))"],
                             capture_output=True, text=True, cwd=ROOT, check=True)
    assert not student.stdout.split(), "importing the course's Validate settings loads nbgrader"
