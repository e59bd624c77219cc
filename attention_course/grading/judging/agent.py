"""The grader's agent inside a student's kernel: it answers the judge's requests.

At autograde the judge (in the grader's process) runs every test cell itself; when a test
calls a student's function or reads a student's variable, the request comes here over a
Unix socket, runs in the student's kernel, and the result goes back as plain data
(see :mod:`attention_course.grading.wire`). Nothing here is trusted: a student's code can
replace or break this module, and then it simply answers wrongly or not at all, which the
judge scores like any wrong answer. No reference value and no test ever comes here.
"""

from __future__ import annotations

import inspect
import socket
import sys
import types

from .. import wire

_agent = None


def _type_names(obj) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__][:20]


def _namespace() -> dict:
    try:
        return get_ipython().user_ns  # noqa: F821  (defined inside IPython)
    except NameError:
        return sys.modules["__main__"].__dict__


class _Callback:
    """A judge-side callable (a function a test passes to the student's code)."""

    def __init__(self, agent, cid: int):
        self._agent, self._cid = agent, cid

    def __call__(self, *args, **kwargs):
        return self._agent.callback(self._cid, args, kwargs)

    def __repr__(self):
        return "<function given by the test>"


class RemoteError(Exception):
    """An error the judge reported for a callback."""


class Agent:
    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.objects: dict[int, object] = {}
        self.next_id = 1

    # -- encoding ------------------------------------------------------------------------
    def _handle(self, obj) -> dict:
        oid = self.next_id
        self.next_id += 1
        self.objects[oid] = obj
        return {"t": "ref", "id": oid, "type": _type_names(obj), "callable": callable(obj)}

    def _resolve(self, desc):
        if desc["t"] == "ref":
            try:
                return self.objects[desc["id"]]
            except (KeyError, TypeError):
                raise wire.WireError("unknown handle") from None
        return _Callback(self, desc.get("id"))

    def _reply(self, payload: dict, value=None, echo=None, by_value=True) -> None:
        enc = wire.Encoder(self._handle)
        if "ok" in payload:
            payload["ok"] = enc.encode(value) if by_value else self._handle(value)
        if echo is not None:
            payload["echo"] = [enc.encode(a) for a in echo]
        wire.send(self.sock, payload, enc.buffers)

    # -- requests --------------------------------------------------------------------------
    def serve(self) -> None:
        """Answer the judge's requests until it says the test cell is done."""
        wire.send(self.sock, {"ready": True}, [])
        while True:
            req, buffers = wire.recv(self.sock)
            if req.get("op") == "done":
                return
            self.answer(req, buffers)

    def answer(self, req: dict, buffers: list[bytes]) -> None:
        try:
            dec = wire.Decoder(buffers, self._resolve)
            op = req.get("op")
            target = dec.decode(req["target"]) if "target" in req else None
            if op == "lookup":
                ns = _namespace()
                name = req.get("name")
                if not isinstance(name, str) or name not in ns:
                    raise NameError(f"name {name!r} is not defined")
                self._reply({"ok": None}, ns[name])
            elif op in ("call", "vjp"):
                args = dec.decode(req.get("args", {"t": "list", "v": []}))
                kwargs = dec.decode(req.get("kwargs", {"t": "dict", "v": []}))
                if not isinstance(args, list) or not isinstance(kwargs, dict):
                    raise wire.WireError("malformed call")
                received = list(dec.arrays)  # their state after the call goes back (in-place changes)
                kwargs = {str(k): v for k, v in kwargs.items()}
                cotangents = dec.decode(req.get("cotangents")) if op == "vjp" else None
                hidden = _hide(target, req.get("hide"))
                try:
                    if op == "call":
                        value = _with_grad(req.get("grad", True), lambda: target(*args, **kwargs))
                    else:
                        from attention_course.checks import gradients

                        value = gradients(target, tuple(args), cotangents, **kwargs)
                except NameError as exc:
                    if getattr(exc, "name", None) in hidden.names:
                        wire.send(self.sock, {"err": {"type": "NameError", "module": "builtins", "msg": "",
                                                      "global": exc.name}}, [])
                        return
                    raise
                finally:
                    hidden.restore()
                self._reply({"ok": None}, value, echo=received)  # the judge names the function, not the kernel
            elif op == "getattr":
                value = getattr(target, str(req.get("name")))
                keep = not wire.is_data(value) or _is_array(value)
                self._reply({"ok": None}, value, by_value=not keep)
            elif op == "getitem":
                self._reply({"ok": None}, target[dec.decode(req.get("key"))])
            elif op == "iter":
                items = []
                for i, item in enumerate(target):
                    if i >= 100_000:
                        raise ValueError("iterable too long")
                    items.append(item)
                self._reply({"ok": None}, items)
            elif op == "len":
                self._reply({"ok": None}, int(len(target)))
            elif op == "bool":
                self._reply({"ok": None}, bool(target))
            elif op == "str":
                self._reply({"ok": None}, str(target)[:2000])
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException as exc:  # every failure, KeyboardInterrupt from a timeout included, is reported
            try:
                message = str(exc)[:2000]
            except BaseException:
                message = "(the error could not be printed)"
            wire.send(self.sock, {"err": {"type": type(exc).__name__, "module": type(exc).__module__,
                                          "msg": message}}, [])

    def callback(self, cid, args, kwargs):
        enc = wire.Encoder(self._handle)
        wire.send(self.sock, {"cb": cid, "args": enc.encode(list(args)), "kwargs": enc.encode(dict(kwargs))},
                  enc.buffers)
        reply, buffers = wire.recv(self.sock)
        if "err" in reply:
            raise RemoteError(str(reply["err"])[:500])
        return wire.Decoder(buffers, self._resolve).decode(reply.get("ok"))


class _Hidden:
    """The notebook's variables taken out of the namespaces a call can read, until :meth:`restore`."""

    def __init__(self, spaces: list[dict], names: list[str]):
        self._taken: list[tuple[dict, str, object]] = []
        for space in spaces:
            for name in names:
                if name in space and _is_data(space[name]):
                    self._taken.append((space, name, space.pop(name)))
        self.names = frozenset(name for _, name, _ in self._taken)

    def restore(self) -> None:
        for space, name, value in self._taken:
            space[name] = value
        self._taken = []


def _hide(target, names) -> _Hidden:
    """Hide ``names`` (the notebook's variables, :func:`..trust.notebook_globals`) that hold data from the
    kernel's namespace and from the globals of the called function (or class, or object's method), for one call:
    a function that reads one raises NameError. Functions, classes, modules and other objects stay."""
    names = [n for n in names if isinstance(n, str)][:10_000] if isinstance(names, list) else []
    if not names:
        return _Hidden([], [])
    spaces = [_namespace()]
    for owner, attr in ((target, None), (type(target), "forward"), (type(target), "__call__"), (target, "__init__")):
        try:
            fn = owner if attr is None else inspect.getattr_static(owner, attr, None)
            fn = getattr(fn, "__func__", fn)
            space = fn.__globals__ if isinstance(fn, types.FunctionType) else None
        except Exception:  # an object of the student's own that will not say: its call reads what it reads
            space = None
        if isinstance(space, dict) and all(space is not s for s in spaces):
            spaces.append(space)
    return _Hidden(spaces, names)


def _is_data(x, depth: int = 0) -> bool:
    """Numbers, strings, arrays and tensors, and lists, tuples and dicts of them: what a notebook's example holds."""
    if isinstance(x, (bool, int, float, complex, str, bytes)) or _is_array(x):
        return True
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.generic):
        return True
    if depth < 3 and isinstance(x, (list, tuple)):
        return all(_is_data(v, depth + 1) for v in x[:1000])
    if depth < 3 and isinstance(x, dict):
        return all(_is_data(v, depth + 1) for v in list(x.values())[:1000])
    return False


def _is_array(x) -> bool:
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    return (np is not None and isinstance(x, np.ndarray)) or (torch is not None and isinstance(x, torch.Tensor))


def _with_grad(enabled, fn):
    torch = sys.modules.get("torch")
    if torch is None:
        return fn()
    with torch.set_grad_enabled(bool(enabled)):
        return fn()


def connect(path: str) -> None:
    global _agent
    _agent = Agent(path)


def serve() -> None:
    _agent.serve()
