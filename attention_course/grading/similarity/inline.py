"""The similarity normaliser's helpers put where they are called (see :mod:`.normal`): a helper whose
body is assignments to plain names and one ``return``."""

from __future__ import annotations

import ast
import copy

from .forms import Replace, blocks, loads, name_of


def _straight(func) -> tuple[list, ast.AST] | None:
    """``(assignments, returned value)`` of a helper whose body is assignments to plain names and then one
    ``return`` (a one-``return`` helper has no assignments), else None."""
    if not isinstance(func, ast.FunctionDef) or func.args.vararg or func.args.kwarg or func.args.kwonlyargs or \
            func.args.defaults or func.decorator_list or not func.body or not isinstance(func.body[-1], ast.Return) \
            or func.body[-1].value is None:
        return None
    head = func.body[:-1]
    if not all(isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets) for n in head):
        return None
    return head, func.body[-1].value


def inline_helpers(tree: ast.Module, api: set[str]) -> list:
    """A function whose body is one ``return`` is put where it is called; dropped when nothing else calls it and the
    release does not name it."""
    helpers = {f.name: f for f in tree.body if _straight(f) is not None}
    inlined: set[str] = set()

    class Inline(ast.NodeTransformer):
        """Puts helpers where they are called in one statement's own expressions; an argument that the helper
        reads more than once and that is not a plain name becomes a temporary before the statement (as a student
        who inlines the helper by hand writes it). A call inside a comprehension or lambda is left when it would
        need one."""
        changed = False
        count = 0

        def __init__(self, inside: str):
            self.inside, self.pending, self.depth = inside, [], 0

        def visit_Lambda(self, node):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
            return node

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

        def visit_Call(self, node):
            self.generic_visit(node)
            helper = helpers.get(name_of(node.func))
            if helper is None or helper.name == self.inside:
                return node
            params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
            given = dict(zip(params, node.args))
            given.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
            if len(node.args) > len(params) or set(given) != set(params):
                return node
            head, body = _straight(helper)
            uses = loads(ast.Module([*head, ast.Expr(body)], []))
            complex_args = [p for p in params if uses.get(p, 0) > 1 and not isinstance(given[p], (ast.Name, ast.Constant))]
            if (complex_args or head) and self.depth:
                return node
            for p in complex_args:
                Inline.count += 1
                name = f"_arg{Inline.count}"
                self.pending.append(ast.Assign([ast.Name(name, ast.Store())], given[p]))
                given[p] = ast.Name(name, ast.Load())
            for local in {t.id for n in head for t in n.targets}:  # the helper's own names, made fresh
                Inline.count += 1
                given[local] = ast.Name(f"_local{Inline.count}", ast.Load())
            for n in copy.deepcopy(head):
                n.value = Replace(given).visit(n.value)
                n.targets = [ast.Name(given[t.id].id, ast.Store()) for t in n.targets]
                self.pending.append(n)
            Inline.changed = True
            inlined.add(helper.name)
            return Replace(given).visit(copy.deepcopy(body))

    def inline_block(block: list, inside: str) -> None:
        i = 0
        while i < len(block):
            stmt = block[i]
            visitor = Inline(inside)
            for field, value in ast.iter_fields(stmt):
                if isinstance(value, ast.expr):
                    setattr(stmt, field, visitor.visit(value))
                elif isinstance(value, list) and value and not isinstance(value[0], ast.stmt):
                    setattr(stmt, field, [visitor.visit(v) if isinstance(v, ast.AST) else v for v in value])
            block[i:i] = visitor.pending
            i += len(visitor.pending) + 1

    changed: list = []
    if not helpers:
        helpers = {}
    for _ in range(3):
        Inline.changed = False
        for node in list(tree.body):
            before = Inline.changed
            Inline.changed = False
            inside = getattr(node, "name", "")
            for block in list(blocks(node)):  # the blocks inside a definition or a compound statement
                inline_block(block, inside)
            if Inline.changed and node not in changed:
                changed.append(node)
            Inline.changed = Inline.changed or before
        top = Inline.changed
        Inline.changed = False
        inline_block(tree.body, "")  # statements at the top level
        if not (Inline.changed or top):
            break
    called = loads(ast.Module([n for n in tree.body if getattr(n, "name", None) not in helpers], []))
    tree.body = [n for n in tree.body if getattr(n, "name", None) not in inlined or n.name in api or called.get(n.name)]
    # and a function or class of the hand-in's own that nothing names (dead code) is dropped
    named = loads(tree)
    tree.body = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 or not api or n.name in api or named.get(n.name)]  # (no API known: one cell alone, all kept)
    return [n for n in changed if n in tree.body]
