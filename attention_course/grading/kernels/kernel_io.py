"""The grader's side of a kernel's messages: what it reads of them, and what a notebook keeps.

Every message a kernel sends is counted, whatever its kind:

* :class:`Channels` is the grader's client of one kernel: its shell and IOPub sockets only, each with a cap on a
  message's size (ZeroMQ's ``MAXMSGSIZE``: ``max_message_bytes`` per frame) and a short queue (``RCVHWM``), so that
  a kernel cannot make the grader hold more than a few messages of bounded size. A message over the cap is never
  read: ZeroMQ drops the connection it came on, :meth:`Channels.dropped` tells, and the grader connects again (what
  the kernel sends meanwhile is lost; a cell that keeps sending such messages has its kernel stopped). Shell replies
  are read and dropped as they come (unread, each stayed in the grader's memory as long as its kernel lived: an
  error's reply carries its whole traceback). The cap is ZeroMQ's, per frame: a kernel that writes one message of
  very many frames to its socket itself is not held to it.
* :class:`Cell` keeps a cell's outputs within ``max_output_bytes`` and what is left of the notebook's
  ``max_notebook_output_bytes`` (:class:`Budget`, shared by the notebook's kernels). Every byte of a message's
  content counts: text, data, metadata, ``transient``, an error's name, message and traceback, measured as the
  notebook file holds them (:func:`size`). Streams and errors are cut to the room left, a display is kept whole or
  dropped, and a note at the end of the cell says what was cut. A cell that sent an error keeps one, so that what an
  error decides (nbgrader scores a grade cell with an error 0; a locked cell that fails is checked again) does not
  change.
"""

from __future__ import annotations

import collections
import queue
import time
import uuid

import zmq
from jupyter_client.blocking import BlockingKernelClient
from nbformat import NotebookNode
from nbformat.v4 import output_from_msg
from zmq.utils.monitor import recv_monitor_message

from ..trust import execution_count
from .clock import Clock

#: Defaults of :class:`.executor.JudgedExecute`'s settings of the same names.
MAX_OUTPUT_BYTES, MAX_NOTEBOOK_OUTPUT_BYTES, MAX_MESSAGE_BYTES = 2 * 2**20, 16 * 2**20, 16 * 2**20
#: Messages the grader's side of a socket holds before the kernel's side has to keep them (in the kernel's memory).
QUEUE = 8
#: A cell whose messages are refused this often has its kernel stopped (a kernel that does nothing but flood).
MAX_REFUSED = 8
#: The words every note of the grader's on outputs starts with.
NOTE = "output truncated by the grader"
KEPT = ("stream", "display_data", "execute_result", "error", "clear_output")
#: What the first error of a cell keeps at least, whatever the caps (its name and the start of its message).
ERROR_FLOOR = 1000
#: Bytes past a notebook's cap for the grader's notes and each cell's first error; past them a cell keeps nothing.
OVERFLOW = 2**20
_CONTROL = bytes(range(32))
#: Bytes a list item or dictionary entry adds in a notebook file (indentation, quotes, comma, new line).
_ITEM = 12


def text_size(text: str) -> int:
    """Bytes a string takes in a notebook file: UTF-8 JSON with its escapes, a new line opening a list item (nbformat
    writes multi-line text as a list of lines)."""
    data = text.encode("utf-8", "surrogatepass")
    controls = len(data) - len(data.translate(None, _CONTROL))
    return len(data) + 2 + 5 * controls + data.count(b'"') + data.count(b"\\") + _ITEM * data.count(b"\n")


def size(value) -> int:
    """Bytes ``value`` (decoded JSON: dicts, lists, strings, numbers) takes in a notebook file, every key and value
    counted (walked without recursion: a message's nesting is the kernel's choice)."""
    total, todo = 0, [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            total += text_size(item)
        elif isinstance(item, dict):
            total += 2 + _ITEM * len(item)
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            total += 2 + _ITEM * len(item)
            todo.extend(item)
        else:
            total += len(repr(item))
    return total


def fit(text: str, room: int) -> str:
    """The longest start of ``text`` (near enough) that takes at most ``room`` bytes in a notebook file."""
    cut = text[:max(0, room)]
    while cut and text_size(cut) > room:
        cut = cut[:max(0, int(len(cut) * room / text_size(cut)) - 1)]
    return cut


def mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


class Budget:
    """Bytes of output a notebook may still keep: all its cells, whichever of its kernels ran them. Past ``total``,
    :data:`OVERFLOW` more bytes hold the grader's notes and each cell's first error (cut to :data:`ERROR_FLOOR`);
    past that, a cell keeps nothing (its status still says it failed)."""

    def __init__(self, total: int):
        self.total, self.used = total, 0

    @property
    def left(self) -> int:
        return max(0, self.total - self.used)

    @property
    def spare(self) -> int:
        return max(0, self.total + OVERFLOW - self.used)


class Cell:
    """What one cell keeps of the messages its kernel sent (``keep`` False: nothing, whether it sent an error alone)."""

    def __init__(self, cap: int, budget: Budget | None = None, keep: bool = True, message_cap: int = MAX_MESSAGE_BYTES):
        self.cap, self.budget, self.keep, self.message_cap = cap, budget, keep, message_cap
        self.outputs: list = []
        self.used = self.sent = self.refused = 0  # bytes kept, bytes of output the kernel sent, messages not read
        self.cut: collections.Counter = collections.Counter()  # kinds of output cut or left out
        self.notebook_cut = False  # whether the notebook's cap (not the cell's) cut something
        self.error = False  # the kernel sent an error, or its reply to the cell says so
        self.reply: dict | None = None  # the kernel's reply to the cell, when it said "error"
        self.count = None

    def floor(self) -> int:
        """What the cell's first error and the grader's note may take past the caps."""
        return ERROR_FLOOR if self.budget is None else min(ERROR_FLOOR, self.budget.spare - self.used)

    def room(self) -> tuple[int, bool]:
        """Bytes the cell may still keep, and whether the notebook's cap is what limits it."""
        cell = self.cap - self.used
        notebook = cell if self.budget is None else self.budget.left - self.used
        return max(0, min(cell, notebook)), notebook < cell

    def add(self, msg: dict) -> None:
        """One IOPub message of the cell (the caller checked its parent)."""
        kind, content = msg.get("msg_type"), msg.get("content")
        if kind in ("execute_input", "execute_result") and isinstance(content, dict):  # a count nbformat takes
            content = dict(content, execution_count=execution_count(content.get("execution_count")))
            msg, self.count = dict(msg, content=content), content["execution_count"] if kind == "execute_input" else self.count
        self.error = self.error or kind == "error"
        if not self.keep or kind not in KEPT or not isinstance(content, dict):
            return
        if kind == "clear_output":
            self.outputs, self.used = [], 0
            return
        sent, (room, by_notebook) = size(content), self.room()
        self.sent += sent
        if kind == "error" and not any(o.get("output_type") == "error" for o in self.outputs):
            room = max(room, self.floor())  # the cell's first error is kept, whatever the caps
        try:
            if sent <= room:
                self._keep(output_from_msg(msg))
                return
            self.cut[kind] += 1
            self.notebook_cut = self.notebook_cut or by_notebook
            if kind == "stream" and isinstance(content.get("text"), str):
                text = fit(content["text"], room - size(dict(content, text="")))
                if text:
                    self._keep(output_from_msg({"header": {"msg_type": kind}, "content": dict(content, text=text)}))
            elif kind == "error":
                self._error(content, room)
        except Exception:  # a message nbformat cannot take as an output (no text, data of the wrong kind)
            self.cut["malformed"] += 1

    def _keep(self, out) -> None:
        self.used += size(out)
        if out.get("output_type") == "stream" and self.outputs and self.outputs[-1].get("output_type") == "stream" \
                and self.outputs[-1].get("name") == out.get("name"):
            self.outputs[-1]["text"] += out["text"]
        else:
            self.outputs.append(out)

    def _error(self, content: dict, room: int) -> None:
        """An error cut to ``room`` bytes: its name (at most 200 characters), the start of its message, then of its
        traceback's lines. The cell's first error keeps at least :data:`ERROR_FLOOR` bytes, whatever the caps (but the
        notebook's :data:`OVERFLOW`): it is shown, and what an error decides stays decided."""
        if not any(o.get("output_type") == "error" for o in self.outputs):
            room = max(room, self.floor())
        if room <= 100:
            return
        text = lambda v: v if isinstance(v, str) else ""  # noqa: E731
        ename = fit(text(content.get("ename")), 200) or "Error"
        room -= text_size(ename) + 60
        evalue = fit(text(content.get("evalue")), max(0, room // 2))
        room -= text_size(evalue)
        trace = []
        for line in content.get("traceback") if isinstance(content.get("traceback"), list) else []:
            if room <= 2 * _ITEM:
                break
            trace.append(fit(text(line), room - _ITEM))
            room -= text_size(trace[-1]) + _ITEM
        out = NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=trace)
        self.used += size(out)
        self.outputs.append(out)

    def replied(self, content) -> None:
        """The kernel's reply to the cell on the shell socket."""
        if isinstance(content, dict) and content.get("status") == "error":
            self.error, self.reply = True, content

    def dropped(self, channels: list[str]) -> None:
        """Messages over ``message_cap`` were not read on these channels. A reply that long is an error's, most
        likely (only a traceback makes a reply long): the cell counts as one that sent an error."""
        self.refused += len(channels)
        self.error = self.error or "shell" in channels

    def finish(self) -> list:
        """The cell's outputs: an error if the cell sent one and none is kept, then a note saying what was cut."""
        if not self.keep:
            return self.outputs
        if self.error and not any(o.get("output_type") == "error" for o in self.outputs):
            self._error(self.reply or {"ename": "OutputTooLarge", "evalue": (
                f"this cell sent the grader a message of more than {mib(self.message_cap)} (an error whose message "
                "and traceback are that long, most likely), which was not read")}, 0)
        parts = []
        if self.cut:
            kinds = ", ".join(f"{n} {_WORDS[kind][n > 1]}" for kind, n in sorted(self.cut.items()))
            parts.append(f"this cell's outputs came to {self.sent:,} bytes, of which {self.used:,} are kept (cut or "
                         f"left out: {kinds})")
        if self.refused:
            parts.append(f"{self.refused} message{'s' if self.refused > 1 else ''} of more than "
                         f"{mib(self.message_cap)} {'were' if self.refused > 1 else 'was'} not read (what the kernel "
                         "sent while the grader connected again may be lost too)" +
                         (" and the kernel was stopped" if self.refused >= MAX_REFUSED else ""))
        if parts and self.floor() > 500:
            cap = f"a cell keeps at most {mib(self.cap)} of output"
            if self.budget is not None:
                cap += f" and a notebook {mib(self.budget.total)}" + (", which is reached" if self.notebook_cut else "")
            text = f"\n[{NOTE}: {'; '.join(parts)}. Every byte a kernel sends counts; {cap}.]\n"
            self.outputs.append(NotebookNode(output_type="stream", name="stdout", text=text))
            self.used += text_size(text)
        if self.budget is not None:
            self.budget.used += self.used
        return self.outputs


#: The note's word for each kind of output cut.
_WORDS = {"stream": ("stream", "streams"), "error": ("error", "errors"),
          "display_data": ("display", "displays"), "execute_result": ("result", "results"),
          "malformed": ("message that is not an output", "messages that are not outputs")}


def _parent(msg: dict):
    header = msg.get("parent_header")
    return header.get("msg_id") if isinstance(header, dict) else None


def read(kernel, msg_id: str, timeout: float, keep: bool = True, budget: Budget | None = None):
    """Read ``kernel``'s messages (a :class:`.kernel.Kernel`) until the request ``msg_id`` is done, its idle status and
    its reply both come: (outputs, status, execution count), status in ok, error, timeout, died. Past ``timeout`` (as
    :class:`.clock.Clock` charges it; the wall seconds it did not charge are added to ``kernel.credit``) the kernel is
    interrupted, and killed after its grace (charged alike). After a message too large to read (its connection dropped,
    :meth:`Channels.dropped`) the grader connects again and asks the kernel for its info: the answer comes once the
    request is done (a kernel answers in order), and its last outputs follow."""
    channels, settings = kernel.channels, kernel.settings
    cell = Cell(settings["max_output_bytes"], budget, keep, channels.message_cap)
    clock = kernel_clock(kernel)  # the limit charges what the kernel had of the machine, not its wait for a CPU
    try:
        return _read(kernel, channels, settings, cell, clock, msg_id, timeout)
    finally:
        kernel.credit = getattr(kernel, "credit", 0.0) + clock.credit()


def kernel_clock(kernel) -> Clock:
    """A :class:`.clock.Clock` of ``kernel`` (:meth:`.kernel.Kernel.clock`; of its process tree alone for a kernel
    object that cannot say more)."""
    make = getattr(kernel, "clock", None)
    return make() if callable(make) else Clock({"root": kernel.proc.pid})


def _read(kernel, channels, settings, cell, clock, msg_id, timeout):
    interrupted = probe = tail = None
    idle = replied = probe_idle = False
    while not ((idle and replied) or (tail is not None and (idle or probe_idle or time.monotonic() > tail))):
        if interrupted is None and clock.past(timeout):
            interrupted = kernel_clock(kernel)  # its grace is charged as its limit is
            kernel.proc.interrupt()
        if interrupted is not None and interrupted.past(settings["interrupt_grace"]):
            kernel.kill()
            return cell.finish(), "timeout", cell.count
        dropped = channels.dropped()
        if dropped:
            time.sleep(0.05)  # a kernel that died closed its sockets first: not a refusal
            if not kernel.alive():
                return cell.finish(), ("timeout" if interrupted else "died"), cell.count
            cell.dropped(dropped)
            if cell.refused >= MAX_REFUSED:  # a kernel that floods the grader with what it cannot read: stopped
                kernel.kill()
                return cell.finish(), "died", cell.count
            channels.reopen(dropped)
            probe, tail = channels.kc.kernel_info(), None
        ready = channels.wait(0.2)
        for reply in channels.replies():
            if _parent(reply) == msg_id:
                cell.replied(reply.get("content"))
                replied = True
            elif probe is not None and _parent(reply) == probe and tail is None:
                tail = time.monotonic() + 1.0  # the request is done: its last outputs may still be on their way
        for _ in range(100):
            msg = channels.message()
            if msg is None:
                break
            parent = _parent(msg)
            if parent is None or parent not in (msg_id, probe):
                continue
            content = msg.get("content") if isinstance(msg.get("content"), dict) else {}
            if msg.get("msg_type") == "status" and content.get("execution_state") == "idle":
                idle, probe_idle = idle or parent == msg_id, probe_idle or parent == probe
            elif parent == msg_id:
                cell.add(msg)
        if not ready and not kernel.alive():
            return cell.finish(), ("timeout" if interrupted else "died"), cell.count
    return cell.finish(), "timeout" if interrupted else "error" if cell.error else "ok", cell.count


class Channels:
    """The grader's client of one kernel: its shell and IOPub sockets, every message read at most ``message_cap``
    bytes a frame, at most :data:`QUEUE` of them waiting on the grader's side."""

    def __init__(self, connection_file: str, message_cap: int = MAX_MESSAGE_BYTES):
        self.message_cap = message_cap
        self._context = zmq.Context()
        self._context.setsockopt(zmq.MAXMSGSIZE, message_cap)
        self._context.setsockopt(zmq.RCVHWM, QUEUE)
        self._context.setsockopt(zmq.SNDTIMEO, 10_000)  # a request to a kernel that cannot take it fails, never hangs
        self.kc = BlockingKernelClient(connection_file=connection_file, context=self._context)
        self.kc.load_connection_file()
        self.kc.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        self._monitors = {name: self._socket(name).get_monitor_socket(zmq.EVENT_DISCONNECTED)
                          for name in ("iopub", "shell")}

    def _socket(self, name: str):
        return getattr(self.kc, f"{name}_channel").socket

    def dropped(self) -> list[str]:
        """The channels whose connection ZeroMQ dropped since the last call: a message over the cap was refused (or
        the kernel is gone)."""
        found = []
        for name, monitor in self._monitors.items():
            while monitor.poll(0):
                if recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED:
                    found.append(name)
        return found

    def wait(self, timeout: float) -> bool:
        """Whether a message came on either socket within ``timeout`` seconds."""
        poller = zmq.Poller()
        for name in ("iopub", "shell"):
            poller.register(self._socket(name), zmq.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def message(self) -> dict | None:
        """The next IOPub message if one has come (an empty dict for one that cannot be read), else None."""
        try:  # the channel's own read: the blocking client's wrapper runs an event loop for each message (0.5 ms)
            msg = self.kc.iopub_channel.get_msg(timeout=0)
        except queue.Empty:
            return None
        except Exception:  # an unreadable message (forked children write to the same socket): skipped
            return {}
        return msg if isinstance(msg, dict) else {}

    def replies(self, most: int = 100):
        """The shell replies that have come (at most ``most``), one at a time: read, and so dropped from the grader's
        memory."""
        for _ in range(most):
            try:
                yield self.kc.shell_channel.get_msg(timeout=0)
            except Exception:  # nothing more (queue.Empty), or a message that is not a message
                return

    def reopen(self, names: list[str]) -> None:
        """Connect these channels again (ZeroMQ does not, after a refused message). The shell socket takes a new
        identity: the kernel may not have let the old one go yet."""
        kc = self.kc
        for name in dict.fromkeys(names):
            self._close(name)
            if name == "shell":
                socket = kc.connect_shell(identity=uuid.uuid4().bytes)
                kc._shell_channel = kc.shell_channel_class(socket, kc.session, kc.ioloop)
            else:
                socket = kc.connect_iopub()
                kc._iopub_channel = kc.iopub_channel_class(socket, kc.session, kc.ioloop)
            getattr(kc, f"{name}_channel").start()
            self._monitors[name] = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    def _close(self, name: str) -> None:
        monitor = self._monitors.pop(name, None)
        for step in (self._socket(name).disable_monitor, lambda: monitor.close(0),
                     getattr(self.kc, f"{name}_channel").stop):
            try:
                step()
            except Exception:  # a socket already closed
                pass

    def close(self) -> None:
        for name in ("iopub", "shell"):
            self._close(name)
        self._context.destroy(linger=0)
