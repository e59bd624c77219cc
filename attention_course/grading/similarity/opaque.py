"""Code the similarity report cannot read, named: a hand-in that runs code computed as it runs (``exec`` of a
decoded string, ``marshal.loads``, a module imported by a computed name...) holds code no parser sees, which could
hide a copy; the report lists each such cell as *opaque*, with what it saw, for the instructor to look at. Read from
the parsed code, never run. :func:`read` parses a hand-in's sources (:func:`.read.parse_code`, whose
parse the normaliser reuses) and names in each what it cannot read past:

* any use (a call, ``run = exec``, ``map(exec, ...)``) of what runs code or a code object: ``exec``, ``eval``,
  ``compile`` (of a constant string they are read in, and not opaque), ``marshal``, ``pickle``, ``types.CodeType``
  and ``FunctionType``, ``code``, ``codeop``, ``ctypes.pythonapi``, IPython's ``run_cell``... (:data:`RUNS`);
* a module or file named by a computed string (``__import__``, ``importlib.import_module``, ``runpy``, ``%run
  $name``), or one neither handed in (a ``.py`` file, a ``%%writefile``) nor installed (:data:`NAMED`);
* what reaches those past a name: ``getattr`` of a computed name on ``builtins`` or those modules, a computed key of
  ``globals()``, ``sys.modules`` or ``__builtins__``, those modules as values, ``__code__``, ``__globals__``,
  ``__subclasses__``, a frame's ``f_builtins`` (:data:`SPECIAL`);
* another program given computed arguments or running Python (``subprocess``, ``os.system``, ``!python``,
  ``%%script python``: :data:`SHELL`); an unpickling load (``allow_pickle=True``, ``weights_only=False``);
* files (:func:`.read.file_constructs`): compiled code (``.pyc``, ``.so``), a ``.py`` file not read (not UTF-8, another
  source encoding, over the size read). ``import_module("numpy")``, ``np.load``, ``getattr(layer, name)`` are not.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import os
import posixpath
import re
import sys
import sysconfig

from .read import parse_code

_BUILTINS = frozenset(dir(builtins))
_IPY = "get_ipython()"
#: Whatever they are given, these run code the report cannot read (a call, or the function used as a value).
RUNS = frozenset({
    "builtins.exec", "builtins.eval", "builtins.compile", "marshal.loads", "marshal.load", "pickle.loads",
    "pickle.load", "pickle.Unpickler", "_pickle.loads", "_pickle.load", "_pickle.Unpickler", "dill.loads",
    "dill.load", "cloudpickle.loads", "cloudpickle.load", "shelve.open", "types.CodeType", "types.FunctionType",
    "types.LambdaType", "code.InteractiveInterpreter", "code.InteractiveConsole", "code.interact",
    "code.compile_command", "codeop.compile_command", "codeop.Compile", "codeop.CommandCompiler", "ctypes.pythonapi",
    "importlib.machinery.SourcelessFileLoader", "importlib.machinery.ExtensionFileLoader",
    "importlib.util.spec_from_loader", "zipimport.zipimporter", "doctest.testmod", "doctest.testfile",
    "doctest.run_docstring_examples", "doctest.DocTestRunner", *(f"{_IPY}.{m}" for m in (
        "run_cell", "run_cell_async", "ex", "ev", "run_code", "runcode", "run_ast_nodes", "safe_execfile",
        "safe_execfile_ipy", "safe_run_module"))})
#: These run what an argument names (position, keyword, what it is): opaque when it is computed or names a module
#: or file the report does not read.
NAMED = {"builtins.__import__": (0, "name", "module"), "importlib.import_module": (0, "name", "module"),
         "importlib.__import__": (0, "name", "module"), "runpy.run_module": (0, "mod_name", "module"),
         "runpy.run_path": (0, "path_name", "file"), "importlib.util.spec_from_file_location": (1, "location", "file"),
         "importlib.machinery.SourceFileLoader": (1, "path", "file"),
         **{f"{m}.{f}": (0, "stmt" if m == "timeit" else "cmd" if m != "pdb" else "statement", "code") for m, fs in (
             ("timeit", ("timeit", "repeat", "Timer")), ("cProfile", ("run", "runctx")), ("profile", ("run", "runctx")),
             ("pdb", ("run", "runeval", "runctx"))) for f in fs}}
#: These run another program: opaque when their arguments are computed or run Python.
SHELL = frozenset({
    *(f"subprocess.{f}" for f in ("run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput")),
    *(f"os.{f}{v}" for f in ("exec", "spawn") for v in ("v", "ve", "l", "le", "lp", "lpe", "vp", "vpe")),
    "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp", "pty.spawn", "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell", *(f"{_IPY}.{f}" for f in ("system", "getoutput", "system_raw", "system_piped"))})
MAGICS = frozenset(f"{_IPY}.{m}" for m in ("run_line_magic", "run_cell_magic", "magic"))
#: Modules that are opaque as values (passed on, put in a container): what reads their functions is not seen.
MODULES = frozenset({"builtins", "pickle", "_pickle", "marshal", "dill", "cloudpickle", "importlib", "importlib.util",
                     "importlib.machinery", "types", "code", "codeop", "runpy", "ctypes", "subprocess", "zipimport"})
#: Attributes that reach code objects, globals or builtins past any name the report can follow.
SPECIAL = frozenset({"__code__", "co_code", "__globals__", "__builtins__", "__subclasses__", "__loader__",
                     "f_globals", "f_builtins", "f_locals", "gi_code", "cr_code", "func_globals"})
#: Namespaces (name -> object): a lookup with a computed key, or going through their values, is opaque.
NAMESPACES = frozenset({"globals()", "sys.modules", "builtins", f"{_IPY}.user_ns", f"{_IPY}.user_global_ns"})
_LOOKUPS = frozenset({"get", "pop", "setdefault", "__getitem__"})
_WALKS = frozenset({"values", "items", "popitem"})
_RUNNERS = RUNS | NAMED.keys() | SHELL | MAGICS
_WATCHED = _RUNNERS | MODULES | NAMESPACES | {_IPY, "builtins.getattr"}
_ROOTS = frozenset(p.split(".")[0] for p in (*RUNS, *NAMED, *SHELL, *MAGICS, *MODULES, *NAMESPACES, "IPython", "get_ipython"))
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_EXEC = frozenset({"builtins.exec", "builtins.eval", "builtins.compile", f"{_IPY}.run_cell", f"{_IPY}.ex", f"{_IPY}.ev"})
_UNPICKLING = (("allow_pickle", True), ("weights_only", False))
_SCRIPTS = frozenset({"script", "bash", "sh", "system", "sx", "sc", "pypy", "python2"})
_WRITEFILE = re.compile(r"\A\s*%%(?:writefile|file)\b[^\n]*?(\S+)[ \t]*(?:\n|\Z)")


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _text(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _constant(node) -> bool:
    """A constant string, or a list or tuple of them (a command line)."""
    return all(_text(e) is not None for e in (node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]))


@functools.lru_cache(maxsize=4096)
def installed(module: str) -> bool:
    """Whether a top-level module is in the standard library, the environment's site-packages or the course's package,
    as a kernel has them (looked up, never imported; not what the folder the report runs in happens to hold)."""
    if not module.isidentifier() or module in sys.stdlib_module_names or module in sys.builtin_module_names:
        return module.isidentifier()
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    roots = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    roots.add(os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))  # attention_course
    where = [spec.origin] if spec is not None and spec.origin else list(getattr(spec, "submodule_search_locations", None) or [])
    return any(os.path.commonpath([os.path.realpath(w), root]) == root for w in where for root in roots)


def _argument(call, position: int, keyword: str):
    if len(call.args) > position and not isinstance(call.args[position], ast.Starred):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


class _Hand:
    """One hand-in's parsed sources: the names it binds (imports, aliases, top-level definitions) and the
    constructs of each source."""

    def __init__(self, modules: set, files: set):
        self.modules, self.files = modules, files
        self.aliases: dict[str, list] = {}  # name -> import paths (str) or assigned values (nodes)
        self.defined: set[str] = set()  # top-level functions and classes (shadow a builtin of the same name)
        self.deleted: set[str] = set()  # names a ``del`` unbinds somewhere
        self.stars: list[str] = []  # modules of ``from m import *``
        self.memo: dict[int, str | None] = {}  # id of a node -> its path
        self.names: dict[str, str | None] = {}  # a name -> its path

    # ---- what a name or an expression is --------------------------------------------------------------------

    def bind(self, node) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                self.aliases.setdefault(a.asname or a.name.split(".")[0], []).append(
                    a.name if a.asname else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if a.name == "*":
                    self.stars.append(node.module)
                else:
                    self.aliases.setdefault(a.asname or a.name, []).append(f"{node.module}.{a.name}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    self.aliases.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Del):
            self.deleted.add(node.id)

    def name(self, name: str) -> str | None:
        """What a name is (None: nothing watched): an import's path, what it is assigned (the first watched), else
        a builtin unless a top-level definition that is never deleted shadows it (an assignment never does: it may
        not run)."""
        if name in self.names:
            return self.names[name]
        self.names[name] = None  # while it resolves (a = b; b = a)
        defs = self.aliases.get(name, [])
        found = [d if isinstance(d, str) else self.path(d) for d in defs]
        if any(isinstance(d, str) for d in defs) or any(found):
            p = next((p for p in found if p and p in _WATCHED), next((p for p in found if p), None))
        elif name in self.defined and name not in self.deleted:
            p = None
        else:
            p = next((f"{m}.{name}" for m in self.stars if f"{m}.{name}" in _WATCHED), None) \
                or {"__builtins__": "builtins", "get_ipython": name}.get(name) \
                or (f"builtins.{name}" if name in _BUILTINS else None)
        self.names[name] = p if p and p.split(".")[0] in _ROOTS else None
        return self.names[name]

    def path(self, node) -> str | None:
        """What an expression is, as a dotted path (``pickle.loads``, ``builtins.exec``, ``get_ipython().ex``), or
        None for anything the report does not watch (``np.sum``)."""
        spine = []
        while id(node) not in self.memo and isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            spine.append(node)
            node = node.func if isinstance(node, ast.Call) else node.value
        p = self.memo[id(node)] if id(node) in self.memo else self.name(node.id) if isinstance(node, ast.Name) else None
        for outer in reversed(spine):
            p = self._step(p, outer) if p is not None else None
            self.memo[id(outer)] = p = p if p is None or p.split(".")[0] in _ROOTS else None
        return p

    def _step(self, p: str, node) -> str | None:
        if isinstance(node, ast.Attribute):
            return f"{p}.{node.attr}"
        if isinstance(node, ast.Subscript):
            return self._lookup(p, _text(node.slice))
        args = node.args
        if p in ("builtins.__import__", "importlib.import_module") and args and _text(args[0]):
            return _text(args[0]).split(".")[0] if p == "builtins.__import__" else _text(args[0])
        if p == "builtins.getattr" and len(args) >= 2 and _text(args[1]):
            base = self.path(args[0])
            return f"{base}.{_text(args[1])}" if base else None
        if p in ("get_ipython", "IPython.get_ipython"):
            return _IPY
        if p in ("builtins.globals", "builtins.locals") or (p == "builtins.vars" and not args):
            return "globals()"
        if p == "builtins.vars" and len(args) == 1:
            return "builtins" if self.path(args[0]) == "builtins" else None
        if p.endswith((".get", ".__getitem__")) and _namespace(p.rsplit(".", 1)[0]) and args:
            return self._lookup(p.rsplit(".", 1)[0], _text(args[0]))
        return None

    def _lookup(self, namespace: str, key: str | None) -> str | None:
        if key is None or not _namespace(namespace):
            return None
        if namespace == "sys.modules":
            return key
        return f"builtins.{key}" if namespace == "builtins" else self.name(key)  # globals()["pickle"]: the name

    # ---- what is opaque --------------------------------------------------------------------------------------

    def known_module(self, module: str) -> bool:
        return module.split(".")[0] in self.modules or installed(module.split(".")[0])

    def known_file(self, name: str) -> bool:
        return posixpath.normpath(name.strip("'\"")) in self.files

    def call(self, node, p: str) -> str | None:
        label = _label(p)
        if p in RUNS:
            computed = p in _EXEC and node.args and _text(node.args[0]) is None
            return f"{label}({'<computed>' if computed else '...'})"
        if p in NAMED:
            position, keyword, kind = NAMED[p]
            arg = _argument(node, position, keyword)
            text = _text(arg)
            if arg is None or (kind == "code" and (isinstance(arg, ast.Lambda) or (
                    isinstance(arg, ast.Name) and arg.id in self.defined))):
                return None
            if text is None:
                return f"{label}(<computed>)"
            if kind == "code":  # a statement it runs: what it defines is not read, what it calls is looked at
                return _code_string(self, label, text)
            known = self.known_module(text) if kind == "module" else self.known_file(text)
            return None if known else f"{label}({_short(text)!r}): neither handed in nor installed"
        if p == "builtins.getattr" and node.args:
            base = self.path(node.args[0])
            if base and (base in MODULES or base == _IPY or _namespace(base)) \
                    and (len(node.args) < 2 or _text(node.args[1]) is None):
                return f"getattr({_label(base)}, <computed>)"
        if p in SHELL:
            args = [*node.args, *(k.value for k in node.keywords if k.arg in ("args", "cmd", "command"))]
            if not all(_constant(a) for a in args):
                return f"{label}(<computed>)"
            if any(re.search("python|pypy", ast.unparse(a), re.I) for a in args):
                return f"{label}: runs Python"
        if p in MAGICS:
            return self.magic(node, p)
        base, _, last = p.rpartition(".")
        if last == "__getattribute__" and (base in MODULES or _namespace(base)):
            return f"{label}(...)"
        if last in _LOOKUPS and _namespace(base) and (not node.args or _text(node.args[0]) is None):
            return f"{label}(<computed>)"
        return f"{label}()" if last in _WALKS and _namespace(base) else None

    def magic(self, node, p: str) -> str | None:
        """A magic or shell escape (``get_ipython().run_line_magic(...)``...) that runs what the report cannot read:
        given computed text, ``%run`` of a file or module not handed in, a shell or script that runs Python."""
        texts = [_text(a) for a in node.args]
        if any(t is None for t in texts) or node.keywords:
            return f"{_label(p)}(<computed>)"
        if p.endswith(".magic"):
            texts = (texts[0].split(None, 1) + [""])[:2] if texts else []
        name, rest, body = (texts + ["", "", ""])[:3]
        if name == "run":
            words = rest.split()
            if "$" in rest or "{" in rest or "-m" in words[:-1]:
                module = words[words.index("-m") + 1] if "-m" in words[:-1] else "$"
                return None if self.known_module(module) else f"%run {_short(rest)}: " + (
                    "a computed name" if "$" in rest or "{" in rest else "neither handed in nor installed")
            target = next((w for w in words if not w.startswith("-")), None)
            return None if target is None or self.known_file(target) else f"%run {_short(target)}: not a file it reads"
        if name in _SCRIPTS and re.search(r"python|pypy", f"{name} {rest} {body}", re.I):
            return f"%{'%' if body else ''}{name}: runs Python"
        return None

    def constructs(self, nodes: list) -> set[str]:
        """The opaque constructs among ``nodes`` (every node of one source), once every source's names are bound."""
        called, based, aliased = set(), set(), set()
        for node in nodes:
            if isinstance(node, ast.Call):
                called.add(id(node.func))
                p = self.path(node.func)
                if p == "builtins.getattr" and node.args:
                    based.add(id(node.args[0]))
                if p in ("builtins.isinstance", "builtins.issubclass") and len(node.args) == 2:
                    aliased.update(id(n) for n in ast.walk(node.args[1]))
            elif isinstance(node, (ast.Attribute, ast.Subscript)):
                based.add(id(node.value))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                aliased.add(id(node.value))
        found = set()
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if node.module and not node.level else []
                found.update(f"import {_short(m)}: neither handed in nor installed" for m in modules
                             if not self.known_module(m))
            elif isinstance(node, ast.Call):
                p = self.path(node.func)
                found.add(self.call(node, p) if p else None)
                found.update(f"{_short(ast.unparse(node.func), 40)}({k.arg}={k.value.value})" for k in node.keywords
                             if isinstance(k.value, ast.Constant) and (k.arg, k.value.value) in _UNPICKLING)
            if isinstance(node, ast.Attribute) and node.attr in SPECIAL:
                found.add(f"the attribute {node.attr}")
            if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) \
                    or isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
                continue
            p = self.path(node)
            if p is None:
                base = self.path(node.value) if isinstance(node, ast.Subscript) else None
                if _namespace(base):
                    found.add(f"{_label(base)}[<computed>]")
            elif p.startswith("builtins.") and p.count(".") == 1 and p[9:] not in _BUILTINS:
                found.add(f"{p} (not a builtin)")
            elif id(node) in aliased:
                continue
            elif p in _RUNNERS and id(node) not in called:
                found.add(_label(p) + ("" if id(node) in based else " as a value"))  # ctypes.pythonapi.PyRun...
            elif (p in MODULES or p == _IPY) and id(node) not in based:
                found.add(f"the module {p} as a value" if p != _IPY else f"{p} as a value")
        found.discard(None)
        return found


def _code_string(hand: _Hand, label: str, text: str) -> str | None:
    try:
        nodes = list(ast.walk(ast.parse(text)))
    except (SyntaxError, ValueError, RecursionError):
        return None
    if any(isinstance(n, (*_DEFINITIONS, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom,
                          ast.Global, ast.NamedExpr)) for n in nodes):
        return f"{label}({_short(text, 30)!r}): defines what it does not read"
    inner = hand.constructs(nodes)
    return f"{label}: " + ", ".join(sorted(inner)) if inner else None


def _namespace(p: str | None) -> bool:
    return p in NAMESPACES or (p is not None and p.endswith(".__dict__"))


def _label(p: str) -> str:
    return p.removeprefix("builtins.")

def read(sources: list[str], files: dict, release_files: dict) -> tuple[list, list[set]]:
    """Each source parsed (:func:`.read.parse_code`, for the normaliser) and its opaque constructs.
    ``files``: the hand-in's ``.py`` files the report reads (relative path -> text), ``release_files`` the
    release's: the modules and files the hand-in's code may import or run."""
    written = [m.group(1) for s in sources if (m := _WRITEFILE.match(s))]
    paths = {posixpath.normpath(p) for p in [*files, *release_files, *written]}
    modules = {p.split("/")[0].removesuffix(".py") for p in paths if p.endswith(".py")}
    hand = _Hand(modules, paths | {posixpath.basename(p) for p in paths})
    parsed, parts = [], []
    for source in sources:
        dropped = []
        statements = parse_code(source, dropped)
        parsed.append(statements)
        nodes = [n for root in [*(statements or []), *dropped] for n in ast.walk(root)]
        for node in nodes:
            hand.bind(node)
        hand.defined.update(s.name for s in statements or [] if isinstance(s, _DEFINITIONS))
        parts.append(nodes)
    found = []
    for nodes in parts:
        try:
            found.append(hand.constructs(nodes))
        except RecursionError:
            found.append({"code nested too deeply to read"})
    return parsed, found


#: The most of an opaque cell's code the page shows.
EXCERPT = 600


def opaque_entries(places: list, sources: list[str], constructs: list[set], unread: dict) -> list[dict]:
    """One hand-in's opaque cells and files as the JSON lists them (``file``, ``cell``: its place in the notebook's
    list of cells from 0, None for a ``.py`` file; ``cell_id``; ``constructs``), with an ``excerpt`` of the code for
    the page. ``places``: (notebook or file, cell, cell id) of each source; ``unread``: file -> why it is not read."""
    out = {}
    for (file, cell, cell_id), source, found in zip(places, sources, constructs):
        if found:
            out[file, cell] = {"file": file, "cell": cell, "cell_id": cell_id, "constructs": sorted(found),
                               "excerpt": _short(source, EXCERPT)}
    for rel, why in unread.items():
        entry = out.setdefault((rel, None), {"file": rel, "cell": None, "cell_id": None, "constructs": [],
                                             "excerpt": ""})
        entry["constructs"] = sorted({*entry["constructs"], why})
    return sorted(out.values(), key=lambda e: (e["file"], -1 if e["cell"] is None else e["cell"]))
