"""Unit tests of the judged grader's parts: the wire format, the judge's names, the sandbox."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch

from attention_course import gradients
from attention_course.grading import wire
from attention_course.grading.cells import free_names
from attention_course.grading.course import ROOT
from attention_course.grading.kernels.sandbox import landlock_abi


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


def test_arguments_cross_as_copies_and_in_place_changes_are_noted():
    """The kernel's changes to an argument never reach the judge's object; the change the kernel reports is a
    note naming the function and the parameter. check_unchanged compares what it is given: in a student's own
    kernel it sees the change, at autograde the test's own array is unchanged and it passes (no point rests on the
    kernel's report)."""
    from attention_course import check_unchanged
    from attention_course.grading.trust import changed_in_place

    X = np.arange(6.0).reshape(2, 3)
    before = X.copy()
    message = changed_in_place("scale", [X], [X * 0], ["X"])  # what a call that zeroed its input sends back
    assert np.array_equal(X, before), "the judge's own array must not change"
    assert message.startswith("your function scale changed its argument X in place"), message
    check_unchanged(before, X, "X")
    with pytest.raises(AssertionError, match="modified in place"):
        check_unchanged(before, X * 0, "X")  # as in the student's own kernel
    t = torch.ones(3)
    assert changed_in_place("f", [t], [torch.ones(3)], ["t"]) is None  # unchanged: nothing is noted
    for nan, same, other in ((torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]), torch.ones(2)),
                             (np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), np.ones(2))):
        assert changed_in_place("f", [nan], [same], ["t"]) is None  # a NaN where it was is not a change
        assert changed_in_place("f", [nan], [other], ["t"]) is not None  # a NaN overwritten is
    assert "a function of yours changed an argument" in changed_in_place(None, [X], [X + 1], [None])
    assert "changed an argument in place" in changed_in_place("scale", [X], [X * 0], ["X"], hidden=True)


def test_judge_process_caps_its_own_work():
    """The judge process runs cells in a namespace that persists; its own work is capped in memory
    and time, and a cell that exceeds either fails with a message while the process goes on."""
    from attention_course.grading.judging.judgeproc import JudgeProcess
    from attention_course.grading.kernels import forkserver

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
    from attention_course.grading.kernels.kernel import _read_paths

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = {"read": _read_paths(), "write": [str(scratch)], "memory_bytes": 4 * 2**30}
    (scratch / "config.json").write_text(json.dumps(config))
    outside = tmp_path / "outside.txt"
    proc = subprocess.run([sys.executable, "-m", "attention_course.grading.kernels.sandbox", str(scratch / "config.json"), "--",
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

    from attention_course.grading.judging.executor import JudgedExecute
    from attention_course.grading.kernels.kernel import Kernel

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


def test_an_error_shows_as_ipython_shows_it_and_its_history_copy_is_plain(tmp_path):
    """A forked kernel's error output is IPython's own (the failing line with its context, in colour); the copy IPython 9
    keeps for the history (formatted again, the same costly way) is Python's plain traceback (forkserver.plain_error_history)."""
    import logging

    from attention_course.grading.judging.executor import JudgedExecute
    from attention_course.grading.kernels.kernel import Kernel

    kernel = Kernel(dict(JudgedExecute().settings(), fork=True), logging.getLogger("test"))
    try:
        outputs, status, _ = kernel.run("def answer():\n    raise NotImplementedError('Replace this')\nanswer()", 60)
        shown = next(o for o in outputs if o["output_type"] == "error")
        assert status == "error" and shown["ename"] == "NotImplementedError", outputs
        text = "\n".join(shown["traceback"])
        assert "\x1b[" in text and "---->" in text and "In[1]" in text, text  # IPython's own: colour, context, cell
        kept, status, _ = kernel.run("h = get_ipython().history_manager.exceptions\n"
                                     "print(repr([e['traceback'][0] for e in h.values()]))", 60)
        assert status == "ok" and "Traceback (most recent call last)" in kept[-1]["text"], kept
    finally:
        kernel.close()


def test_a_count_the_kernel_sets_itself_leaves_a_notebook_nbformat_takes(tmp_path):
    """The kernel is the student's: a cell count it reports that nbformat refuses (a negative one, set by the student's
    own code) is kept as no count, for the cell and for its result, so the executed notebook is still one nbformat
    takes (before, such a notebook failed nbformat's check after execution, and its hand-in was not graded)."""
    import logging

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from attention_course.grading.judging.executor import JudgedExecute
    from attention_course.grading.kernels.kernel import Kernel

    kernel = Kernel(dict(JudgedExecute().settings(), fork=True), logging.getLogger("test"))
    try:
        _, status, _ = kernel.run("get_ipython().execution_count = -5", 60)
        outputs, status, count = kernel.run("41 + 1", 60)
        assert status == "ok" and count is None, (status, count)
        result = next(o for o in outputs if o["output_type"] == "execute_result")
        assert result["execution_count"] is None and result["data"]["text/plain"] == "42", result
        nbformat.validate(new_notebook(cells=[new_code_cell("41 + 1", execution_count=count, outputs=outputs)]))
        _, _, count = kernel.run("get_ipython().execution_count = 7", 60)
        _, _, count = kernel.run("pass", 60)
        assert count == 7, "a count nbformat takes is kept as the kernel reported it"
    finally:
        kernel.close()


def test_a_deep_temporary_folder_still_grades(tmp_path, monkeypatch):
    """A TMPDIR so deep that a socket in it could not be bound (sun_path holds 107 bytes) still grades: the
    kernel's scratch then goes to /tmp, and is gone afterwards."""
    import logging
    import tempfile

    from attention_course.grading.judging.executor import JudgedExecute
    from attention_course.grading.kernels.kernel import Kernel

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


def test_removing_a_scratch_folder_never_changes_the_folder_it_is_in(tmp_path):
    """A kernel's scratch is removed with what a kernel left read-only inside it; the temporary folder it sits in
    keeps its mode (1777) even when the scratch is already gone (a kernel closed twice, a folder swept meanwhile)."""
    import stat

    from attention_course.grading.kernels import scratch

    base = tmp_path / "tmp"
    base.mkdir()
    base.chmod(0o1777)
    scratch.remove(base / "attention-judge-gone")  # no such folder: no error, nothing else touched
    assert stat.S_IMODE(base.stat().st_mode) == 0o1777
    folder = base / "attention-judge-x"
    (folder / "rw" / "ro").mkdir(parents=True)
    (folder / "rw" / "ro" / "answer.txt").write_text("42")
    (folder / "rw" / "ro").chmod(0o500)
    (folder / "rw").chmod(0o500)
    scratch.remove(folder)
    assert not folder.exists() and stat.S_IMODE(base.stat().st_mode) == 0o1777


def test_a_scratch_folder_whose_maker_was_killed_is_removed_by_the_next(monkeypatch, request):
    """scratch.sweep_stale: a kernel's scratch folder or a fork server's home left by a process killed before it
    could remove it (a server the hub stopped, a grader killed) goes when the next process of the same user makes
    one, read-only parts and all; a folder whose maker still runs, one whose maker is not written, a link, and
    another user's folder stay."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from attention_course.grading.kernels import kernel, scratch

    # a temporary folder short enough that kernel.scratch_folder keeps it (pytest's tmp_path under xdist can be too
    # deep for a socket path, and the kernel's scratch then goes to /tmp: the sweep would look elsewhere)
    tmp_path = Path(tempfile.mkdtemp(prefix="sweep-", dir="/tmp"))
    request.addfinalizer(lambda: scratch.remove(tmp_path))

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(scratch, "_SWEPT", set())
    env = dict(os.environ, TMPDIR=str(tmp_path))
    make = ("from attention_course.grading.kernels import kernel, scratch; import os, sys, time; p = kernel.scratch_folder(); "
            "z = scratch.make('attention-zygote-'); (p / 'ro').mkdir(); (p / 'ro' / 'f').write_text('x'); "
            "(p / 'ro').chmod(0o500); print(p, z, flush=True); "
            "time.sleep(60) if sys.argv[1] == 'live' else os.kill(os.getpid(), 9)")
    live_proc = subprocess.Popen([sys.executable, "-c", make, "live"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        live = [Path(p) for p in live_proc.stdout.readline().split()]
        killed = subprocess.run([sys.executable, "-c", make, "killed"], env=env, capture_output=True, text=True)
        killed = [Path(p) for p in killed.stdout.split()]
        reused = Path(tempfile.mkdtemp(prefix=kernel.SCRATCH_PREFIX))  # this process's pid, another start time
        (reused / scratch.MAKER).write_text(f"{os.getpid()} 1\n")
        unwritten = Path(tempfile.mkdtemp(prefix=kernel.SCRATCH_PREFIX))
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / scratch.MAKER).write_text("999999999 1\n")
        (tmp_path / f"{kernel.SCRATCH_PREFIX}link").symlink_to(elsewhere)
        others = Path(tempfile.mkdtemp(prefix=kernel.SCRATCH_PREFIX))
        (others / scratch.MAKER).write_text("999999999 1\n")
        if os.geteuid() == 0:
            os.chown(others, 65534, 65534)
        assert len(killed) == 2 and all(p.is_dir() for p in killed) and (killed[0] / "ro" / "f").is_file(), \
            "the killed process removed its folders itself"

        mine = kernel.scratch_folder()
        assert (mine / scratch.MAKER).read_text().split()[0] == str(os.getpid())
        assert not any(p.exists() for p in killed) and not reused.exists()
        assert all(p.is_dir() for p in live) and unwritten.is_dir() and (elsewhere / scratch.MAKER).is_file()
        assert others.is_dir() == (os.geteuid() == 0)
        assert scratch.sweep_stale(tmp_path) == []  # (what the first sweep left, it leaves again)
    finally:
        live_proc.kill()
        live_proc.wait()


def judged(tmp_path, monkeypatch, functions: dict, cell: str, notes: dict | None = None,
           signatures: dict | None = None, hide: tuple = ()) -> dict:
    """Run the test cell ``cell`` in a judge whose student's namespace (served by the course agent in a thread of
    this process) holds ``functions``, once per function (``{f}`` in the cell names it): name -> the message
    the page would show (``judgeproc.outcome``), or "passed"; the judge's notes by name into ``notes``. The master's
    signatures (what the notes call the parameters) are ``signatures``, by default each function's own; ``hide``:
    the notebook's variables the calls are made without (:func:`attention_course.grading.trust.notebook_globals`)."""
    import inspect
    import threading

    import __main__
    from attention_course.grading.judging.agent import Agent
    from attention_course.grading.judging.judge import Connection, Judge
    from attention_course.grading.judging.judgeproc import outcome

    for name, fn in functions.items():
        monkeypatch.setattr(__main__, name, fn, raising=False)
    path = tempfile.mktemp(prefix="agent-", dir=tmp_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    verdicts = {}
    for name in functions:
        agent = threading.Thread(target=lambda: Agent(path).serve(), daemon=True)
        agent.start()
        sock, _ = server.accept()
        conn = Connection(sock)
        assert conn.wait_ready(10)
        judge = Judge(conn, frozenset({name}))
        conn.hide = tuple(hide)
        conn.signatures = signatures if signatures is not None else {
            n: tuple(inspect.signature(fn).parameters) for n, fn in functions.items()}
        judge.run("import numpy as np", fetch=False)
        try:
            judge.run(cell.format(f=name))
            verdicts[name] = "passed"
        except Exception as exc:  # noqa: BLE001  (what the grader would record)
            verdicts[name] = outcome(exc, 10, 2**30, judge)["evalue"]
        finally:
            if notes is not None:
                notes[name] = list(conn.notes)
            conn.done()
            agent.join(10)
            sock.close()
    server.close()
    return verdicts


def test_a_function_that_changes_an_argument_in_place_is_noted_and_loses_nothing(tmp_path, monkeypatch):
    """Every call of a student's function from a test cell: an argument changed in place is noted (the note names
    the function and the parameter) and the cell is judged on what the function returned; the judge's own arrays
    are untouched either way."""
    def scale_rows(X, W, shift):  # a correct answer: new arrays only
        return (X - shift[0]) @ W

    def scale_rows_in_place(X, W, shift):  # the mistake: the caller's X is changed
        X -= shift[0]
        return X @ W

    test = ("X_ = np.arange(6.0).reshape(2, 3)\nW_ = np.eye(3)\nout_ = {f}(X_, W_, [np.ones(3)])\n"
            "assert np.array_equal(X_, np.arange(6.0).reshape(2, 3))  # the judge's own X_ is a copy's source\n"
            "assert np.array_equal(out_, (X_ - 1) @ W_)\n")
    notes = {}
    verdicts = judged(tmp_path, monkeypatch, {"scale_rows": scale_rows, "scale_rows_in_place": scale_rows_in_place},
                      test, notes)
    assert verdicts == {"scale_rows": "passed", "scale_rows_in_place": "passed"}, verdicts
    assert notes["scale_rows"] == [] and len(notes["scale_rows_in_place"]) == 1, notes
    assert notes["scale_rows_in_place"][0].startswith("your function scale_rows_in_place changed its argument X in place")


def test_a_function_that_reads_the_notebooks_variables_fails_naming_the_one_it_read(tmp_path, monkeypatch):
    """The tests call a student's function with the notebook's variables (what the master's locked cells bind at
    their top level) out of reach: a function that takes a size from the book's example instead of its argument
    fails, on a visible line and on a hidden one, with a message naming the variable and nothing of the input,
    even when the example's size is the input's; a function that calls a function of the notebook, draws from the
    notebook's random generator or reads a variable of the student's own still runs; and every variable is back
    after each call, for the cells that follow."""
    import types

    import __main__
    from attention_course.grading.cells import global_names

    source = ("N_udl, D_udl = 3, 4\nrng = np.random.default_rng(0)\nfor i_ in range(2):\n    pass\n"
              "def helper(X):\n    inner = 5\n    return X\nsquares = [k_ * k_ for k_ in range(3)]\n")
    assert global_names(source) == {"N_udl", "D_udl", "rng", "i_", "helper", "squares"}  # not inner, not k_
    notebook = {"N_udl": 3, "D_udl": 4, "rng": np.random.default_rng(0), "helper": lambda X: X, "mine": 2.0, "np": np}
    for name, value in notebook.items():
        monkeypatch.setattr(__main__, name, value, raising=False)

    def in_notebook(fn):  # defined in the kernel's namespace, as a notebook cell defines it
        return types.FunctionType(fn.__code__, vars(__main__), fn.__name__)

    def column_sums_by_global(X):
        return np.array([X[:, j].sum() for j in range(D_udl)])  # noqa: F821  (the book's D)

    def column_sums(X):
        return helper(X).sum(axis=0) + 0.0 * rng.random() * mine  # noqa: F821

    class ByGlobal:
        def __init__(self):
            self.width = N_udl  # noqa: F821

        def __call__(self, X):
            return X.sum(axis=0)[: self.width]

    functions = {"column_sums_by_global": in_notebook(column_sums_by_global), "column_sums": in_notebook(column_sums)}
    hide = ("N_udl", "D_udl", "rng", "helper", "i_")
    visible = "X_ = np.arange(12.0).reshape(3, 4)\nassert np.allclose({f}(X_), X_.sum(axis=0))\n"
    hidden = "### BEGIN HIDDEN TESTS\nX_ = np.arange(%s.0).reshape(2, 4) * 7\nassert np.allclose({f}(X_), X_.sum(axis=0))\n" \
             "### END HIDDEN TESTS" % 8
    for cell in (visible, hidden):
        said = judged(tmp_path, monkeypatch, functions, cell, hide=hide)
        assert said["column_sums"] == "passed", said
        assert said["column_sums_by_global"].startswith("your code reads the notebook's variable D_udl"), said
        assert "56" not in said["column_sums_by_global"], said  # nothing of the input
        assert {name: getattr(__main__, name) for name in ("N_udl", "D_udl", "mine")} == {"N_udl": 3, "D_udl": 4,
                                                                                          "mine": 2.0}
    ByGlobal.__init__ = in_notebook(ByGlobal.__init__)
    said = judged(tmp_path, monkeypatch, {"ByGlobal": ByGlobal}, "{f}()(np.ones((2, 3)))\n", hide=hide)
    assert said["ByGlobal"].startswith("your code reads the notebook's variable N_udl"), said
    assert judged(tmp_path, monkeypatch, {"ByGlobal": ByGlobal}, "{f}()(np.ones((2, 3)))\n") == {"ByGlobal": "passed"}


#: A hidden input, spelled as the student's code would print it.
SECRET = "0.8135792468"


def test_a_hidden_check_quotes_nothing_the_students_code_said(tmp_path, monkeypatch):
    """On a hidden line, the page never shows what the student's code produced from the test's input: an
    exception's text (raised as is, wrapped by the test, cut to 200 characters), a string returned where an
    array belongs, the name of an exception class made from the input. On a visible line the same failures show
    whole: the student has those inputs."""
    def echo_value_error(X):
        raise ValueError(f"bad input {np.asarray(X).ravel().tolist()}")

    class Custom(Exception):
        pass

    def echo_custom(X):
        raise type(f"Leak_{str(float(np.asarray(X).ravel()[0]))[2:]}", (Custom,), {})("x")

    def returns_text(X):
        return f"input was {np.asarray(X).ravel().tolist()}"

    functions = {"echo_value_error": echo_value_error, "echo_custom": echo_custom, "returns_text": returns_text}
    visible = f"X_ = np.array([{SECRET}])\nout_ = np.asarray({{f}}(X_), dtype=float)\n"
    hidden = ("### BEGIN HIDDEN TESTS\n"
              f"X_ = np.array([{SECRET}])\n"
              "try:\n"
              "    out_ = np.asarray({f}(X_), dtype=float)\n"
              "except Exception as exc_:\n"
              "    raise AssertionError(f'{f} raised {{type(exc_).__name__}}: {{str(exc_)[:200]}}. Return an array.')\n"
              "### END HIDDEN TESTS\n")
    shown = judged(tmp_path, monkeypatch, functions, visible)
    assert SECRET in shown["echo_value_error"] and SECRET in shown["returns_text"], shown  # visible: whole
    kept = judged(tmp_path, monkeypatch, functions, hidden)
    for name, message in kept.items():
        assert message != "passed" and SECRET not in message and SECRET[2:8] not in message, (name, message)
    assert "raised ValueError" in kept["echo_value_error"] and "Return an array." in kept["echo_value_error"], kept
    bare = judged(tmp_path, monkeypatch, {"echo_value_error": echo_value_error},
                  "### BEGIN HIDDEN TESTS\n{f}(np.array([%s]))\n### END HIDDEN TESTS" % SECRET)
    assert bare["echo_value_error"].startswith("raised by your code on a hidden test's input"), bare


def test_a_note_speaks_only_the_courses_names(tmp_path, monkeypatch):
    """A function that changes its argument in place and then renames itself and its parameters after the input it
    was given: its note names it as the test looked it up and its argument as the master's signature does, never what
    the kernel says after the call; on a hidden line it names no argument at all (which one changed is the kernel's
    to say), and nothing of the hidden input reaches it."""
    def made():
        def softmax(S, axis=-1):
            leak = "".join(c if c.isalnum() else "_" for c in str(np.asarray(S).ravel().tolist()))
            S -= 1.0
            softmax.__name__ = softmax.__qualname__ = f"x{leak}"  # what the kernel would report after the call
            softmax.__code__ = softmax.__code__.replace(co_varnames=(f"x{leak}",) + softmax.__code__.co_varnames[1:])
            return np.asarray(S)
        return softmax

    master = {"softmax": ("S", "axis")}
    for cell, hidden in (("X_ = np.array([%s])\nsoftmax(X_)\n" % SECRET, False),
                         ("### BEGIN HIDDEN TESTS\nX_ = np.array([%s])\nsoftmax(S=X_)\n### END HIDDEN TESTS" % SECRET,
                          True)):
        notes = {}
        verdicts = judged(tmp_path, monkeypatch, {"softmax": made()}, cell, notes, master)
        assert verdicts == {"softmax": "passed"} and len(notes["softmax"]) == 1, (verdicts, notes)
        [note] = notes["softmax"]
        assert SECRET not in note and SECRET.replace(".", "_") not in note and "x" + "0_" not in note, note
        expected = "your function softmax changed " + ("an argument" if hidden else "its argument S") + " in place"
        assert note.startswith(expected), note


def _message(kind: str, **content) -> dict:
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {}, "content": content}


def test_every_byte_a_kernel_sends_for_a_cell_counts():
    """kernel_io.Cell (issue D2): an error's name, message and traceback, a display's metadata and transient data
    count against the cell's cap and the notebook's, measured as the notebook file holds them; streams and errors are
    cut to fit, a display is kept whole or left out; the cell's first error is always kept (what an error decides
    stays decided), even past the notebook's cap, until a last megabyte for errors and notes is spent; a note says what
    was cut."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from attention_course.grading.kernels.kernel_io import NOTE, OVERFLOW, Budget, Cell

    cap = 2**16
    cell = Cell(cap, Budget(10 * cap))
    cell.add(_message("error", ename="E" * 5000, evalue="x" * 10 * cap, traceback=["\x1b[31m" + "t" * 10 * cap, "end"]))
    for _ in range(20):
        cell.add(_message("error", ename="ValueError", evalue="v" * 2000, traceback=["t\n" * 1000]))
    cell.add(_message("display_data", data={"text/plain": "small"}, metadata={"junk": "m" * cap}))
    cell.add(_message("display_data", data={"text/plain": "small"}, metadata={}, transient={"junk": "t" * cap}))
    outputs = cell.finish()
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert errors and errors[0]["ename"].startswith("EEE") and len(errors[0]["ename"]) <= 200, len(errors[0]["ename"])
    assert errors[0]["evalue"].startswith("xxx") and errors[0]["traceback"][0].startswith("\x1b[31mttt"), errors[0]
    assert not [o for o in outputs if o["output_type"] == "display_data"], "a display over the cap is left out"
    note = outputs[-1]["text"]
    assert NOTE in note and "errors" in note and "2 displays" in note, note
    written = len(nbformat.writes(new_notebook(cells=[new_code_cell(outputs=outputs)])).encode())
    assert written < cap + 4000, f"the cell's outputs take {written} bytes in the notebook file (cap {cap})"

    budget, sizes = Budget(3 * cap), []
    for _ in range(6):  # each cell under its cap, all of them over the notebook's
        cell = Cell(cap, budget)
        cell.add(_message("stream", name="stdout", text="<\n" * (cap // 20)))
        outputs = cell.finish()
        sizes.append(len(nbformat.writes(new_notebook(cells=[new_code_cell(outputs=outputs)])).encode()))
    assert sum(sizes) < 3 * cap + 6 * 2000, sizes
    assert "which is reached" in outputs[-1]["text"], outputs
    late = Cell(cap, budget)
    late.add(_message("error", ename="ZeroDivisionError", evalue="division by zero", traceback=["1/0"]))
    assert late.finish()[0]["ename"] == "ZeroDivisionError", "an error past the notebook's cap is still shown"
    kept = 0
    for _ in range(3000):  # past the cap, errors and notes have OVERFLOW bytes, then a cell keeps nothing
        cell = Cell(cap, budget)
        cell.add(_message("error", ename="ValueError", evalue="v" * 5000, traceback=["t" * 5000]))
        kept += len(json.dumps(cell.finish()))
        assert cell.error
    assert kept <= OVERFLOW + 2000, kept

    refused = Cell(cap)  # the kernel's reply (an error's traceback, most likely) was too large to read
    refused.dropped(["iopub", "shell"])
    outputs = refused.finish()
    assert refused.error and outputs[0]["ename"] == "OutputTooLarge" and "not read" in outputs[-1]["text"], outputs


def test_a_kernel_cannot_make_the_grader_read_or_keep_more_than_its_caps():
    """Issue D2, in one kernel: a 40 MiB error with an 8 MiB note is never read (a message over max_message_bytes:
    ZeroMQ drops it, the grader connects again, and the cell still counts as an error); a 1 MiB exception name and a
    5 MiB message, 100 errors in one cell, and displays with 10 MiB of metadata or of transient data are read and cut
    to the cell's cap, with a note. The kernel keeps its state (no restart), later cells are read as before, and the
    grading process's resident memory grows by a bounded amount (it grew by the whole error, twice, before)."""
    import logging
    import time

    import adversarial  # tests/catalogue: a cell that defines a name, the hostile cells, cells that read the name

    from attention_course.grading.judging.executor import JudgedExecute
    from attention_course.grading.kernels.kernel import Kernel
    from attention_course.grading.kernels.kernel_io import MAX_OUTPUT_BYTES, NOTE, Budget

    def rss(field: str) -> int:
        status = open("/proc/self/status").read()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith(field))) * 1024

    kernel = Kernel(JudgedExecute().settings(), logging.getLogger("test"))
    try:
        budget, results = Budget(16 * 2**20), []
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM (the peak) starts again from here
        before, started = rss("VmRSS"), time.monotonic()
        for source in ["kept_ = 42", adversarial.HUGE_ERROR, adversarial.LONG_NAME, adversarial.MANY_ERRORS,
                       adversarial.BIG_METADATA, "print(kept_)", "1/0"]:
            results.append(kernel.run(source, 60, budget=budget))
        grew, took = rss("VmHWM") - before, time.monotonic() - started
        assert kernel.alive()
    finally:
        kernel.close()
    statuses = [status for _, status, _ in results]
    assert statuses == ["ok", "error", "error", "error", "ok", "ok", "error"], statuses
    for outputs, _, _ in results:
        assert len(json.dumps(outputs)) < MAX_OUTPUT_BYTES + 8000
    huge, long_name, many, displays = (outputs for outputs, _, _ in results[1:5])
    assert huge[0]["ename"] == "OutputTooLarge" and "not read" in huge[-1]["text"], huge
    assert long_name[0]["ename"].startswith("EEE") and len(long_name[0]["ename"]) <= 200, len(long_name[0]["ename"])
    assert long_name[0]["evalue"].startswith("yyy"), long_name[0]["evalue"][:9]
    assert NOTE in long_name[-1]["text"] and NOTE in many[-1]["text"] and "errors" in many[-1]["text"]
    assert NOTE in displays[-1]["text"] and "display" in displays[-1]["text"], displays
    assert results[5][0] == [{"output_type": "stream", "name": "stdout", "text": "42\n"}], "the kernel lost its state"
    assert results[6][0][0]["ename"] == "ZeroDivisionError"
    assert grew < 192 * 2**20, f"the grading process grew by {grew / 2**20:.0f} MiB reading the flood ({took:.0f} s)"


def test_grading_processes_are_forked_from_the_course_command_only_while_it_runs_alone(monkeypatch):
    """Local grading processes are forked from the course command (nbgrader imported once, before the run), but only
    from a process that runs one thread and grades nothing itself (no kernel pool, fork server or grading API of its
    own); otherwise they are fresh Pythons."""
    from attention_course.grading.kernels import forkserver
    from attention_course.grading.run import worker

    monkeypatch.setattr(forkserver, "_SERVERS", {})
    monkeypatch.setattr(worker, "_API", None)
    monkeypatch.setattr(worker.POOL, "holds", lambda: False)
    monkeypatch.setattr(worker, "os_threads", lambda: 1)  # (other tests of this process may have left threads)
    assert worker.worker_context().get_start_method() == "fork"
    for name, value in (("os_threads", lambda: 2), ("_API", object())):
        with monkeypatch.context() as m:
            m.setattr(worker, name, value)
            assert worker.worker_context().get_start_method() == "spawn", name
    with monkeypatch.context() as m:
        m.setattr(worker.POOL, "holds", lambda: True)
        assert worker.worker_context().get_start_method() == "spawn", "a kernel pool"
    monkeypatch.setattr(forkserver, "_SERVERS", {("numpy",): object()})
    assert worker.worker_context().get_start_method() == "spawn", "a fork server"


def test_the_course_command_runs_one_thread_when_it_starts_its_grading_processes():
    """The course command, its modules imported and nbgrader's configuration read as for a run, runs one thread as the
    system counts them (no library's thread pool: NumPy's would start one), so its grading processes are forked."""
    code = ("import os, sys\nimport attention_course.grading.__main__\nfrom nbgrader.apps.baseapp import NbGrader\n"
            "from attention_course.grading.run.worker import worker_context\n"
            "app = NbGrader()\napp.initialize([])\n"
            "print(len(os.listdir('/proc/self/task')), worker_context().get_start_method(), 'numpy' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1", "fork", "False"], run.stdout


def test_a_forked_grading_process_holds_neither_the_writer_lock_nor_a_database_engine_of_its_parent(tmp_path):
    """A grading process forked from the course command closes its copy of the gradebook's writer lock (the lock stays
    the parent's, and ends with it) and opens database connections of its own (a new engine for the same URL)."""
    import nbgrader.api

    from attention_course.grading.nbgrader_glue import patches
    from attention_course.grading.nbgrader_glue.gradebook import Writer, close_inherited_locks

    def locked() -> bool:  # another writer (a file of its own) cannot take the lock
        other = Writer(tmp_path)
        if other.acquire(block=False):
            other.release()
            return False
        return True

    patches.install()
    engine = nbgrader.api.create_engine("sqlite://")
    assert nbgrader.api.create_engine("sqlite://") is engine
    writer = Writer(tmp_path)
    assert writer.acquire(block=False)
    told, tell = os.pipe()
    heard, hear = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what a forked grading process does first; it says so, then waits for the parent
        try:
            os.close(told)
            os.close(hear)
            close_inherited_locks()
            os.write(tell, b"new" if nbgrader.api.create_engine("sqlite://") is not engine else b"same")
            os.read(heard, 1)
        finally:
            os._exit(0)
    os.close(tell)
    os.close(heard)
    try:
        said = os.read(told, 16)
        assert said == b"new", "a forked process reused its parent's database engine"
        assert locked(), "the child's closing its copy released the parent's lock"
        writer.release()
        assert not locked(), "the forked child still holds the writer lock after its parent released it"
    finally:
        os.write(hear, b"x")
        os.close(hear)
        os.close(told)
        os.waitpid(pid, 0)
        writer.release()
    assert nbgrader.api.create_engine("sqlite://") is engine
