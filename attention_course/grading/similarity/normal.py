"""Code as the similarity report compares it: everything a student wrote, with what does not change its meaning
undone. Parsed, never run.

**What is read.** Code cells; the bodies of cell magics (``%%writefile``, ``%%capture``, ``%%time``...) and the code
of line magics; code given to ``exec``, ``eval``, ``compile`` or ``run_cell`` as a constant string (code that runs
a computed one is named opaque by :mod:`.opaque`); ``.py`` files handed in beside the notebook
(:func:`own_code` in :mod:`.similarity`). A hand-in's code is normalised as one module, so a helper defined in one
cell and used in another is seen as such.

**What is undone**, in this order:

* comments, formatting, docstrings and other bare strings (the code is printed again from its syntax tree);
* dead code: ``pass``, expressions with no effect (a bare name, a constant, an attribute, a call of a pure function
  or of ``print``), asserts and ``if`` of a constant, ``x = x``, ``del``, a ``try`` whose every handler raises again,
  and in a function, names assigned and never read;
* operators written as functions or methods: ``np.matmul``, ``np.dot``, ``torch.matmul``, ``mm``, ``bmm`` as ``@``;
  ``add``, ``subtract``, ``multiply``, ``divide``, ``power`` (NumPy's and PyTorch's names) as ``+ - * / **``; a
  two-operand ``einsum`` that is a matrix product (batched or not, with either operand transposed) as ``@``; the
  square root in any of its forms (``np.sqrt``, ``math.sqrt``, ``x ** 0.5``) as ``sqrt(x)``; ``x * (1 / y)`` and
  ``x * y ** -0.5`` as divisions; a swap of the last two axes in any spelling as ``.T``; what a port between NumPy
  and PyTorch adds: conversions (``torch.as_tensor(x)``, ``np.asarray(x)``, ``x.numpy()``, ``.detach()``) as ``x``,
  and a masked store (``S[mask] = v``, ``S.masked_fill(mask, v)``, ``np.where(mask, v, S)``) as one form;
* call forms: a module function that has a method form as the method (``np.sum(x, axis=-1)`` as
  ``x.sum(-1)``), ``dim`` / ``keepdim`` as ``axis`` / ``keepdims``, an axis keyword as the positional argument,
  keyword arguments in name order;
* statement forms: a loop that only appends to a list made before it (nothing in between using the list) as a
  comprehension; a temporary read
  once put where it is read; a helper whose body is one ``return`` put where it is called (and dropped when nothing
  calls it any more and the release does not name it);
* a class used only as a box of functions (its functions put at the top level); a tuple assignment as one
  assignment per name; ``x += y`` as ``x = x + y``; an ``if``/``else`` assigning one name as a conditional
  expression; a function that only wraps an inner one, as the inner one; the order of statements that do not
  depend on each other (:mod:`.blocks`);
* units and constants: ``x + 0``, ``x * 1``, ``x / 1`` as ``x``, ``1.0`` as ``1``, ``a if True else b`` as ``a``;
* the operands of ``+`` (``a - b`` as ``a + -b``), ``*``, ``&``, ``|``, ``^``, ``==``, ``!=``, ``and``, ``or`` in a
  name-free order, ``b > a`` as ``a < b``, ``a if not c else b`` as ``b if c else a``
  (:class:`.forms.Commutative`);
* the order of definitions (a name-free order) and a method's first parameter (``self``).
"""

from __future__ import annotations

import ast

from .blocks import canonical_order, conditional_values, hoist_namespaces, plain_augmented, split_tuples, unwrap_inner
from .forms import Commutative, Forms, Replace, blocks, loads, module_call, name_of, shape, stores
from .inline import inline_helpers
from .read import parse_code

#: Modules whose functions are written either as ``module.f(x, ...)`` or as a method ``x.f(...)``.
_PURE = {"len", "abs", "int", "float", "str", "bool", "list", "tuple", "dict", "set", "range", "sorted", "sum",
         "min", "max", "round", "repr", "id", "type", "isinstance", "hash", "print", "zip", "enumerate"}


# ---- statements -------------------------------------------------------------------------------------------------

def _no_effect(node) -> bool:
    """An expression statement that does nothing a reader of the code would miss."""
    if not isinstance(node, ast.Expr):
        return False
    calls = [n for n in ast.walk(node.value) if isinstance(n, ast.Call)]
    if not calls:
        return True
    call = node.value if isinstance(node.value, ast.Call) else None
    if call is None or len(calls) > 1 and name_of(call.func) != "print":
        return False
    mod = module_call(call)
    return name_of(call.func) in _PURE or (mod is not None and not mod[1].endswith("_") and "seed" not in mod[1])


def _dead(node) -> list | None:
    """What a statement becomes once what does nothing is dropped (None: keep it as it is)."""
    if isinstance(node, (ast.Pass, ast.Delete)) or _no_effect(node):
        return []
    if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant):
        return []
    if isinstance(node, ast.If) and isinstance(node.test, ast.Constant):
        return node.body if node.test.value else node.orelse
    if isinstance(node, ast.Try) and not node.orelse and not node.finalbody and all(
            len(h.body) == 1 and isinstance(h.body[0], ast.Raise) and h.body[0].exc is None for h in node.handlers):
        return node.body  # try: ... except ...: raise (every handler raises again): the body alone
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and isinstance(node.value, ast.Name) and node.targets[0].id == node.value.id:
        return []
    return None


def _append_loop(node, name: str):
    """``(element, generators)`` of a loop whose only work is ``name.append(element)`` (nested loops and one
    ``if`` allowed), else None."""
    if not isinstance(node, ast.For) or node.orelse or len(node.body) != 1:
        return None
    gen = ast.comprehension(node.target, node.iter, [], 0)
    inner = node.body[0]
    if isinstance(inner, ast.If) and not inner.orelse and len(inner.body) == 1:
        gen.ifs.append(inner.test)
        inner = inner.body[0]
    if isinstance(inner, ast.For):
        found = _append_loop(inner, name)
        return (found[0], [gen, *found[1]]) if found else None
    call = inner.value if isinstance(inner, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
            and name_of(call.func.value) == name and len(call.args) == 1 and not call.keywords:
        return call.args[0], [gen]
    return None


def _counting_while(start, loop) -> ast.For | None:
    """``for i in range(start, n): body`` for ``i = start`` followed by ``while i < n: body; i += 1`` (``i``
    changed nowhere else in the body)."""
    if not (isinstance(start, ast.Assign) and len(start.targets) == 1 and isinstance(start.targets[0], ast.Name)
            and isinstance(loop, ast.While) and not loop.orelse and loop.body):
        return None
    name, test, step = start.targets[0].id, loop.test, loop.body[-1]
    if isinstance(step, ast.Assign) and len(step.targets) == 1 and isinstance(step.value, ast.BinOp) \
            and name_of(step.value.left) == name:  # i = i + 1, as i += 1 is printed
        step = ast.AugAssign(step.targets[0], step.value.op, step.value.right)
    if not (isinstance(test, ast.Compare) and name_of(test.left) == name and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Lt) and isinstance(step, ast.AugAssign) and name_of(step.target) == name
            and isinstance(step.op, ast.Add) and isinstance(step.value, ast.Constant) and step.value.value == 1):
        return None
    if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
           for s in loop.body[:-1] for n in ast.walk(s)):
        return None
    bounds = [test.comparators[0]] if isinstance(start.value, ast.Constant) and start.value.value == 0 else \
        [start.value, test.comparators[0]]
    return ast.For(ast.Name(name, ast.Store()), ast.Call(ast.Name("range", ast.Load()), bounds, []),
                   loop.body[:-1] or [ast.Pass()], [])


def _comprehensions(body: list) -> list:
    """Counting ``while`` loops as ``for`` loops, and loops that only append to a list made before them (nothing in
    between mentions it) as comprehensions."""
    body = list(body)
    i = 0
    while i + 1 < len(body):
        loop = _counting_while(body[i], body[i + 1])
        if loop is not None:
            body[i:i + 2] = [loop]
        i += 1
    out, made = [], {}  # made: a list's name -> where ``name = []`` is in out, while nothing since mentions it
    for node in body:
        name = _appended(node)
        if name in made and _append_loop(node, name) is not None:  # the list made before, filled by this loop
            element, generators = _append_loop(node, name)
            out[made.pop(name)] = None
            node = ast.Assign([ast.Name(name, ast.Store())], ast.ListComp(element, generators))
        for mentioned in _mentioned(node):
            made.pop(mentioned, None)
        if _empty_list(node) is not None:
            made[_empty_list(node)] = len(out)
        out.append(node)
    return [node for node in out if node is not None]


def _appended(loop) -> str | None:
    """The name of the list a loop's innermost statement appends to (``name.append(...)``), else None."""
    while isinstance(loop, (ast.For, ast.If)) and len(loop.body) == 1:
        loop = loop.body[0]
    call = loop.value if isinstance(loop, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append":
        return name_of(call.func.value)
    return None


def _empty_list(node) -> str | None:
    """The name of ``name = []`` or ``name = list()``, else None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
            (isinstance(node.value, ast.List) and not node.value.elts or
             isinstance(node.value, ast.Call) and name_of(node.value.func) == "list" and not node.value.args):
        return node.targets[0].id
    return None


def _mentioned(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _inline_temporaries(func) -> None:
    """In a function, a name assigned once (not a parameter) and read once is put where it is read (only once: a
    canonical form whatever was inlined before; a name read twice stays, as a student who inlines by hand keeps it)."""
    for _ in range(4):
        read, written = loads(func), stores(func)
        once = {n for n, c in read.items() if written.get(n) == 1 and c == 1}
        changed = False
        if not once:
            return
        for block in list(blocks(func)):
            reads = None
            i = 0
            while i < len(block):
                node = block[i]
                name = node.targets[0].id if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) else None
                if name in once:
                    if reads is None:  # the names each statement of the block reads, and how often
                        reads = {id(s): loads(s) for s in block}
                    later = [s for s in block[i + 1:] if name in reads.get(id(s), {})]
                    if later and sum(reads[id(s)][name] for s in later) == read[name]:
                        for s in later:
                            Replace({name: node.value}).visit(s)
                            for n, c in loads(node.value).items():
                                reads[id(s)][n] = reads[id(s)].get(n, 0) + c * reads[id(s)][name]
                        del block[i]
                        once.discard(name)
                        changed = True
                        continue
                i += 1
        if not changed:
            return


def _drop_unread(func) -> None:
    """In a function, assignments to names that nothing reads."""
    for _ in range(10):
        read = loads(func)
        changed = False
        for block in blocks(func):
            keep = [n for n in block if not (isinstance(n, ast.Assign) and all(
                isinstance(t, ast.Name) and not read.get(t.id) for t in n.targets))]
            if len(keep) != len(block):
                block[:] = keep or [ast.Pass()]
                changed = True
        if not changed:
            return


def _settle(func) -> None:
    """In every block of a function, loops that only append as comprehensions and one-assignment ``if`` statements
    as conditional values (again, as earlier passes may have left fewer statements)."""
    for block in list(blocks(func)):
        block[:] = conditional_values(_comprehensions(block)) or [ast.Pass()]


class _Statements(ast.NodeTransformer):
    """Docstrings, dead code, comprehensions, temporaries (see the module's docstring)."""

    def _clean(self, body: list) -> list:
        body = [self.visit(node) for node in body
                if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) or
                        isinstance(node, (ast.Import, ast.ImportFrom)))]
        out = []
        for node in body:
            if node is None:
                continue
            for one in node if isinstance(node, list) else [node]:
                dead = _dead(one)
                out += [one] if dead is None else self._clean(dead)
        return conditional_values(plain_augmented(_comprehensions(split_tuples(out))))

    def _body(self, body: list) -> list:
        return self._clean(body) or [ast.Pass()]

    def generic_visit(self, node):
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, name, None), list) and getattr(node, name) and \
                    isinstance(getattr(node, name)[0], ast.stmt):
                setattr(node, name, self._body(getattr(node, name)))
        for handler in getattr(node, "handlers", []) or []:
            handler.body = self._body(handler.body)
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        _drop_unread(node)
        unwrap_inner(node)
        _settle(node)  # once what did nothing is gone
        _inline_temporaries(node)
        _settle(node)  # once temporaries are in place
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


# ---- order ----

class _Order(ast.NodeTransformer):
    """Puts each run of consecutive definitions in a name-free order; a method's first parameter is `self`."""

    def _body(self, body: list) -> list:
        body = [self.visit(node) for node in body]
        body = [node for node in body if node is not None] or [ast.Pass()]
        out, run = [], []
        for node in body + [None]:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                run.append(node)
                continue
            out += sorted(run, key=shape)
            run = []
            if node is not None:
                out.append(node)
        return canonical_order(out, shape)

    def visit_ClassDef(self, node):
        for method in node.body:  # a method's first parameter is `self`, whatever it was called
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args:
                first = method.args.args[0].arg
                if first != "self" and not any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(method)):
                    method.args.args[0].arg = "self"
                    for n in ast.walk(method):
                        if isinstance(n, ast.Name) and n.id == first:
                            n.id = "self"
        return self.generic_visit(node)

    def generic_visit(self, node):
        for name in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, name, None), list) and getattr(node, name):
                setattr(node, name, self._body(getattr(node, name)))
        for handler in getattr(node, "handlers", []) or []:
            handler.body = self._body(handler.body)
        return node


def normalise_all(sources: list[str], api: frozenset = frozenset(), parsed: list | None = None) -> str:
    """A hand-in's code (its cells' and files' sources) as one normalised text (see the module's docstring). ``api``:
    the names the release defines, which are never dropped. Code that does not parse is kept as written, after the
    rest (copydetect's tokeniser still reads it). ``parsed``: each source's :func:`.read.parse_code`, when
    the caller has it (it is changed in place)."""
    body, raw = [], []
    for i, source in enumerate(sources):
        statements = parse_code(source) if parsed is None else parsed[i]
        if statements is None:
            raw.append(source.strip())
        else:
            body += statements
    try:
        tree = Forms().visit(hoist_namespaces(ast.Module(body, [])))
        tree = _Statements().visit(tree)
        for node in inline_helpers(tree, set(api)):  # what a helper was put into is looked at again
            i = tree.body.index(node)
            again = _Statements()._body([Forms().visit(node)])
            tree.body[i:i + 1] = again
        tree = Forms().visit(tree)  # forms that inlining brought together (x * (1 / sqrt(d)) from a temporary)
        # names assigned at the top level or in a class that nothing reads and the release does not name
        read = set(loads(tree)) | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for owner in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            owner.body = [n for n in owner.body if not (isinstance(n, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id not in read and t.id not in api for t in n.targets))] or [ast.Pass()]
        tree = Commutative().visit(tree)
        tree.body = _Order()._body(tree.body) if tree.body else []
        text = ast.unparse(ast.fix_missing_locations(tree)).strip()
    except (RecursionError, ValueError, TypeError, AttributeError):
        return "\n\n".join(s.strip() for s in sources if s.strip())
    return "\n\n".join([t for t in [text, *raw] if t and t != "pass"])


def normalise(source: str) -> str:
    """One cell's code, normalised (:func:`normalise_all` of it alone)."""
    return normalise_all([source])
