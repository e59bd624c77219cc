"""The judge: test cells run here, in the grader's process, never in the student's kernel.

A test cell's code is executed in a namespace of the judge's own: the locked cells of the
master (imports, data, reference helpers) run here too, so every reference value is
computed where the student's code cannot reach it. A name the judge does not have (a
function or variable the student defined) is fetched from the student's kernel through
the agent (:mod:`attention_course.grading.judging.agent`): plain data is copied over, anything else
becomes a :class:`Remote` proxy whose calls run in the kernel and return plain data. The
comparisons (``assert_close`` and friends, ``np.allclose``, ``assert``) are the judge's own,
so nothing a submission replaces, wraps or rewrites in its kernel can change a verdict.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import select
import socket
import time
import traceback

from .. import trust, wire
from ..cells import compiled, free_names, hidden_lines, test_line
from ..kernels.clock import STRETCH
from .failures import TRUSTED_PREFIXES, GradingInterrupt, KernelGone, KernelTimeout, StudentError, judge_class, remote_error


class Remote:
    """An object that lives in the student's kernel. Attribute access, calls, iteration and
    indexing are requests to the kernel; results come back as plain data where possible."""

    __slots__ = ("_judge_conn", "_judge_id", "_judge_types", "_judge_name", "__weakref__")

    def __getattr__(self, name):
        if name.startswith("__") or name.startswith("_judge"):
            raise AttributeError(name)
        value = self._judge_conn.request({"op": "getattr", "target": self._judge_ref(), "name": name})
        owner = getattr(self, "_judge_name", None)
        if isinstance(value, Remote) and owner is not None and name.isidentifier():  # Class.method, as the master
            object.__setattr__(value, "_judge_name", f"{owner.removesuffix('()')}.{name}")
        return value

    def _judge_ref(self):
        return {"t": "ref", "id": self._judge_id}

    def __call__(self, *args, **kwargs):
        return self._judge_conn.call(self, args, kwargs)

    def __iter__(self):
        return iter(self._judge_conn.request({"op": "iter", "target": self._judge_ref()}))

    def __len__(self):
        return self._judge_conn.request({"op": "len", "target": self._judge_ref()})

    def __getitem__(self, key):
        return self._judge_conn.request({"op": "getitem", "target": self._judge_ref(), "key": key})

    def __bool__(self):
        return self._judge_conn.request({"op": "bool", "target": self._judge_ref()})

    def __repr__(self):
        try:
            return self._judge_conn.request({"op": "str", "target": self._judge_ref()})
        except Exception:
            return f"<{type(self).__name__} in the student's kernel>"

    __str__ = __repr__

    @property
    def __class__(self):
        return judge_class(self._judge_types) or type(self)

    def _judge_vjp(self, args, kwargs, cotangents):
        return self._judge_conn.call(self, args, kwargs, op="vjp", cotangents=cotangents)


_proxy_classes: dict[str, type] = {}


def _proxy(conn, desc) -> Remote:
    types = [str(t) for t in desc.get("type", [])][:20] if isinstance(desc.get("type"), list) else []
    name = (types[0].rpartition(".")[2] if types else "object")[:80] or "object"
    cls = _proxy_classes.get(name)
    if cls is None:
        cls = _proxy_classes[name] = type(name, (Remote,), {"__slots__": ()})
    conn.heard(*(t for t in types if not t.startswith(TRUSTED_PREFIXES)))  # a class of the student's own: its text
    obj = object.__new__(cls)
    object.__setattr__(obj, "_judge_conn", conn)
    object.__setattr__(obj, "_judge_id", desc.get("id"))
    object.__setattr__(obj, "_judge_types", types)
    return obj


class Connection:
    """The judge's end of the socket to the agent in one student's kernel."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.deadline = None  # time.monotonic() after which the kernel has taken too long
        #: the running cell's limit and the clock that charges it (kernel and judge; :mod:`..kernels.clock`): a
        #: deadline passed by the wall clock only, while the machine kept them waiting for a CPU, moves on
        self.clock, self.limit = None, 0.0
        self.receiving = False  # reading a message the kernel has begun to send (the alarm then stops the kernel's time)
        self.broken = False
        self._callbacks: dict[int, object] = {}
        #: the line numbers of the running test cell's hidden tests, and the text the kernel sent during the cell
        #: (strings, type names): a failure on a hidden line may not quote it (:func:`.trust.shown_failure`)
        self.hidden: frozenset[int] = frozenset()
        self.texts: list[str] = []
        #: notes for the student on the running cell that cost no points (an argument changed in place)
        self.notes: list[str] = []
        #: the master's parameters of each function a student defines (:func:`.trust.master_signatures`)
        self.signatures: dict[str, tuple[str, ...]] = {}
        #: the notebook's variables each call of a student's function is made without (:func:`.trust.notebook_globals`)
        self.hide: tuple[str, ...] = ()

    def start_cell(self, hidden: frozenset[int]) -> None:
        self.hidden, self.texts, self.notes = hidden, [], []

    def heard(self, *texts) -> None:
        """Note text that came from the kernel (up to 200,000 characters a cell; beyond, every further text is
        noted as one that cannot be told apart, and a hidden failure shows no message of its own)."""
        room = 200_000 - sum(map(len, self.texts))
        for text in texts:
            if isinstance(text, str) and text:
                self.texts.append(text if len(text) <= room else "\0overflow")
                room -= len(text)

    def _on_hidden_line(self) -> bool:
        """Whether the test cell's code that is running now (the innermost frame of its own) is a hidden line."""
        frames = [(f, line) for f, line in traceback.walk_stack(None)][::-1]
        return test_line(frames) in self.hidden

    # -- low level -----------------------------------------------------------------------
    def _recv(self):
        if self.broken:
            raise KernelGone("the kernel stopped answering earlier in this cell")
        while True:
            remaining = (self.deadline if self.deadline is not None else time.monotonic() + 120) - time.monotonic()
            if remaining <= 0 and self.clock is not None and not self.clock.past(self.limit):
                # past the deadline by the wall clock only: the machine, not the kernel, took the time
                self.deadline = time.monotonic() + max(0.05, self.limit - self.clock.charged())
                continue
            if remaining <= 0:
                self.broken = True
                raise KernelTimeout("the student's code took too long")
            waiting = select.poll()
            waiting.register(self.sock, select.POLLIN)
            if waiting.poll(remaining * 1000):  # readable, or closed: wire.recv says which
                break
        # the kernel is answering: what it sends is read whole (a stream: a read cut short cannot be taken up again),
        # stopped by the judge's own alarm if the kernel stops halfway
        self.sock.settimeout(max(remaining, 1.0) * STRETCH)
        self.receiving = True
        try:
            return wire.recv(self.sock)
        except socket.timeout:
            self.broken = True
            raise KernelTimeout("the student's code took too long") from None
        except (wire.WireError, OSError) as exc:
            self.broken = True
            raise KernelGone(f"the kernel stopped answering ({exc})") from None
        finally:
            self.receiving = False

    def _encode_handle(self, obj):
        if isinstance(obj, Remote):
            return obj._judge_ref()
        if callable(obj):
            cid = len(self._callbacks) + 1
            self._callbacks[cid] = obj
            return {"t": "cb", "id": cid}
        raise TypeError(f"a {type(obj).__name__} cannot be passed to the student's code")

    def _decode_handle(self, desc):
        if desc["t"] == "ref":
            return _proxy(self, desc)
        raise wire.WireError("the kernel sent a callback handle")

    def wait_ready(self, timeout: float) -> bool:
        """Whether the agent announces, within ``timeout``, that it serves this test cell."""
        if self.broken:
            return False
        waiting = select.poll()
        waiting.register(self.sock, select.POLLIN)
        if not waiting.poll(timeout * 1000):
            return False
        try:  # the agent's one short message, whole within a second: a kernel that trickles it in is cut off
            msg, _ = wire.recv(self.sock, deadline=time.monotonic() + 1.0)
        except (wire.WireError, OSError):  # socket.timeout included
            self.broken = True
            return False
        return msg.get("ready") is True

    def done(self) -> None:
        if not self.broken:
            try:
                wire.send(self.sock, {"op": "done"}, [])
            except OSError:
                self.broken = True

    # -- requests ------------------------------------------------------------------------
    def request(self, req: dict, extra: dict | None = None, mirror: list | None = None, name: str | None = None):
        """Send ``req`` and return the kernel's answer; ``name``: the course's name of the function a call calls."""
        enc = wire.Encoder(self._encode_handle)
        call_args, call_kwargs = req.get("args", []), req.get("kwargs", {})
        for key in ("target", "key", "args", "kwargs", "cotangents"):
            if key in req:
                req[key] = req[key] if key == "target" else enc.encode(req[key])
        if self.broken:
            raise KernelGone("the kernel stopped answering earlier in this cell")
        try:
            wire.send(self.sock, req, enc.buffers)
        except OSError as exc:
            self.broken = True
            raise KernelGone(f"the kernel stopped answering ({exc})") from None
        sent_arrays = enc.arrays
        try:
            while True:
                msg, buffers = self._recv()
                if "cb" in msg:
                    self._answer_callback(msg, buffers)
                    continue
                dec = wire.Decoder(buffers, self._decode_handle)
                if "err" in msg:
                    raise remote_error(msg["err"], self._on_hidden_line(), self.hide, self.heard)
                if "ok" not in msg:
                    self.broken = True
                    raise KernelGone("the kernel answered something that is not an answer")
                try:
                    value = dec.decode(msg["ok"])
                    echo = msg.get("echo")
                    echo = [dec.decode(e) for e in echo] if isinstance(echo, list) and len(echo) == len(sent_arrays) else None
                except wire.WireError as exc:
                    raise StudentError(f"the result could not be read: {exc}") from None
                finally:
                    self.heard(*dec.strings)
                note = trust.changed_in_place(name, sent_arrays, echo,
                                              self._described(name, call_args, call_kwargs, sent_arrays),
                                              self._on_hidden_line()) if echo is not None else None
                if note and req.get("op") in ("call", "vjp") and note not in self.notes and len(self.notes) < 5:
                    self.notes.append(note)
                return value
        finally:
            self._callbacks.clear()

    def _described(self, name: str | None, args, kwargs, arrays: list) -> list:
        """For each array sent with a call, the master's name of the parameter the test passed it as (None where the
        master's signature has none): the test's own arguments and the course's signature, never the kernel's."""
        params = self.signatures.get(name or "", ())
        slots = [(params[i] if i < len(params) else None, value) for i, value in enumerate(args or [])]
        slots += [(key if key in params else None, value) for key, value in (kwargs or {}).items()]

        def holds(value, array) -> bool:
            if value is array:
                return True
            if isinstance(value, (list, tuple)):
                return any(holds(v, array) for v in value)
            return isinstance(value, dict) and any(holds(v, array) for v in value.values())

        return [next((param for param, value in slots if holds(value, array)), None) for array in arrays]

    def _answer_callback(self, msg, buffers) -> None:
        fn = self._callbacks.get(msg.get("cb"))
        try:
            if fn is None:
                raise RuntimeError("this function given by the test is no longer available")
            dec = wire.Decoder(buffers, self._decode_handle)
            try:
                args, kwargs = dec.decode(msg.get("args")), dec.decode(msg.get("kwargs"))
            finally:
                self.heard(*dec.strings)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise wire.WireError("malformed callback")
            value = fn(*args, **{str(k): v for k, v in kwargs.items()})
            enc = wire.Encoder(lambda obj: (_ for _ in ()).throw(TypeError("not data")) if not isinstance(obj, Remote)
                               else obj._judge_ref())
            wire.send(self.sock, {"ok": enc.encode(value)}, enc.buffers)
        except GradingInterrupt:
            raise
        except Exception as exc:
            wire.send(self.sock, {"err": f"{type(exc).__name__}: {exc}"[:500]}, [])

    def lookup(self, name: str):
        value = self.request({"op": "lookup", "name": name})
        if isinstance(value, Remote):
            object.__setattr__(value, "_judge_name", name)  # the name the test knows it by
        return value

    def call(self, target: Remote, args, kwargs, op: str = "call", cotangents=None):
        import torch  # the judge's grad mode (e.g. inside torch.no_grad()) applies to the call

        req = {"op": op, "target": target._judge_ref(), "args": list(args), "kwargs": dict(kwargs),
               "grad": torch.is_grad_enabled()}
        if op == "vjp":
            req["cotangents"] = list(cotangents)
        if self.hide:
            req["hide"] = list(self.hide)
        name = self._callee(getattr(target, "_judge_name", None))
        value = self.request(req, name=name)
        if isinstance(value, Remote) and name is not None and any(k.startswith(f"{name}.") for k in self.signatures):
            object.__setattr__(value, "_judge_name", f"{name}()")  # an instance of the student's class
        return value

    def _callee(self, name: str | None) -> str | None:
        """The course's name of what calling ``name`` runs: an instance of a class calls its ``forward`` (a module)
        or ``__call__``."""
        if name is None or not name.endswith("()"):
            return name
        cls = name[:-2]
        return next((f"{cls}.{m}" for m in ("forward", "__call__") if f"{cls}.{m}" in self.signatures), cls)


class Judge:
    """The trusted namespace of one notebook's tests."""

    def __init__(self, conn: Connection | None, allowed: frozenset | None = None):
        self.conn = conn
        #: the names the judge may take from the student's kernel (those the student is meant to define)
        self.allowed = allowed
        #: the master's parameters of each of them (:func:`.trust.master_signatures`), for the notes
        self.signatures: dict[str, tuple[str, ...]] = {}
        self.hide: tuple[str, ...] = ()  # the notebook's variables the student's functions are called without
        self.ns: dict = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": _no_ipython}
        self.hidden: frozenset[int] = frozenset()  # the hidden lines of the cell that ran last

    def run(self, source: str, fetch: bool = True) -> None:
        """Execute a cell in the judge's namespace; exceptions propagate to the caller."""
        code, program = compiled(source)
        self.hidden = hidden_lines(code)
        if self.conn is not None:
            self.conn.start_cell(self.hidden)
        if fetch and self.conn is not None:
            for name in free_names(code):
                if name in self.ns or (self.allowed is not None and name not in self.allowed):
                    continue
                try:
                    self.ns[name] = self.conn.lookup(name)
                except NameError:
                    pass  # the cell raises NameError itself when it needs the name
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            exec(program, self.ns)


class _NoIPython:
    def __getattr__(self, name):
        return lambda *a, **k: None


def _no_ipython():
    return _NoIPython()
