"""``JudgedExecute``: the course's replacement for nbgrader's ``Execute`` preprocessor at autograde.

* Student cells (and the master's locked setup cells) run in a sandboxed IPython kernel
  (:mod:`attention_course.grading.sandbox`) whose working folder is a scratch copy of the
  submission's regular files.
* Test cells (grade cells restored from the gradebook) run in the judge
  (:mod:`attention_course.grading.judge`); the locked setup cells run there as well, so that
  every reference is computed outside the kernel. A failed test's output is one line, the
  check's message: no traceback, no source, nothing the student's code printed.
* A cell that runs longer than ``timeout`` is interrupted (and the kernel killed if it does not
  stop); a kernel that dies (``os._exit``, a segfault, the memory cap) is started again and the
  cells that ran before are replayed, so later cells keep the points they earn. Output beyond
  ``max_output_bytes`` per cell is dropped. After ``max_restarts`` the remaining cells are not run.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from nbformat import NotebookNode
from nbformat.v4 import output_from_msg
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Float, Integer, List, Unicode

from . import forkserver
from .forkserver import Spawned
from .course import PACKAGE_DIR
from .judge import Connection, bound_names
from .judgeproc import JudgeProcess

SERVE = "__import__('attention_course.grading.agent', fromlist=['serve']).serve()"
BOOT = "__import__('attention_course.grading.agent', fromlist=['connect']).connect({path!r})"


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


def _cgroup_dirs(name: str, memory_bytes: int, processes: int) -> list[Path]:
    """Per-kernel cgroups (cgroup v1 pids and memory) when the grader may create them."""
    if os.geteuid() != 0:
        return []
    made = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller, limit_file, limit in (("pids", "pids.max", processes),
                                              ("memory", "memory.limit_in_bytes", memory_bytes)):
            if controller in controllers.split(","):
                base = Path("/sys/fs/cgroup") / controller / path.lstrip("/")
                target = base / name
                try:
                    target.mkdir(exist_ok=True)
                    (target / limit_file).write_text(str(limit))
                    made.append(target)
                except OSError:
                    pass
    return made


def _kill_cgroups(dirs: list[Path]) -> None:
    for d in dirs:
        for _ in range(250):
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        try:
            d.rmdir()
        except OSError:
            pass


#: The longest path a Unix socket can bind (sun_path holds 108 bytes with its NUL); the kernel's ZeroMQ
#: sockets and the judge's socket live in the scratch folder as ``k-1`` … and ``judge.sock``.
_SOCKET_PATH_MAX = 107
_LONGEST_SOCKET = "/judge.sock"


def _scratch_folder() -> Path:
    """A fresh scratch folder in the temporary folder (``TMPDIR``), or in /tmp when ``TMPDIR`` is so deep that
    a socket path inside it would be too long to bind."""
    base = tempfile.gettempdir()
    if len(base) + len("/attention-judge-12345678") + len(_LONGEST_SOCKET) > _SOCKET_PATH_MAX:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="attention-judge-", dir=base))


class Kernel:
    """One sandboxed kernel with the course agent connected to the judge."""

    def __init__(self, settings: dict, log):
        self.log = log
        self.settings = settings
        self.scratch = _scratch_folder()
        self.proc = self.kc = self.listener = self.conn = None
        self.cgroups = []
        try:
            self._boot(settings, log)
        except BaseException:  # a kernel that could not start leaves nothing behind
            self.close()
            raise

    def _boot(self, settings: dict, log) -> None:
        work = self.scratch / "work"
        work.mkdir(exist_ok=True)
        for sub in ("home", "tmp"):
            (self.scratch / sub).mkdir()
        sock_path = str(self.scratch / "judge.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(sock_path)
        self.listener.listen(1)
        self.cgroups = _cgroup_dirs(self.scratch.name, settings["memory_bytes"], settings["processes"])
        config = {"read": _read_paths(), "write": [str(self.scratch), "/dev/null"],
                  "memory_bytes": settings["memory_bytes"], "processes": settings["processes"],
                  "file_bytes": settings["file_bytes"], "report": str(self.scratch / "sandbox.json"),
                  "cgroups": [str(d / "cgroup.procs") for d in self.cgroups]}
        (self.scratch / "sandbox-config.json").write_text(json.dumps(config))
        env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(self.scratch / "home"),
               "TMPDIR": str(self.scratch / "tmp"), "MPLCONFIGDIR": str(self.scratch / "home"),
               "IPYTHONDIR": str(self.scratch / "home" / ".ipython"), "JUPYTER_RUNTIME_DIR": str(self.scratch),
               "LANG": "C.UTF-8", "NBGRADER_EXECUTION": "autograde", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               "USER": "student", "LOGNAME": "student"}
        connection_file = str(self.scratch / "kernel.json")
        write_connection_file(connection_file, transport="ipc", ip=str(self.scratch / "k"),
                              key=uuid.uuid4().hex.encode())
        args = ["-f", connection_file, "--HistoryManager.hist_file=:memory:"]
        config_path, stderr_path = str(self.scratch / "sandbox-config.json"), str(self.scratch / "kernel-stderr.txt")
        if settings["fork"]:  # a fork of this process's zygote, heavy imports done
            self.proc = forkserver.server(settings["preload"]).launch(args, config_path, str(work), env, stderr_path)
        else:
            with open(stderr_path, "wb") as stderr:  # kernel noise stays out of the log
                self.proc = Spawned([sys.executable, "-m", "attention_course.grading.sandbox", config_path, "--",
                                     sys.executable, "-m", "ipykernel_launcher", *args], str(work), env, stderr)
        self.kc = BlockingKernelClient(connection_file=connection_file)
        self.kc.load_connection_file()
        self.kc.start_channels()
        self._wait_ready(settings["startup_timeout"])
        try:
            notes = json.loads((self.scratch / "sandbox.json").read_text())
            for note in notes:
                log.warning("sandbox: %s", note)
        except (OSError, ValueError):
            pass
        self.listener.settimeout(settings["startup_timeout"])
        outputs, status, _ = self.run(BOOT.format(path=sock_path), settings["startup_timeout"], silent=True)
        if status != "ok":
            raise RuntimeError(f"the course agent did not start in the kernel: {outputs}")
        sock, _ = self.listener.accept()
        self.conn = Connection(sock)
        if settings["preload"]:  # heavy imports, done before any student code runs
            self.run("import " + ", ".join(settings["preload"]), settings["startup_timeout"], silent=True, keep=False)

    def _wait_ready(self, timeout: float) -> None:
        """Until the kernel answers on the shell channel and its IOPub messages reach us.

        (jupyter_client's ``wait_for_ready`` also waits for 0.2 s of IOPub silence; this does not.)"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError("the kernel exited while starting")
            msg_id = self.kc.kernel_info()
            try:
                self.kc.get_shell_msg(timeout=0.5)
            except queue.Empty:
                continue
            until = time.monotonic() + 0.05
            while time.monotonic() < until:
                try:
                    msg = self.kc.get_iopub_msg(timeout=0.01)
                except queue.Empty:
                    continue
                if msg.get("parent_header", {}).get("msg_id") == msg_id and msg["msg_type"] == "status" \
                        and msg["content"].get("execution_state") == "idle":
                    return
        raise RuntimeError(f"the kernel did not start within {timeout} s")

    def add_files(self, files: list[tuple[Path, Path]]) -> None:
        """Copy a hand-in's files into the kernel's working folder (before any of its code runs)."""
        for src, rel in files:
            dest = self.scratch / "work" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)

    def await_agent(self, msg_id: str, timeout: float) -> bool:
        """Wait until the agent says it serves; False as soon as the request ends without it (no agent)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.conn.wait_ready(0.05):
                return True
            if self.conn.broken:
                return False
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except Exception:
                continue
            if isinstance(msg, dict) and msg.get("parent_header", {}).get("msg_id") == msg_id \
                    and msg.get("msg_type") == "status" and msg["content"].get("execution_state") == "idle":
                return self.conn.wait_ready(0.5)
        return False

    def cap_hits(self) -> int:
        """How often the kernel ran into its process cap so far (cgroup pids.events)."""
        hits = 0
        for d in self.cgroups:
            try:
                for line in (d / "pids.events").read_text().splitlines():
                    if line.startswith("max "):
                        hits += int(line.split()[1])
            except (OSError, ValueError):
                pass
        return hits

    def alive(self) -> bool:
        return self.proc.alive()

    def run(self, code: str, timeout: float, silent: bool = False, keep: bool = True):
        """Execute code; returns (outputs, status, execution_count), status in ok, error, timeout, died."""
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False)
        return self.collect(msg_id, timeout, keep)

    def collect(self, msg_id: str, timeout: float, keep: bool = True):
        cap = self.settings["max_output_bytes"]
        outputs, size, truncated, count = [], 0, False, None
        deadline = time.monotonic() + timeout
        interrupted_at = None
        while True:
            now = time.monotonic()
            if now > deadline and interrupted_at is None:
                interrupted_at = now
                self.proc.interrupt()
            if interrupted_at is not None and now > interrupted_at + self.settings["interrupt_grace"]:
                self.kill()
                return outputs, "timeout", count
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not self.alive():
                    return outputs, ("timeout" if interrupted_at else "died"), count
                continue
            except Exception:  # an unreadable message (forked children write to the same socket): skip it
                continue
            if not isinstance(msg, dict) or msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            if kind == "execute_input":
                count = content.get("execution_count")
            if not keep or kind not in ("stream", "display_data", "execute_result", "error", "clear_output"):
                continue
            if kind == "clear_output":
                outputs, size = [], 0
                continue
            piece = len(json.dumps(content.get("data", content.get("text", "")))) if kind != "error" else 0
            if size + piece > cap:
                truncated = True
                continue
            size += piece
            out = output_from_msg(msg)
            if kind == "stream" and outputs and outputs[-1].get("output_type") == "stream" \
                    and outputs[-1].get("name") == out.get("name"):
                outputs[-1]["text"] += out["text"]
            else:
                outputs.append(out)
        if truncated:
            outputs.append(NotebookNode(output_type="stream", name="stdout",
                                        text=f"\n[output truncated by the grader: more than {cap} bytes]\n"))
        status = "timeout" if interrupted_at else "ok"
        if any(o.get("output_type") == "error" for o in outputs) and status == "ok":
            status = "error"
        return outputs, status, count

    def kill(self) -> None:
        self.proc.kill()

    def close(self) -> None:
        for stop in (lambda: self.kc.stop_channels(), self.kill, lambda: self.listener.close(),
                     lambda: self.conn.sock.close()):
            try:
                stop()
            except Exception:  # parts of a kernel that never started
                pass
        _kill_cgroups(self.cgroups)

        def unlock(func, path, _):
            os.chmod(os.path.dirname(path), 0o700)
            func(path)

        shutil.rmtree(self.scratch, onerror=unlock)


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

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if isinstance(self._result, Kernel):
                self._result.close()
        self._result = None


POOL = KernelPool()


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def submission_files(course: Path, student: str, assignment: str, limit: int) -> list:
    """Regular files a kernel may see: the submission's own (never through a symlink) and the master's extras."""
    found, total = [], 0
    roots = [course / "submitted" / student / assignment, course / "source" / assignment]
    for root in roots:
        if not root.is_dir() or root.is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))
                           and not d.startswith(".")]
            for name in filenames:
                path = Path(dirpath) / name
                st = os.lstat(path)
                if name.endswith(".ipynb") or not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                if total > limit:
                    return found
                found.append((path, path.relative_to(root)))
    return found


def _is_test(md) -> bool:
    return bool(md.get("grade") and md.get("locked") and not md.get("solution"))


def _is_blank(source: str) -> bool:
    """A cell that does nothing when run: only blank lines and comments."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in source.splitlines())


def student_names(course: Path, assignment: str, notebook: str, nb) -> frozenset:
    """The names the judge may take from the student's kernel: those the master's unlocked code cells
    (solutions, starter code, demonstrations) bind, minus every name a locked cell binds.

    The master is read from ``source/``; without it, the names the hand-in's own unlocked cells bind."""
    from .nbgrader_ext import BEGIN_STARTER, END_STARTER, replace_blocks, uncomment

    locked = set()
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("locked"):
            locked |= bound_names(cell.source)
    sources = []
    try:
        master = json.loads((course / "source" / assignment / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        for cell in master["cells"]:
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if cell["cell_type"] != "code":
                continue
            if cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
                locked |= bound_names(src)
            else:
                sources.append(replace_blocks(src, BEGIN_STARTER, END_STARTER, uncomment))
    except (OSError, ValueError, KeyError, TypeError):
        sources = [c.source for c in nb.cells if c.cell_type == "code"
                   and not c.metadata.get("nbgrader", {}).get("locked")]
    names = set()
    for src in sources:
        names |= bound_names(src)
    return frozenset(names - locked)


class JudgedExecute(NbGraderPreprocessor):
    """Execute a submission: student cells in a sandboxed kernel, test cells in the judge."""

    timeout = Integer(60, help="Seconds a cell (or a test's calls into the kernel) may run.").tag(config=True)
    notebook_timeout = Integer(300, help="Seconds a whole notebook may take, replays after kernel restarts "
                               "included; cells not reached by then are not run.").tag(config=True)
    memory_limit = Integer(4 * 2**30, help="Address-space cap of the kernel, in bytes.").tag(config=True)
    judge_memory_limit = Integer(3 * 2**30, help="Address-space cap of the judge process (the tests' own work "
                                 "on what student code returns), in bytes.").tag(config=True)
    processes = Integer(64, help="Most processes a kernel may have at once.").tag(config=True)
    max_output_bytes = Integer(2 * 2**20, help="Output kept per cell; the rest is dropped.").tag(config=True)
    max_file_bytes = Integer(256 * 2**20, help="Largest file a kernel may write.").tag(config=True)
    max_restarts = Integer(3, help="Kernel restarts per notebook before the remaining cells are skipped.").tag(
        config=True)
    startup_timeout = Float(60, help="Seconds for a kernel to start.").tag(config=True)
    interrupt_grace = Float(5, help="Seconds a kernel gets to stop after an interrupt before it is killed.").tag(
        config=True)
    preload = List(Unicode(), ["numpy", "torch", "matplotlib.pyplot"],
                   help="Modules a kernel imports before it is handed a notebook.").tag(config=True)
    prestart = Bool(True, help="Start the next kernel while a notebook runs.").tag(config=True)
    fork = Bool(True, help="Fork kernels from a process that has imported `preload` (one per grading process), "
                "instead of starting a new Python for every kernel.").tag(config=True)

    def settings(self) -> dict:
        return {"memory_bytes": self.memory_limit, "processes": self.processes,
                "max_output_bytes": self.max_output_bytes, "file_bytes": self.max_file_bytes,
                "startup_timeout": self.startup_timeout, "interrupt_grace": self.interrupt_grace,
                "preload": list(self.preload), "fork": self.fork}

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        course = Path(os.getcwd())
        files = submission_files(course, info.get("student", ""), info.get("assignment", ""), 100 * 2**20)
        self._files = files
        self._restarts = 0
        self._history: list[str] = []
        self._deadline = time.monotonic() + self.notebook_timeout
        # The judge's copy of the master's locked cells (imports, data, reference helpers), all run before
        # any test and never taken from the student's kernel, wherever a hand-in put or shadowed them.
        self._locked = [c.source for c in nb.cells if c.cell_type == "code"
                        and c.metadata.get("nbgrader", {}).get("locked") and not _is_test(c.metadata["nbgrader"])]
        self._allowed = student_names(course, info.get("assignment", ""), info.get("notebook", ""), nb)
        self.kernel = None
        self.judge = None
        os.environ.setdefault("MPLBACKEND", "Agg")
        try:
            self._start()
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                try:
                    self._cell(cell)
                except Exception as exc:  # whatever a submission does, the other cells are still graded
                    self.log.warning("grading a cell failed (%s: %s)", type(exc).__name__, exc)
                    cell.outputs = [_error("GradingError", "the grader could not run this cell; it was restarted")]
                    self._restart("the grader lost the kernel")
        finally:
            if self.kernel is not None:
                self.kernel.close()
            if self.judge is not None:
                self.judge.close()
        return nb, resources

    def _left(self) -> float:
        """Seconds the notebook has left, at most one cell's limit."""
        return max(0.0, min(float(self.timeout), self._deadline - time.monotonic()))

    # -- kernel and judge lifecycle --------------------------------------------------------
    def _start(self) -> None:
        self.kernel = POOL.take(self.settings(), self.log) if self.prestart else Kernel(self.settings(), self.log)
        self.kernel.add_files(self._files)
        if self.judge is None or not self.judge.alive():
            self._start_judge()
        if self.judge.request({"op": "conn"}, 10, [self.kernel.conn.sock.fileno()]) is None:
            raise RuntimeError("the judge process did not answer")

    def _start_judge(self) -> None:
        """A judge process with the master's locked cells run in it (again, after one was stopped)."""
        if self.judge is not None:
            self.judge.close()
        self.judge = JudgeProcess(forkserver.server(list(self.preload)), self.judge_memory_limit, os.getcwd())
        self.judge.request({"op": "allow", "names": sorted(self._allowed)}, 10)
        for source in self._locked:
            reply = self.judge.request({"op": "locked", "source": source, "timeout": self.timeout},
                                       self.timeout + self.interrupt_grace)
            if reply is None or reply["status"] != "ok":  # the master's own fault: the tests that need it fail
                self.log.warning("judge: a locked cell failed: %s", reply.get("evalue") if reply else "no answer")

    def _restart(self, why: str) -> bool:
        """A new kernel with every earlier kernel cell replayed; False when no more restarts are allowed."""
        if self.kernel is not None:
            self.kernel.close()
            self.kernel = None
        self._restarts += 1
        if self._restarts > self.max_restarts:
            self.log.warning("kernel restarted %d times (%s): skipping the remaining cells", self.max_restarts, why)
            return False
        self.log.warning("restarting the kernel (%s); replaying %d cells", why, len(self._history))
        try:
            self._start()
            for source in self._history:
                if self._left() <= 0:
                    raise RuntimeError("the notebook's time ran out during the replay")
                _, status, _ = self.kernel.run(source, self._left(), keep=False)
                if status in ("timeout", "died"):
                    raise RuntimeError(f"replay {status}")
        except Exception as exc:
            self.log.warning("the kernel could not be restarted: %s", exc)
            if self.kernel is not None:
                self.kernel.close()
            self.kernel = None
            return False
        return True

    # -- cells ---------------------------------------------------------------------------
    def _cell(self, cell) -> None:
        cell.outputs, cell.execution_count = [], None
        md = cell.metadata.get("nbgrader", {})
        if self.kernel is None:
            cell.outputs = [_error("NotRun", "this cell was not run: the kernel died or hung too often")]
            return
        if self._left() <= 0:
            cell.outputs = [_error("NotRun", f"this cell was not run: the notebook ran longer than "
                                   f"{self.notebook_timeout} s in all (kernel restarts and replays included)")]
            return
        if _is_test(md):
            self._test(cell)
            return
        if _is_blank(cell.source):
            return
        limit = self._left()
        hits = self.kernel.cap_hits()
        outputs, status, count = self.kernel.run(cell.source, limit)
        cell.outputs, cell.execution_count = outputs, count
        exhausted = self.kernel.cap_hits() > hits or any(
            o.get("output_type") == "error" and o.get("ename") == "MemoryError" for o in outputs)
        if exhausted and status in ("ok", "error"):
            cell.outputs.append(_error("ResourceLimitError", "this cell ran into the kernel's memory or process cap; "
                                       "the kernel was restarted without it"))
            self._restart("a cell exhausted the memory or process cap")
        elif status == "died":
            cell.outputs.append(_error("DeadKernelError", "the kernel died while running this cell (it was "
                                       "restarted and the cells before this one were run again)"))
            self._restart("the kernel died")
        elif status == "timeout":
            cell.outputs.append(_error("CellTimeoutError", f"this cell ran longer than {limit:.0f} s and was stopped"))
            if not self.kernel.alive():
                self._restart("a cell did not stop after an interrupt")
        else:
            self._history.append(cell.source)

    def _test(self, cell) -> None:
        kernel, conn = self.kernel, self.kernel.conn
        limit = self._left()
        msg_id = kernel.kc.execute(SERVE, silent=True, store_history=False, allow_stdin=False)
        if not kernel.await_agent(msg_id, min(10.0, limit)):
            conn.broken = True
        if self.judge is None or not self.judge.alive():
            self._start_judge()
            self.judge.request({"op": "conn"}, 10, [conn.sock.fileno()])
        reply = self.judge.request({"op": "test", "source": cell.source, "timeout": limit, "broken": conn.broken},
                                   limit + self.interrupt_grace + 2)
        if reply is None:  # the judge process died or did not stop: a new one grades the cells that follow
            reply = {"status": "limit", "ename": "CellTimeoutError", "broken": True,
                     "evalue": "checking what your code returned went past the grader's time or memory limit and "
                               "was stopped"}
            self._start_judge()
        conn.broken = conn.broken or bool(reply.get("broken"))
        broken = conn.broken
        conn.done()
        _, status, _ = kernel.collect(msg_id, self.interrupt_grace, keep=False)
        if reply["status"] != "ok":
            cell.outputs = [_error(reply["ename"], reply["evalue"])]
        if broken or status in ("timeout", "died") or not kernel.alive():
            self._restart("the kernel stopped answering during a test")
