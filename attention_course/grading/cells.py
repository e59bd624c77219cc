"""The text of a notebook cell: the course's block markers, and which names a cell binds and reads.

Shared by the release (starter and hidden-test blocks), the trust rules (which names the judge may take from a
kernel) and the judge (which names a test cell needs). Plain functions of a cell's source, nothing else.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re

BEGIN_STARTER = "### BEGIN STARTER"
END_STARTER = "### END STARTER"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
_SOLUTION_MARKER = re.compile(r"(?m)^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?")


def cell_source(cell) -> str:
    """A notebook cell's source as one text (nbformat stores it as a string or a list of lines)."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def without_solution_markers(source: str) -> str:
    """``source`` with nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines taken out, their content kept."""
    return _SOLUTION_MARKER.sub("", source)


def replace_blocks(source: str, begin: str, end: str, keep) -> str:
    """Replace every ``begin``/``end`` block of ``source``.

    ``keep(lines, indent)`` receives the lines strictly inside a block and the
    indentation of its ``begin`` line, and returns the lines to put in its
    place. Raises ``ValueError`` on an unclosed or nested block.
    """
    out, block, indent = [], None, ""
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped.startswith(begin):
            if block is not None:
                raise ValueError(f"nested '{begin}' block")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped.startswith(end):
            if block is None:
                raise ValueError(f"'{end}' without '{begin}'")
            out.extend(keep(block, indent))
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"'{begin}' block is not closed")
    return "\n".join(out)


def uncomment(lines: list[str], indent: str) -> list[str]:
    """Remove one level of ``# `` from each commented line of a starter block."""
    result = []
    for line in lines:
        body = line[len(indent):] if line.startswith(indent) else line.lstrip()
        if body.startswith("# "):
            body = body[2:]
        elif body.startswith("#"):
            body = body[1:]
        result.append(indent + body if body else "")
    return result


def quiet_docstring(source: str) -> str:
    """``source`` with its opening docstring turned into comments when it is the cell's last statement."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return source
    last = body[-1] if body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Constant) and isinstance(last.value.value, str)
            and last is body[0]):
        return source
    lines = source.split("\n")
    text = [f"# {line}".rstrip() for line in last.value.value.strip().split("\n")]
    return "\n".join(lines[: last.lineno - 1] + text + lines[last.end_lineno:])


@functools.lru_cache(maxsize=1024)  # a class's notebooks share their test cells: analyse each once
def free_names(source: str) -> tuple[str, ...]:
    """Names a cell reads but never binds itself (in order of first appearance), without built-ins."""
    tree = ast.parse(source)
    bound, read = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                if node.id not in read:
                    read.append(node.id)
            else:
                bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return tuple(n for n in read if n not in bound and not hasattr(builtins, n))


@functools.lru_cache(maxsize=4096)  # asked of the same master cells for every hand-in: analyse each once
def bound_names(source: str) -> frozenset[str]:
    """Every name a cell binds anywhere (assignments, definitions, imports, loop variables)."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return frozenset()
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(bound)


def global_names(source: str) -> frozenset[str]:
    """The names a cell binds at its top level (the notebook's globals it makes), not those bound inside its
    functions, classes, lambdas or comprehensions."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return frozenset()
    bound, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return frozenset(bound)


@functools.lru_cache(maxsize=4096)
def signatures(source: str) -> dict[str, tuple[str, ...]]:
    """The parameters of each function and class a cell defines at its top level, in call order (a class: its
    ``__init__``'s; a method ``Class.name``'s too; ``self`` left out): the names the course's notes use."""
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return {}

    def params(fn, method: bool) -> tuple[str, ...]:
        a = fn.args
        names = [p.arg for p in [*a.posonlyargs, *a.args]][1 if method else 0:] + [p.arg for p in a.kwonlyargs]
        return tuple(names)

    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = params(node, False)
        elif isinstance(node, ast.ClassDef):
            found[node.name] = ()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{item.name}"] = params(item, True)
                    if item.name == "__init__":
                        found[node.name] = params(item, True)
    return found


@functools.lru_cache(maxsize=1024)
def hidden_lines(code: str) -> frozenset[int]:
    """The line numbers (from 1) of ``code`` inside its hidden-test blocks, markers included."""
    lines, inside = set(), False
    for number, line in enumerate(code.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith(BEGIN_HIDDEN):
            inside = True
        if inside:
            lines.add(number)
        if stripped.startswith(END_HIDDEN):
            inside = False
    return frozenset(lines)


#: The file name a test cell's code runs under in the judge (its frames tell a failure's line).
TEST_FILE = "<test>"


def test_line(frames) -> int | None:
    """The innermost line of a test cell's own code among ``frames`` (a traceback or a frame, outermost first or a
    frame's chain from innermost), or None."""
    found = None
    for frame, line in frames:
        if frame.f_code.co_filename == TEST_FILE:
            found = line
    return found


@functools.lru_cache(maxsize=1024)
def compiled(cell_source: str):
    """A cell as plain Python, compiled (cached: the same test cells run for every student)."""
    code = python_source(cell_source)
    return code, compile(code, TEST_FILE, "exec")


def python_source(cell_source: str) -> str:
    """IPython syntax (magics, ``!``) turned into plain Python, as the kernel would see it."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(cell_source)


def check_summary(source: str, limit: int | None = None) -> str:
    """What a test cell checks, in one line: the first line of its opening docstring, without the quotes ("" if it
    opens with none); cut at ``limit`` characters with an ellipsis."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    quote = first[:3]
    if quote not in ('"""', "'" * 3):
        return ""
    text = first[3:].split(quote)[0].strip()
    return text if limit is None or len(text) <= limit else text[:limit - 1].rstrip() + "…"
