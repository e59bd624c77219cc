"""What the similarity report reads of a hand-in's code, and the tokens it fingerprints (:mod:`.normal`
normalises in between). Parsed and tokenised, never run.

* :func:`parse_code`: a cell's or a file's statements, with the code that cell magics (``%%writefile``,
  ``%%capture``, ``%%time``...), line magics, and ``exec`` / ``eval`` / ``compile`` / ``run_cell`` of a constant
  string (``exec(compile("...", ...))`` too) hold parsed in as statements of their own, ``eval`` of a constant
  string anywhere as its expression, and the magics and shell escapes that hold no code (``%run -i impl.py``,
  ``%matplotlib inline``, ``!pip ...``) left out (given to ``dropped``: :mod:`.opaque` looks at them);
* :func:`file_constructs`: why a handed-in file holds code that is not read (compiled code, a ``.py`` file in
  another encoding...), for :mod:`.opaque`;
* :func:`filtered`: copydetect's tokenised form of normalised code, from Python's own tokeniser.
"""

from __future__ import annotations

import ast
import builtins
import codecs
import io
import keyword
import re
import tokenize

from ..cells import python_source
from .forms import name_of

_MAGIC_CELL = re.compile(r"\A\s*%%(\w+)[^\n]*\n(?P<body>.*)\Z", re.S)
_IPYTHON = re.compile(r"(?m)^\s*[%!]|=\s*[%!]|\?\s*$")  # IPython syntax: magics, shell escapes (x = !ls), help
_HOLDS_CODE = re.compile(r"%|\b(exec|eval|compile|run_cell)\s*\(")
_COMPILED = (".pyc", ".pyo", ".so", ".pyd", ".dylib")
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_CODE_MAGICS = {"writefile", "file", "capture", "time", "timeit", "prun", "python", "python3", "debug", "px"}


class _Magics(ast.NodeTransformer):
    """IPython magics and ``exec``/``eval``/``compile`` of a constant string: the code they hold, parsed. The
    commands left out are appended to ``dropped``."""

    def __init__(self, dropped: list | None = None):
        self.dropped = dropped

    def visit_Expr(self, node):
        self.generic_visit(node)
        code = _held_code(node.value, self.dropped)
        if code is None and _ipython_command(node.value):
            if self.dropped is not None:
                self.dropped.append(node.value)
            return None  # %run -i impl.py, %matplotlib inline, !pip ...: a command, no code of one's own
        return code if code is not None else node

    def visit_Call(self, node):
        """``eval`` of a constant string, anywhere: the expression it holds."""
        self.generic_visit(node)
        if name_of(node.func) == "eval" and len(node.args) == 1 and not node.keywords \
                and isinstance(text := _constant(node.args[0]), str):
            try:
                return self.visit(ast.parse(text.strip(), mode="eval").body)
            except (SyntaxError, ValueError, RecursionError):
                pass
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        return node


def _held_code(call, dropped: list | None = None) -> list | None:
    if not isinstance(call, ast.Call) or not call.args:
        return None
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else name_of(func)
    text = None
    if name == "run_cell_magic" and len(call.args) == 3 and isinstance(call.args[2], ast.Constant):
        text = call.args[2].value if _constant(call.args[0]) in _CODE_MAGICS else None
    elif name == "run_line_magic" and len(call.args) == 2 and isinstance(call.args[1], ast.Constant):
        text = call.args[1].value if _constant(call.args[0]) in _CODE_MAGICS else None
    elif name in ("exec", "eval", "compile", "run_cell") and isinstance(call.args[0], ast.Constant):
        text = call.args[0].value
    elif name in ("exec", "eval") and isinstance(inner := call.args[0], ast.Call) and name_of(inner.func) == "compile" \
            and inner.args and isinstance(inner.args[0], ast.Constant):
        text = inner.args[0].value  # exec(compile("...", "<string>", "exec"))
    if not isinstance(text, str):
        return None
    try:
        return _Magics(dropped).visit(ast.parse(python_source(text))).body
    except (SyntaxError, ValueError, RecursionError):
        return None


def _ipython_command(call) -> bool:
    """Whether an expression is IPython's form of a magic or a shell escape (``get_ipython().run_line_magic(...)``,
    ``.run_cell_magic``, ``.system``, ``.getoutput``)."""
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
        and call.func.attr in ("run_line_magic", "run_cell_magic", "system", "getoutput") \
        and isinstance(call.func.value, ast.Call) and name_of(call.func.value.func) == "get_ipython"


def _constant(node):
    return node.value if isinstance(node, ast.Constant) else None


def parse_code(source: str, dropped: list | None = None) -> list | None:
    """A cell's (or a file's) statements with the code of its magics and exec strings parsed in; None if it does
    not parse. The IPython commands it leaves out (calls) are appended to ``dropped``."""
    match = _MAGIC_CELL.match(source)
    if match and match.group(1) in _CODE_MAGICS:
        source = match.group("body")
    try:
        tree = ast.parse(python_source(source) if _IPYTHON.search(source) else source)
        return _Magics(dropped).visit(tree).body if _HOLDS_CODE.search(source) or _IPYTHON.search(source) else tree.body
    except (SyntaxError, ValueError, RecursionError):
        return None



def file_constructs(rel: str, size: int, data: bytes | None, limit: int) -> str | None:
    """Why a handed-in file holds code the report does not read (compiled code, a ``.py`` file it cannot read or
    that Python would read otherwise), or None. ``data``: a ``.py`` file's bytes (None: unreadable)."""
    if rel.endswith(_COMPILED) or not rel.endswith(".py"):
        return "compiled code handed in" if rel.endswith(_COMPILED) else None
    if size > limit or data is None:
        return f"a .py file over {limit:,} bytes, not read" if size > limit else "a .py file that cannot be read"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "a .py file that is not UTF-8 text"
    for line in data.splitlines()[:2]:
        if m := _CODING.match(line):
            try:
                name = codecs.lookup(m.group(1).decode("ascii")).name
            except (LookupError, UnicodeDecodeError):
                name = None
            if name not in ("utf-8", "ascii"):
                return f"a .py file in the {m.group(1).decode('ascii', 'replace')[:30]} source encoding"
            break
    return None


# ---- tokens -----------------------------------------------------------------------------------------------------

def filtered(code: str):
    """copydetect's tokenised form of normalised code (``filter_code``'s output: every name ``V``, a defined
    function's ``F``, a class's ``O``, a string ``S``; keywords, builtins, operators and numbers as written; no
    whitespace or comments) and its offsets into ``code``, from Python's own tokeniser: the same kind of text as
    copydetect's Pygments lexer gives, three times faster. None when ``code`` does not tokenise
    (copydetect's lexer then reads it)."""
    import numpy as np

    starts, at = [0], 0
    for line in code.splitlines(keepends=True):
        at += len(line)
        starts.append(at)
    kept = (set(dir(builtins)) - {"_"}) | {"self", "cls"}
    out, offsets, previous = [], [[0, 0]], ""
    length = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            kind, text = tok.type, tok.string
            if kind in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT,
                        tokenize.ENCODING, tokenize.ENDMARKER) or not text:
                continue
            if kind == tokenize.NAME and (previous == "." or not (
                    keyword.iskeyword(text) or text in kept)):  # soft keywords (`_`, `match`) are names
                text = "F" if previous == "def" else "O" if previous == "class" else "V"
            elif kind == tokenize.STRING or kind in (getattr(tokenize, "FSTRING_START", -1),):
                text = "S"
            previous = tok.string
            origin = starts[tok.start[0] - 1] + tok.start[1]
            offsets.append([length, origin - length])
            out.append(text)
            length += len(text)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return "".join(out), np.array(offsets)
