"""One student's kernel: a sandboxed IPython kernel, forked from the fork server, with the course agent
connected to the judge. :class:`KernelPool` keeps the next one starting while a notebook runs.

The scratch folder of a kernel (``attention-judge-*`` in the temporary folder) holds, seen from the grader::

    kernel.json  judge.sock    the kernel's connection file and the judge's socket (the kernel's user only)
    ipc/                       the kernel's ZeroMQ sockets (it may make sockets here, nothing else)
    in/                        the hand-in's files, read-only for the kernel, copied into its working folder
    rw/                        the kernel's only writable place: a size-limited file system of its own
                               (``work/`` its working folder, ``home/``, ``tmp/``, ``shm/`` its /dev/shm),
                               gone when it ends
    root/                      where the kernel's own root is mounted (:mod:`.rootfs`): the kernel sees nothing
                               of the host's tree but what its sandbox shows it
    sandbox.json               what the sandbox could not do, and its facts (uid, namespaces, caps)
    maker                      the pid and start time of the process that made the folder (the grader's only):
                               a folder whose maker is gone is removed by the next (:mod:`.scratch`)
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import queue
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from jupyter_client.connect import write_connection_file

from ..course import PACKAGE_DIR
from ..judging.judge import Connection
from . import cgroups, forkserver, scratch
from .clock import Clock, peer_pid
from .forkserver import Spawned
from .kernel_io import MAX_MESSAGE_BYTES, Budget, Channels, read

SERVE = "__import__('attention_course.grading.judging.agent', fromlist=['serve']).serve()"
BOOT = "__import__('attention_course.grading.judging.agent', fromlist=['connect']).connect({path!r})"
#: Copies the hand-in's files into the kernel's working folder, inside the sandbox, before any student code.
STAGE = "__import__('shutil').copytree({src!r}, '.', dirs_exist_ok=True)"


def _read_paths() -> list[str]:
    """What a kernel may read: the Python installation and its packages, and the course package.

    Never the course folder (gradebook, ``source/``, other students' files) nor any folder above it."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(PACKAGE_DIR)}
    paths.update(p for p in sys.path if "site-packages" in p or os.path.basename(p).startswith(("python3", "lib-dynload")))
    paths.update(["/usr", "/lib", "/lib64", "/bin", "/proc", "/sys", "/dev/urandom", "/dev/random", "/dev/zero",
                  "/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf",
                  "/etc/mime.types", "/etc/matplotlibrc", "/etc/fonts"])
    course = os.path.realpath(os.getcwd()) + os.sep
    return sorted(p for p in paths if os.path.exists(p) and not course.startswith(os.path.realpath(p) + os.sep))


#: The longest path a Unix socket can bind (sun_path holds 108 bytes with its NUL); the kernel's ZeroMQ
#: sockets and the judge's socket live in the scratch folder as ``ipc/k-1`` … and ``judge.sock``.
_SOCKET_PATH_MAX = 107
_LONGEST_SOCKET = "/judge.sock"


SCRATCH_PREFIX = "attention-judge-"


def scratch_folder() -> Path:
    """A fresh scratch folder in the temporary folder (``TMPDIR``), or in /tmp when ``TMPDIR`` is so deep that
    a socket path inside it would be too long to bind (:func:`.scratch.make`: one that outlives a killed maker is
    removed by the next)."""
    base = tempfile.gettempdir()
    if len(base) + len(f"/{SCRATCH_PREFIX}12345678") + len(_LONGEST_SOCKET) > _SOCKET_PATH_MAX:
        base = "/tmp"
    return scratch.make(SCRATCH_PREFIX, base)


_SERIAL = itertools.count()


def kernel_uid(base: int) -> int | None:
    """The uid a root grader's next kernel runs as: one of its own, never 0 (None when not root).

    ``base`` + 16 per grading process (by pid) + a slot: no two live kernels share a uid."""
    if os.geteuid() != 0 or base <= 0:
        return None
    return base + ((os.getpid() % (1 << 22)) << 4) + next(_SERIAL) % 16


def _own(path: Path, uid: int | None, mode: int) -> None:
    if uid is not None:
        os.chown(path, uid, uid)
    os.chmod(path, mode)


def sandbox_config(scratch: Path, settings: dict, uid: int | None, groups: cgroups.Cgroups) -> dict:
    """Lay out a kernel's scratch folder (see the module) and write the sandbox's configuration for it."""
    os.chmod(scratch, 0o711)  # the kernel's user may pass through, not list
    for name, mode in (("ipc", 0o700), ("rw", 0o700), ("in", 0o755), ("root", 0o700)):
        (scratch / name).mkdir(exist_ok=True)
        _own(scratch / name, uid if name not in ("in", "root") else None, mode)
    if (scratch / "judge.sock").exists():
        _own(scratch / "judge.sock", uid, 0o600)
    rw = scratch / "rw"
    read = _read_paths()
    config = {"read": read + [str(scratch / "in"), str(scratch / "kernel.json")],
              "write": [str(rw), "/dev/null"], "sockets": [str(scratch / "ipc")],
              # the kernel's whole file system: what it may read, its scratch folder (sockets in ipc/ only)
              "view": {"root": str(scratch / "root"), "read": read, "scratch": str(scratch),
                       "writable": [str(scratch / "ipc")]},
              "scratch_fs": {"path": str(rw), "bytes": settings["scratch_bytes"],
                             "dirs": ["work", "home", "tmp", "shm"]},
              "cwd": str(rw / "work"), "uid": uid, "gid": uid,
              "memory_bytes": settings["memory_bytes"], "processes": settings["processes"],
              "file_bytes": settings["file_bytes"], "report": str(scratch / "sandbox.json"),
              "cgroups": groups.procs_files}
    (scratch / "sandbox-config.json").write_text(json.dumps(config))
    return config


#: What every sandboxed kernel writes on its standard error while it starts (ipykernel cannot bind its subprocess
#: pipe to TCP loopback: there is no network): not a cause.
_STDERR_NOISE = ("Couldn't bind IOPub Pipe", "subprocess output will be unavailable", "self._setup_pipe_in()")


class Kernel:
    """One sandboxed kernel with the course agent connected to the judge."""

    def __init__(self, settings: dict, log):
        self.log = log
        self.settings = settings
        self.scratch = scratch_folder()
        self.proc = self.channels = self.listener = self.conn = None
        self.cgroups = cgroups.Cgroups()
        self.facts: dict = {}
        self.credit = 0.0  # wall seconds of its cells the machine took from it (:func:`.kernel_io.read`)
        self.main_pid = None
        self.counters: list[str] = []  # its cgroup's CPU counter, where its main process is in that cgroup
        try:
            self._boot(settings, log)
        except BaseException:  # a kernel that could not start leaves nothing behind
            self.close()
            raise

    def _boot(self, settings: dict, log) -> None:
        scratch, uid = self.scratch, kernel_uid(settings.get("uid_base", 0))
        sock_path = str(scratch / "judge.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(sock_path)
        self.listener.listen(1)
        if settings.get("cgroups", True):
            self.cgroups = cgroups.create(scratch.name, settings["memory_bytes"], settings["processes"])
        sandbox_config(scratch, settings, uid, self.cgroups)
        rw = scratch / "rw"
        env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(rw / "home"),
               "TMPDIR": str(rw / "tmp"), "MPLCONFIGDIR": str(rw / "home"),
               "IPYTHONDIR": str(rw / "home" / ".ipython"), "JUPYTER_RUNTIME_DIR": str(rw / "home"),
               "LANG": "C.UTF-8", "NBGRADER_EXECUTION": settings.get("execution", "autograde"),
               "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               "USER": "student", "LOGNAME": "student"}
        connection_file = str(scratch / "kernel.json")
        write_connection_file(connection_file, transport="ipc", ip=str(scratch / "ipc" / "k"),
                              key=uuid.uuid4().hex.encode())
        _own(Path(connection_file), uid, 0o600)
        args = ["-f", connection_file, "--HistoryManager.hist_file=:memory:"]
        config_path, stderr_path = str(scratch / "sandbox-config.json"), str(scratch / "kernel-stderr.txt")
        if settings["fork"]:  # a fork of this process's zygote, heavy imports done
            self.proc = forkserver.server(settings["preload"]).launch(args, config_path, str(scratch), env,
                                                                      stderr_path)
        else:
            with open(stderr_path, "wb") as stderr:  # kernel noise stays out of the log
                self.proc = Spawned([sys.executable, "-m", "attention_course.grading.kernels.sandbox", config_path, "--",
                                     sys.executable, "-m", "ipykernel_launcher", *args], str(scratch), env, stderr)
        self.channels = Channels(connection_file, settings.get("max_message_bytes", MAX_MESSAGE_BYTES))
        self._wait_ready(settings["startup_timeout"])
        try:
            report = json.loads((scratch / "sandbox.json").read_text())
            self.facts = report.get("facts", {})
            for note in report.get("notes", []):
                log.warning("sandbox: %s", note)
        except (OSError, ValueError, AttributeError):
            pass
        self.listener.settimeout(settings["startup_timeout"])
        outputs, status, _ = self.run(BOOT.format(path=sock_path), settings["startup_timeout"], silent=True)
        if status != "ok":
            raise RuntimeError(f"the course agent did not start in the kernel: {outputs}")
        sock, _ = self.listener.accept()
        self.main_pid = peer_pid(sock)  # the kernel's own process: the agent connected from it, before any student code
        self.counters = [f for f in self.cgroups.cpu_files() if self.main_pid and cgroups.holds(f, self.main_pid)]
        self.conn = Connection(sock)
        if settings["preload"]:  # heavy imports, done before any student code runs
            self.run("import " + ", ".join(settings["preload"]), settings["startup_timeout"], silent=True, keep=False)

    @property
    def kc(self):
        """The grader's Jupyter client of the kernel (:class:`.kernel_io.Channels`: shell and IOPub, capped)."""
        return self.channels.kc if self.channels is not None else None

    def _wait_ready(self, timeout: float) -> None:
        """Until the kernel answers on the shell channel and its IOPub messages reach us.

        (jupyter_client's ``wait_for_ready`` also waits for 0.2 s of IOPub silence; this does not.)"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError(f"the kernel exited while starting: {self.stderr_line()}")
            msg_id = self.kc.kernel_info()
            try:
                self.kc.shell_channel.get_msg(timeout=0.5)
            except queue.Empty:
                continue
            until = time.monotonic() + 0.05
            while time.monotonic() < until:
                try:
                    msg = self.kc.iopub_channel.get_msg(timeout=0.01)
                except queue.Empty:
                    continue
                if msg.get("parent_header", {}).get("msg_id") == msg_id and msg["msg_type"] == "status" \
                        and msg["content"].get("execution_state") == "idle":
                    return
        raise RuntimeError(f"the kernel did not start within {timeout} s: {self.stderr_line()}")

    def stderr_line(self) -> str:
        """The last line the kernel wrote on its standard error (a failed start's cause), or what the sandbox
        reported it could not do."""
        try:
            text = (self.scratch / "kernel-stderr.txt").read_text(errors="replace")
        except OSError:
            text = ""
        lines = [line for line in text.splitlines() if line.strip() and not any(n in line for n in _STDERR_NOISE)]
        last = next((line for line in reversed(lines) if not line[0].isspace()), lines[-1] if lines else "")
        return last.strip()[:500] or "it wrote nothing on its standard error (killed, or out of memory before it could?)"

    def add_files(self, files: list[tuple[Path, Path]]) -> None:
        """Hand the kernel a hand-in's files (regular files only, checked by :func:`.trust.inspect_handin`):
        copied into ``in/``, then by the kernel itself into its working folder, before any of its code runs."""
        if not files:
            return
        inbox = self.scratch / "in"
        for src, rel in files:
            dest = inbox / rel
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            shutil.copyfile(src, dest, follow_symlinks=False)
            os.chmod(dest, 0o644)
        _, status, _ = self.run(STAGE.format(src=str(inbox)), self.settings["startup_timeout"], silent=True, keep=False)
        if status != "ok":
            self.log.warning("the hand-in's files could not be given to the kernel (%s)", status)

    def watched(self) -> dict:
        """This kernel as a :class:`.clock.Clock` watches it: its process tree, its main thread (the process the
        agent connected from), the counter of its cgroup's CPU time."""
        return {"root": self.proc.pid, "main": self.main_pid, "cgroups": self.counters}

    def clock(self) -> Clock:
        return Clock(self.watched())

    def await_agent(self, msg_id: str, timeout: float) -> bool:
        """Wait until the agent says it serves; False as soon as the request ends without it (no agent), or after
        ``timeout`` seconds as :class:`.clock.Clock` charges the kernel."""
        clock = self.clock()
        try:
            while not clock.past(timeout):
                if self.conn.wait_ready(0.05):
                    return True
                if self.conn.broken:
                    return False
                try:
                    msg = self.kc.iopub_channel.get_msg(timeout=0.05)
                except Exception:
                    continue
                if isinstance(msg, dict) and msg.get("parent_header", {}).get("msg_id") == msg_id \
                        and msg.get("msg_type") == "status" and msg["content"].get("execution_state") == "idle":
                    return self.conn.wait_ready(0.5)
            return False
        finally:
            self.credit += clock.credit()  # the notebook's deadline moves on by it, as after a cell

    def cap_hits(self) -> int:
        """How often the kernel ran into its process cap so far."""
        return self.cgroups.cap_hits()

    def alive(self) -> bool:
        return self.proc.alive()

    def run(self, code: str, timeout: float, silent: bool = False, keep: bool = True, budget: Budget | None = None):
        """Execute code; returns (outputs, status, execution_count), status in ok, error, timeout, died."""
        dropped = self.channels.dropped()  # a message refused after the last cell was done: connect again first
        if dropped:
            self.channels.reopen(dropped)
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False)
        return self.collect(msg_id, timeout, keep, budget)

    def collect(self, msg_id: str, timeout: float, keep: bool = True, budget: Budget | None = None):
        """The request ``msg_id``'s outputs, status and execution count (:func:`.kernel_io.read`: every byte the kernel
        sends counted against the cell's cap and the notebook's ``budget``; a message over the cap not read)."""
        return read(self, msg_id, timeout, keep, budget)

    def kill(self) -> None:
        self.proc.kill()

    def close(self) -> None:
        for stop in (lambda: self.channels.close(), self.kill, lambda: self.listener.close(),
                     lambda: self.conn.sock.close()):
            try:
                stop()
            except Exception:  # parts of a kernel that never started
                pass
        self.cgroups.kill()
        try:
            scratch.remove(self.scratch)
        except OSError as exc:  # what the kernel left that cannot go: the next grading process sweeps it
            self.log.warning("the kernel's scratch folder %s could not be removed (%s)", self.scratch, exc)


class KernelPool:
    """Keeps the next kernel starting in the background, so a notebook does not wait for one.

    Every notebook (and every restart) still gets a kernel of its own that no other code has used."""

    def __init__(self):
        self._thread = None
        self._result = None
        self._key = None
        atexit.register(self.close)

    def _spawn(self, settings: dict, log) -> None:
        def start():
            try:
                self._result = Kernel(settings, log)
            except Exception as exc:  # reported when the kernel is taken
                self._result = exc

        self._key = json.dumps(settings, sort_keys=True)
        self._result = None
        self._thread = threading.Thread(target=start, daemon=True)
        self._thread.start()

    def prime(self, settings: dict, log) -> None:
        """Start the first kernel now (a grading process that knows it will need one)."""
        if self._thread is None:
            self._spawn(settings, log)

    def take(self, settings: dict, log) -> Kernel:
        kernel = None
        if self._thread is not None:
            self._thread.join()
            ready, self._thread = self._result, None
            if isinstance(ready, Kernel):
                if self._key == json.dumps(settings, sort_keys=True) and ready.alive():
                    kernel = ready
                else:
                    ready.close()
        if kernel is None:
            kernel = Kernel(settings, log)
        self._spawn(settings, log)
        return kernel

    def holds(self) -> bool:
        """Whether a kernel is starting or waiting here (a process forked now would share it)."""
        return self._thread is not None or self._result is not None

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if isinstance(self._result, Kernel):
                self._result.close()
        self._result = None


POOL = KernelPool()
