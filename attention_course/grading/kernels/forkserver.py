"""Kernels forked from a process that has already imported the heavy libraries.

Importing torch, numpy, matplotlib and ipykernel takes seconds of CPU; a grader that starts a
fresh Python for every notebook pays them every time. Instead, each grading process starts
one *fork server* (a zygote) that imports them once and then waits. A kernel is a fresh fork
of it: a new process of its own, with nothing in it but the imported libraries, that confines
itself with :mod:`attention_course.grading.kernels.sandbox` and then becomes an IPython kernel.

The zygote runs no student code and holds no grading data. Its only channel is a socket pair
inherited from the grader (no path on disk that a kernel could connect to), which every
kernel closes before it confines itself. The zygote ends with the grader (EOF on that channel);
every kernel dies with the zygote (a parent-death signal).
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback

from ..judging.judgeproc import serve
from . import sandbox, scratch

_PR_SET_PDEATHSIG = 1
#: attention_course.checks.EXPECTED_LOG (not imported: that would load the notebooks' package here)
EXPECTED_LOG = "ATTENTION_COURSE_EXPECTED_LOG"
_MAX_REQUEST = 1 << 20


class _KernelProcess:
    pid: int

    def alive(self) -> bool:
        raise NotImplementedError

    def interrupt(self) -> None:
        """SIGINT to the kernel's process group (it leads a session of its own)."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGINT)
            except OSError:
                pass


class Forked(_KernelProcess):
    """A kernel process forked by the zygote (not our child): watched and signalled through a pidfd."""

    def __init__(self, pid: int, pidfd: int):
        self.pid, self.pidfd = pid, pidfd

    def alive(self) -> bool:
        if self.pidfd < 0:
            return False
        readable, _, _ = select.select([self.pidfd], [], [], 0)
        return not readable

    def kill(self) -> None:
        if self.alive():
            for send in (lambda: signal.pidfd_send_signal(self.pidfd, signal.SIGKILL),
                         lambda: os.killpg(self.pid, signal.SIGKILL)):
                try:
                    send()
                except OSError:
                    pass
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


class Spawned(_KernelProcess):
    """A kernel started as a new program (when no fork server is used)."""

    def __init__(self, cmd: list[str], cwd: str, env: dict, stderr):
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=stderr, start_new_session=True)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            for send in (lambda: os.killpg(self.pid, signal.SIGKILL), self.proc.kill):
                try:
                    send()
                except OSError:
                    pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


class ForkServer:
    """The grader's handle on its zygote; thread-safe, started on first use, restarted if it died."""

    def __init__(self, preload: list[str]):
        self.preload = list(preload)
        self.lock = threading.Lock()
        self.proc = None
        self.sock = None
        self.home = None
        self.final = False  # closed for good (the grading process is ending): start no zygote again

    def _start(self) -> None:
        if self.final:
            raise RuntimeError("the grading process is shutting down")
        self.close()
        self.home = str(scratch.make("attention-zygote-"))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": self.home, "TMPDIR": self.home,
               "MPLCONFIGDIR": self.home, "MPLBACKEND": "Agg", "LANG": "C.UTF-8", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               # One thread per kernel and judge: the course's tensors are tiny, and grading runs one notebook per
               # core; threads of several processes contending for the same cores slow torch many times over.
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        if EXPECTED_LOG in os.environ:  # the course's own tests (judges inherit it; kernels get their own env)
            env[EXPECTED_LOG] = os.environ[EXPECTED_LOG]
        code = "import attention_course.grading.kernels.forkserver as f; f.zygote(%d, %r)" % (theirs.fileno(), self.preload)
        with open(os.path.join(self.home, "stderr.txt"), "wb") as log:  # its noise stays out of the grader's log
            self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=self.home, env=env,
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, start_new_session=True)
        theirs.close()
        self.sock = ours

    def launch(self, cmd_args: list[str], config_path: str, cwd: str, env: dict, stderr_path: str) -> Forked:
        """Fork a kernel: it joins its sandbox (``config_path``), then runs ipykernel with ``cmd_args``."""
        return self._fork({"args": cmd_args, "config": config_path, "cwd": cwd, "env": env, "stderr": stderr_path})

    def launch_judge(self, channel: int, memory_bytes: int, cwd: str) -> Forked:
        """Fork a judge process (:mod:`attention_course.grading.judging.judgeproc`) serving requests on ``channel``."""
        return self._fork({"judge": {"memory_bytes": memory_bytes, "cwd": cwd}}, [channel])

    def _fork(self, request: dict, fds: list[int] = ()) -> Forked:
        request = json.dumps(request).encode()
        with self.lock:
            why = "no reply"
            for _ in range(2):  # a zygote that died is started again, once
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                try:
                    socket.send_fds(self.sock, [request], list(fds))
                    data, fds_back, _, _ = socket.recv_fds(self.sock, 4096, 1)
                except OSError:
                    data, fds = b"", []
                if data:
                    break
                why = self._stderr_tail() or why
                self.close()
            reply = json.loads(data or b"{}")
            if "pid" not in reply or not fds_back:
                raise RuntimeError(f"the fork server could not start a process: {reply.get('error') or why}")
            return Forked(reply["pid"], fds_back[0])

    def _stderr_tail(self) -> str:
        try:
            with open(os.path.join(self.home, "stderr.txt"), encoding="utf-8", errors="replace") as f:
                return f.read()[-2000:].strip()
        except (OSError, TypeError):
            return ""

    def close(self, final: bool = False) -> None:
        self.final = self.final or final
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


_SERVERS: dict[tuple, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def server(preload: list[str]) -> ForkServer:
    """This process's fork server for a preload list (one zygote per grading process)."""
    key = tuple(preload)
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = ForkServer(preload)
        return _SERVERS[key]


def running() -> bool:
    """Whether this process has a fork server's handle, started or not (a process forked from it must not share its
    zygote)."""
    with _SERVERS_LOCK:
        return bool(_SERVERS)


@atexit.register  # registered at import, so it runs after the handlers of modules that use the servers
def close_all() -> None:  # (the kernel pool's, which may still be starting a kernel), never before
    with _SERVERS_LOCK:
        for srv in _SERVERS.values():
            srv.close(final=True)


# -- the zygote --------------------------------------------------------------------------
def zygote(fd: int, preload: list[str]) -> None:
    """Import ``preload`` (and ipykernel), then fork one kernel per request until the grader goes away."""
    # No parent-death signal here: it would fire when the grader *thread* that started the zygote
    # ends. The zygote ends on EOF instead, which comes however the grader ends.
    libc = ctypes.CDLL(None, use_errno=True)
    sock = socket.socket(fileno=fd)

    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # the kernel imports it again and reports what is wrong
            pass
    # The course's own modules that every kernel (the agent) and judge (its process) runs, imported once here.
    for name in ("attention_course.grading.judging.agent", "attention_course.grading.judging.judgeproc",
                 "attention_course.grading.kernels.rootfs"):
        importlib.import_module(name)
    # What a kernel imports while it starts (ipykernel, its shell, debugger and history), imported here once.
    for name in ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.debugger",
                 "IPython.core.history", "pdb", "faulthandler"):
        importlib.import_module(name)
    if "torch" in sys.modules:  # what PyTorch imports, SymPy with it (0.33 s), the first time backward() or
        try:  # autograd.grad is given a gradient: in the kernels and judges of assignments 2, 3 and 7
            importlib.import_module("torch.fx.experimental.symbolic_shapes")
        except Exception:  # another PyTorch: its kernels import what they need themselves
            pass

    sandbox.libseccomp()  # libseccomp found and loaded once, here, not in every kernel
    plain_error_history()

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels are reaped by the system
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, 4)
        except OSError:
            data, fds = b"", []
        if not data:
            os._exit(0)
        try:
            request = json.loads(data)
            pid = os.fork()
        except Exception as exc:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": repr(exc)}).encode())
            continue
        if pid == 0:
            if "judge" in request and fds:
                _judge_child(sock, request["judge"], fds, libc)
            _child(sock, request, libc)
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            sock.send(json.dumps({"error": f"the kernel exited at once ({exc})"}).encode())
            continue
        socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
        os.close(pidfd)


def plain_error_history() -> None:
    """IPython 9 formats each error of a cell twice, the same way: for the cell's output, and again for its history
    (``history_manager.exceptions``, read by ``%notebook`` alone). With PyTorch imported each costs tens of
    milliseconds (the traceback's module lookup walks every module for every frame), most of an unanswered notebook's
    time in its kernel. A kernel of this zygote keeps the history's copy in Python's own words instead (IPython's own
    fallback, a fraction of the cost); what the cell shows is IPython's as before."""
    try:
        from IPython.core.interactiveshell import InteractiveShell
    except ImportError:
        return
    if not hasattr(InteractiveShell, "_format_exception_for_storage"):  # an IPython that keeps no such copy
        return

    def stored(self, exception, filename=None, running_compiled_code=False):
        try:  # (an exception whose str() raises: IPython's own copy would raise out of the cell's run; this keeps less)
            lines = traceback.format_exception(type(exception), exception, exception.__traceback__)
            return {"ename": type(exception).__name__, "evalue": str(exception), "traceback": lines}
        except Exception:
            return {"ename": type(exception).__name__, "evalue": "", "traceback": []}

    InteractiveShell._format_exception_for_storage = stored


def _judge_child(sock: socket.socket, settings: dict, fds: list[int], libc) -> None:
    """In a fresh fork: become a judge process (trusted code, untrusted data: capped). Never returns."""
    status = 1
    try:
        sock.close()
        for fd in fds[1:]:
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.setsid()
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1):
            os.dup2(devnull, target)
        os.close(devnull)
        status = serve(fds[0], settings)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def _child(sock: socket.socket, request: dict, libc) -> None:
    """In a fresh fork: leave the zygote's state behind, confine, become the kernel. Never returns."""
    status = 1
    try:
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(err, 2)
        os.close(devnull)
        os.close(err)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        if "matplotlib" in sys.modules:  # the backend a new kernel would pick (inline), not the zygote's Agg
            sys.modules["matplotlib"].rcParams["backend"] = (request["env"].get("MPLBACKEND")
                                                             or "module://matplotlib_inline.backend_inline")
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        sandbox.confine(request["config"])
        sys.argv = ["ipykernel_launcher", *request["args"]]
        from ipykernel.kernelapp import IPKernelApp

        IPKernelApp.launch_instance(argv=request["args"])
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(status)
