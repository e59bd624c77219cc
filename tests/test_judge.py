"""Unit tests of the judged grader's parts: the wire format, the judge's names, the sandbox."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from attention_course import gradients
from attention_course.grading import wire
from attention_course.grading.course import ROOT
from attention_course.grading.cells import free_names
from attention_course.grading.sandbox import landlock_abi


def roundtrip(value):
    enc = wire.Encoder(lambda obj: {"t": "ref", "id": 7})
    data = enc.encode(value)
    return wire.Decoder(enc.buffers, lambda desc: ("handle", desc["id"])).decode(data), enc


def test_plain_data_travels_by_value():
    g, r = torch.Generator().manual_seed(3), np.random.default_rng(4)
    value = {"a": [1, 2.5, float("nan"), None, "x", (3, 4)], "arr": np.arange(6.0).reshape(2, 3),
             "t": torch.ones(2, 2, requires_grad=True), "gen": g, "rng": r, "i": np.int64(5), "f": object()}
    got, enc = roundtrip(value)
    assert np.array_equal(got["arr"], value["arr"]) and got["arr"].dtype == np.float64
    assert torch.equal(got["t"], value["t"]) and got["t"].requires_grad
    assert torch.randn(3, generator=got["gen"]).tolist() == torch.randn(3, generator=g).tolist()
    assert got["rng"].normal() == r.normal()
    assert got["f"] == ("handle", 7), "an object that is not plain data becomes a handle"
    assert got["a"][:2] == [1, 2.5] and np.isnan(got["a"][2]) and got["a"][5] == (3, 4)
    assert len(enc.arrays) == 2


@pytest.mark.parametrize("bad", [
    {"t": "nd", "dtype": "float64", "shape": [3, 3], "b": 0},  # buffer smaller than the shape
    {"t": "nd", "dtype": "object", "shape": [1], "b": 0},  # an object array would unpickle
    {"t": "pickle", "v": "..."},
    {"t": "ptgen", "b": 0},  # not a generator state
    {"t": "nprng", "v": '{"bit_generator": "Generator"}'},
    {"t": "dict", "v": [[{"t": "list", "v": []}, 1]]},  # unhashable key
])
def test_hostile_data_is_rejected(bad):
    with pytest.raises(wire.WireError):
        wire.Decoder([b"\x00" * 8], lambda d: None).decode(bad)


def test_nesting_is_bounded():
    deep = 1
    for _ in range(wire.MAX_DEPTH + 5):
        deep = {"t": "list", "v": [deep]}
    with pytest.raises(wire.WireError):
        wire.Decoder([], lambda d: None).decode(deep)


def test_free_names_skip_what_a_cell_binds():
    src = "import numpy as np\nx_ = np.ones(3)\ndef f(a):\n    return a + y\nfor i in range(2):\n    z = student(x_, i)"
    assert free_names(src) == ("y", "student")


def test_oversized_json_is_rejected_before_it_is_read():
    import socket
    import struct

    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(struct.pack("!II", wire.MAX_JSON_BYTES + 1, 0) + b"{")  # the rest never comes
        ours.settimeout(5)
        with pytest.raises(wire.WireError, match="too large"):
            wire.recv(ours)
    finally:
        ours.close()
        theirs.close()


def test_arguments_cross_as_copies_and_in_place_changes_are_still_seen():
    """The kernel's changes to an argument never reach the judge's object; check_unchanged still sees them."""
    from attention_course import check_unchanged
    from attention_course.grading.trust import changed_in_place

    X = np.arange(6.0).reshape(2, 3)
    before = X.copy()
    check_unchanged(before, X, "X")
    message = changed_in_place("scale", [X], [X * 0], ["X"])  # what a call that zeroed its input sends back
    assert np.array_equal(X, before), "the judge's own array must not change"
    assert message.startswith("your function scale changed its argument X in place"), message
    with pytest.raises(AssertionError, match="modified in place"):
        check_unchanged(before, X, "X")
    t = torch.ones(3)
    assert changed_in_place("f", [t], [torch.ones(3)], ["t"]) is None  # unchanged: nothing is noted
    assert "a function of yours changed an argument" in changed_in_place("<lambda>", [X], [X + 1], [None])
    check_unchanged(torch.ones(3), t, "t")


def test_judge_process_caps_its_own_work():
    """The judge process runs cells in a namespace that persists; its own work is capped in memory
    and time, and a cell that exceeds either fails with a message while the process goes on."""
    from attention_course.grading import forkserver
    from attention_course.grading.judgeproc import JudgeProcess

    judge = JudgeProcess(forkserver.server(["numpy"]), 2 * 2**30, os.getcwd())
    try:
        assert judge.request({"op": "locked", "source": "import numpy as np\nx_ = np.ones(3)", "timeout": 10},
                             20)["status"] == "ok"
        ok = judge.request({"op": "test", "source": "assert x_.sum() == 3", "timeout": 10}, 20)
        assert ok["status"] == "ok", ok
        big = judge.request({"op": "test", "source": "np.ones((30000, 30000))", "timeout": 10}, 20)
        assert big["status"] == "limit" and big["ename"] == "ResourceLimitError", big
        slow = judge.request({"op": "test", "source": "while True:\n    pass", "timeout": 2}, 10)
        assert slow["status"] == "limit" and "took longer than 2 s" in slow["evalue"], slow
        wrong = judge.request({"op": "test", "source": "assert x_.sum() == 4, 'no'", "timeout": 10}, 20)
        assert (wrong["status"], wrong["ename"], wrong["evalue"]) == ("error", "AssertionError", "no")
    finally:
        judge.close()
    assert not judge.alive()


def test_gradients_locally():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out, (gx,) = gradients(lambda t: (t ** 2, t.sum()), (x,), (torch.ones(2), torch.tensor(3.0)))
    assert torch.equal(gx, 2 * x.detach() + 3)


ATTEMPT = """
import json, os, socket, sys
result = {}
def attempt(name, fn):
    try:
        fn()
        result[name] = "allowed"
    except BaseException as exc:
        result[name] = type(exc).__name__
"""

PROBE = ATTEMPT + """
attempt("read course", lambda: open(sys.argv[1]).read())
attempt("write scratch", lambda: open(os.path.join(sys.argv[2], "ok.txt"), "w").write("x"))
attempt("write outside", lambda: open(sys.argv[3], "w").write("x"))
attempt("signal grader", lambda: os.kill(int(sys.argv[4]), 0))
attempt("grader memory", lambda: open(f"/proc/{sys.argv[4]}/mem", "rb").read(1))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9)))
attempt("other processes", lambda: open(f"/proc/{sys.argv[4]}/cmdline", "rb").read())
attempt("users", lambda: open("/etc/passwd").read())
attempt("8 GiB", lambda: bytearray(8 * 2**30))
import numpy
print(json.dumps(result))
"""


@pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6 (Linux 6.12): files, TCP and signals")
def test_sandbox_confines_a_process(tmp_path):
    from attention_course.grading.kernel import _read_paths

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = {"read": _read_paths(), "write": [str(scratch)], "memory_bytes": 4 * 2**30}
    (scratch / "config.json").write_text(json.dumps(config))
    outside = tmp_path / "outside.txt"
    proc = subprocess.run([sys.executable, "-m", "attention_course.grading.sandbox", str(scratch / "config.json"), "--",
                           sys.executable, "-c", PROBE, str(ROOT / "README.md"), str(scratch), str(outside), str(os.getpid())],
                          capture_output=True, text=True, cwd=scratch, timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result.pop("write scratch") == "allowed"
    assert all(v != "allowed" for v in result.values()), result
    assert not outside.exists()
    assert os.path.exists(ROOT / "README.md")


KERNEL_PROBE = ATTEMPT + """
attempt("read course", lambda: open(%(readme)r).read())
attempt("write outside", lambda: open(%(outside)r, "w").write("x"))
attempt("signal grader", lambda: os.kill(%(grader)d, 0))
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9)))
attempt("other processes", lambda: open(f"/proc/%(grader)d/cmdline", "rb").read())
attempt("list processes", lambda: [open(f"/proc/{p}/status").read() for p in os.listdir("/proc") if p.isdigit()
                                   and int(p) != os.getpid()] or None)
def inherited_channel():
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        kind = s.type
        s.close()
        if kind == socket.SOCK_SEQPACKET:
            return
    raise LookupError("no fork-server channel")
attempt("fork-server channel", inherited_channel)
import numpy, torch
own = open("/proc/self/status").read()[:4] + str(len(os.listdir("/proc/self/fd")) > 0)  # its own entry stays readable
print(json.dumps({"result": result, "cwd": os.getcwd(), "sum": float(torch.ones(3).sum() + numpy.ones(2).sum()),
                  "own": own}))
"""


@pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6 (Linux 6.12): files, TCP and signals")
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
def test_kernels_are_confined_however_they_start(tmp_path, fork):
    """A kernel forked from the fork server is as confined (and shows plots) as one started as a new program."""
    import logging

    from attention_course.grading.executor import JudgedExecute
    from attention_course.grading.kernel import Kernel

    settings = dict(JudgedExecute().settings(), fork=fork)
    outside = tmp_path / "outside.txt"
    kernel = Kernel(settings, logging.getLogger("test"))
    try:
        outputs, status, _ = kernel.run(KERNEL_PROBE % {"readme": str(ROOT / "README.md"), "outside": str(outside),
                                                        "grader": os.getpid()},
                                        60)
        assert status == "ok", outputs
        report = json.loads(outputs[-1]["text"].strip().splitlines()[-1])
        assert all(v != "allowed" for v in report["result"].values()), report
        assert report["cwd"] == str(kernel.scratch / "rw" / "work") and report["sum"] == 5.0
        assert report["own"] == "NameTrue", report
        figure, status, _ = kernel.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", 60)
        assert any("image/png" in o.get("data", {}) for o in figure), "plots must show inline, as in a new kernel"
        assert kernel.alive()
    finally:
        kernel.close()
    assert not kernel.alive() and not kernel.scratch.exists() and not outside.exists()


def test_a_deep_temporary_folder_still_grades(tmp_path, monkeypatch):
    """A TMPDIR so deep that a socket in it could not be bound (sun_path holds 107 bytes) still grades: the
    kernel's scratch then goes to /tmp, and is gone afterwards."""
    import logging
    import tempfile

    from attention_course.grading.executor import JudgedExecute
    from attention_course.grading.kernel import Kernel

    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    kernel = Kernel(dict(JudgedExecute().settings(), fork=False), logging.getLogger("test"))
    try:
        outputs, status, _ = kernel.run("print(6 * 7)", 60)
        assert status == "ok" and "42" in outputs[-1]["text"], outputs
        assert not kernel.scratch.is_relative_to(deep)
    finally:
        kernel.close()
    assert not kernel.scratch.exists() and not list(deep.iterdir())


def test_a_function_that_changes_an_argument_in_place_fails_the_check_that_calls_it(tmp_path, monkeypatch):
    """Every call of a student's function from a test cell: an argument changed in place fails the cell with a
    message that names the function and the parameter, whatever the test goes on to compare (the judge's own
    arrays are untouched either way); a function that leaves its arguments alone passes."""
    import __main__
    import threading

    from attention_course.grading.agent import Agent
    from attention_course.grading.judge import Connection, Judge

    def scale_rows(X, W, shift):  # a correct answer: new arrays only
        return (X - shift[0]) @ W

    def scale_rows_in_place(X, W, shift):  # the mistake: the caller's X is changed
        X -= shift[0]
        return X @ W

    for name, fn in (("scale_rows", scale_rows), ("scale_rows_in_place", scale_rows_in_place)):
        monkeypatch.setattr(__main__, name, fn, raising=False)
    path = str(tmp_path / "agent")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    test = ("X_ = np.arange(6.0).reshape(2, 3)\nW_ = np.eye(3)\nout_ = {f}(X_, W_, [np.ones(3)])\n"
            "assert np.array_equal(X_, np.arange(6.0).reshape(2, 3))  # the judge's own X_ is a copy's source\n")
    verdicts = {}
    for name in ("scale_rows", "scale_rows_in_place"):
        agent = threading.Thread(target=lambda: Agent(path).serve(), daemon=True)
        agent.start()
        sock, _ = server.accept()
        conn = Connection(sock)
        assert conn.wait_ready(10)
        judge = Judge(conn, frozenset({name}))
        judge.run("import numpy as np", fetch=False)
        try:
            judge.run(test.format(f=name))
            verdicts[name] = "passed"
        except AssertionError as exc:
            verdicts[name] = str(exc)
        finally:
            conn.done()
            agent.join(10)
            sock.close()
    server.close()
    assert verdicts["scale_rows"] == "passed"
    assert verdicts["scale_rows_in_place"].startswith(
        "your function scale_rows_in_place changed its argument X in place"), verdicts
