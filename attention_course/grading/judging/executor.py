"""``JudgedExecute``: the course's replacement for nbgrader's ``Execute`` preprocessor at autograde.

* Student cells run in a sandboxed IPython kernel (:mod:`.kernel`, :mod:`.sandbox`) whose working
  folder holds a copy of the hand-in's regular files and the release's (:func:`.trust.kernel_files`).
* Test cells (grade cells restored from the gradebook) run in the judge
  (:mod:`attention_course.grading.judging.judge`); the locked setup cells run there as well, so that
  every reference is computed outside the kernel. A failed test's output is one line, the
  check's message: no traceback, no source, nothing the student's code printed.
* A cell that runs longer than ``timeout`` is interrupted (and the kernel killed if it does not
  stop); a kernel that dies (``os._exit``, a segfault, the memory cap) is started again and the
  cells that ran before are replayed, so later cells keep the points they earn. Every byte of output a kernel
  sends counts: beyond ``max_output_bytes`` per cell or ``max_notebook_output_bytes`` per notebook it is cut,
  with a note, and a message over ``max_message_bytes`` is not read (:mod:`.kernel_io`). After ``max_restarts``
  the remaining cells are not run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Float, Integer, List, Unicode

from .. import trust
from ..kernels import forkserver
from ..kernels.kernel import POOL, SERVE, Kernel
from ..kernels.kernel_io import MAX_MESSAGE_BYTES, MAX_NOTEBOOK_OUTPUT_BYTES, MAX_OUTPUT_BYTES, Budget
from ..kernels.clock import STRETCH, Clock
from .judgeproc import JudgeProcess


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def note(notes: list[str]) -> NotebookNode:
    """A note on a test cell that costs no points (nbgrader gives full credit for display data), flagged
    :data:`.trust.GRADER_NOTE` so that feedback keeps it (:class:`.HideHiddenTests`)."""
    text = "Note: " + " ".join(notes) + (" This costs no points here: the grader learns of it only from your own "
                                         "kernel. Validate's checks fail on it; fix it.")
    return NotebookNode(output_type="display_data", data={"text/plain": text}, metadata={trust.GRADER_NOTE: True})


class EnvironmentFault(RuntimeError):
    """Grading cannot go on as it should for a reason that is not the student's (a locked cell of the master fails
    without any of the student's code, a kernel or the judge cannot start): the hand-in is not graded, and the
    course command says why, instead of recording the student's score.

    Each one raised is also kept in :attr:`raised` (this process's memory, which no kernel can write): a grading
    process tells a fault of the grader from a failure of the hand-in by what it raised, never by an error's text,
    which can quote the student's bytes (:func:`.cluster.grade_on_worker`)."""

    raised: list[str] = []

    def __init__(self, *args):
        super().__init__(*args)
        EnvironmentFault.raised.append(str(self))


def _is_test(md) -> bool:
    return bool(md.get("grade") and md.get("locked") and not md.get("solution"))


def _is_blank(source: str) -> bool:
    """A cell that does nothing when run: only blank lines and comments."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in source.splitlines())


class JudgedExecute(NbGraderPreprocessor):
    """Execute a submission: student cells in a sandboxed kernel, test cells in the judge."""

    timeout = Integer(60, help="Seconds a cell (or a test's calls into the kernel) may run.").tag(config=True)
    notebook_timeout = Integer(300, help="Seconds a whole notebook may take, replays after kernel restarts "
                               "included; cells not reached by then are not run.").tag(config=True)
    memory_limit = Integer(4 * 2**30, help="Address-space cap of the kernel, in bytes.").tag(config=True)
    judge_memory_limit = Integer(3 * 2**30, help="Address-space cap of the judge process (the tests' own work "
                                 "on what student code returns), in bytes.").tag(config=True)
    processes = Integer(64, help="Most processes a kernel may have at once.").tag(config=True)
    max_output_bytes = Integer(MAX_OUTPUT_BYTES, help="Output kept per cell, every byte the kernel sends counted "
                               "(text, data, metadata, an error's message and traceback); the rest is cut, with a "
                               "note.").tag(config=True)
    max_notebook_output_bytes = Integer(MAX_NOTEBOOK_OUTPUT_BYTES, help="Output kept per notebook, all its cells "
                                        "together; the rest is cut, with a note.").tag(config=True)
    max_message_bytes = Integer(MAX_MESSAGE_BYTES, help="Largest message the grader reads from a kernel; a larger "
                                "one is not read, and its cell says so.").tag(config=True)
    max_file_bytes = Integer(64 * 2**20, help="Largest file a kernel may write.").tag(config=True)
    scratch_bytes = Integer(512 * 2**20, help="Size of the kernel's scratch file system, all it may write "
                            "(where the host allows mount namespaces).").tag(config=True)
    cgroups = Bool(True, help="Put each kernel in cgroups of its own (memory and process caps) where the host "
                   "delegates them; the other layers hold without.").tag(config=True)
    kernel_uid_base = Integer(1_600_000_000, help="A root grader runs each kernel as a uid of its own from this "
                              "base on (0: keep the grader's uid, which the sandbox then reports).").tag(config=True)
    max_restarts = Integer(3, help="Kernel restarts per notebook before the remaining cells are skipped.").tag(
        config=True)
    startup_timeout = Float(60, help="Seconds for a kernel to start.").tag(config=True)
    interrupt_grace = Float(5, help="Seconds a kernel gets to stop after an interrupt before it is killed.").tag(
        config=True)
    preload = List(Unicode(), ["numpy", "torch", "matplotlib.pyplot", "seaborn"],
                   help="Modules a kernel imports before it is handed a notebook (seaborn draws the course's "
                   "heatmaps: 0.4 s of every kernel that plots one, once per grading process instead).").tag(config=True)
    prestart = Bool(True, help="Start the next kernel while a notebook runs.").tag(config=True)
    fork = Bool(True, help="Fork kernels from a process that has imported `preload` (one per grading process), "
                "instead of starting a new Python for every kernel.").tag(config=True)

    def settings(self) -> dict:
        return {"memory_bytes": self.memory_limit, "processes": self.processes,
                "max_output_bytes": self.max_output_bytes, "max_message_bytes": self.max_message_bytes,
                "file_bytes": self.max_file_bytes,
                "startup_timeout": self.startup_timeout, "interrupt_grace": self.interrupt_grace,
                "preload": list(self.preload), "fork": self.fork, "scratch_bytes": self.scratch_bytes,
                "cgroups": self.cgroups, "uid_base": self.kernel_uid_base}

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        course = Path(os.getcwd())
        self._files = [(path, Path(rel)) for path, rel in
                       trust.kernel_files(course, info.get("student", ""), info.get("assignment", ""))]
        self._release = [(path, Path(rel)) for path, rel in trust.kernel_files(course, None, info.get("assignment", ""))]
        self._locked_run: list[tuple[str, str]] = []  # the master's locked cells the kernel has run, in order
        self._controlled = 0  # how many of them a control kernel has run without a fault (once is enough)
        self._restarts = 0
        self._history: list[str] = []
        self._deadline = time.monotonic() + self.notebook_timeout
        self._credit = self._kernel_credit = 0.0  # wall seconds not charged to the notebook (:meth:`_left`)
        self._budget = Budget(self.max_notebook_output_bytes)  # output the notebook may still keep
        # The judge's copy of the master's locked cells (imports, data, reference helpers), all run before
        # any test and never taken from the student's kernel, wherever a hand-in put or shadowed them.
        self._locked = [(c.metadata["nbgrader"].get("grade_id") or "locked", c.source) for c in nb.cells
                        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("locked")
                        and not _is_test(c.metadata["nbgrader"])]
        self._allowed = trust.student_names(course, info.get("assignment", ""), info.get("notebook", ""), nb)
        self._signatures = {name: list(params) for name, params in trust.master_signatures(
            course, info.get("assignment", ""), info.get("notebook", "")).items() if name.split(".")[0] in self._allowed}
        self._globals = trust.notebook_globals(course, info.get("assignment", ""), info.get("notebook", ""), nb)
        self.kernel = None
        self.judge = None
        os.environ.setdefault("MPLBACKEND", "Agg")
        try:
            self._start()
            # the notebook's time starts once its kernel and judge are up: starting them is the grader's work
            self._deadline = time.monotonic() + self.notebook_timeout
            self._credit, self._kernel_credit = 0.0, self.kernel.credit
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                try:
                    self._cell(cell)
                except EnvironmentFault:
                    raise
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
        """Seconds the notebook has left, at most one cell's limit. Its deadline moves on by the wall seconds the
        machine took from its kernels and judges, waiting for a CPU (:mod:`..kernels.clock`)."""
        credit = self._credit + (self.kernel.credit - self._kernel_credit if self.kernel is not None else 0.0)
        return max(0.0, min(float(self.timeout), self._deadline + credit - time.monotonic()))

    def _judge_credit(self, reply: dict | None, started: float) -> None:
        """Add the wall seconds the judge's reply says the machine took from it and the kernel (at most what
        :mod:`..kernels.clock` can credit of the request's time)."""
        if reply is not None and isinstance(reply.get("credit"), (int, float)):
            self._credit += min(max(0.0, float(reply["credit"])), (time.monotonic() - started) * (1 - 1 / STRETCH))

    def _retire(self) -> None:
        """Close the kernel, keeping the time the machine took from it."""
        if self.kernel is not None:
            self._credit += self.kernel.credit - self._kernel_credit
            self.kernel.close()
            self.kernel = None

    # -- kernel and judge lifecycle --------------------------------------------------------
    def _start(self) -> None:
        """A kernel with the hand-in's files, connected to the judge. Neither the kernel's start nor the judge's
        depends on the student's code: a failure is the grader's (:class:`EnvironmentFault`)."""
        try:
            self.kernel = POOL.take(self.settings(), self.log) if self.prestart else Kernel(self.settings(), self.log)
        except Exception as exc:
            raise EnvironmentFault(f"a kernel could not start: {exc}") from None
        self._kernel_credit = self.kernel.credit
        self.kernel.add_files(self._files)
        if self.judge is None or not self.judge.alive():
            self._start_judge()
        if self.judge.request({"op": "conn"}, 10, [self.kernel.conn.sock.fileno()]) is None:
            raise EnvironmentFault("the judge process did not answer")

    def _start_judge(self) -> None:
        """A judge process with the master's locked cells run in it (again, after one was stopped)."""
        if self.judge is not None:
            self.judge.close()
        self.judge = JudgeProcess(forkserver.server(list(self.preload)), self.judge_memory_limit, os.getcwd())
        self.judge.request({"op": "allow", "names": sorted(self._allowed), "signatures": self._signatures,
                            "globals": sorted(self._globals)}, 10)
        for grade_id, source in self._locked:  # the master's cells alone: a failure is never the student's
            started = time.monotonic()
            reply = self.judge.request({"op": "locked", "source": source, "timeout": self.timeout},
                                       self.timeout + 1 + self.interrupt_grace + 2, clock=Clock(self.judge.watched()))
            self._judge_credit(reply, started)
            if reply is None or reply["status"] != "ok":
                why = f"{reply['ename']}: {reply['evalue']}" if reply else "the judge process did not answer"
                raise EnvironmentFault(f"the master's locked cell {grade_id!r} fails in the judge: {why}")

    def _restart(self, why: str) -> bool:
        """A new kernel with every earlier kernel cell replayed; False when no more restarts are allowed."""
        self._retire()
        self._restarts += 1
        if self._restarts > self.max_restarts:
            self.log.warning("kernel restarted %d times (%s): skipping the remaining cells", self.max_restarts, why)
            return False
        self.log.warning("restarting the kernel (%s); replaying %d cells", why, len(self._history))
        self._start()  # a kernel that cannot start is the grader's fault, not the student's (EnvironmentFault)
        try:
            for source in self._history:
                if self._left() <= 0:
                    raise RuntimeError("the notebook's time ran out during the replay")
                _, status, _ = self.kernel.run(source, self._left(), keep=False)
                if status in ("timeout", "died"):
                    raise RuntimeError(f"replay {status}")
        except Exception as exc:
            self.log.warning("the kernel could not be restarted: %s", exc)
            self._retire()
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
        outputs, status, count = self.kernel.run(cell.source, limit, budget=self._budget)
        cell.outputs, cell.execution_count = outputs, count
        if md.get("locked"):
            self._locked_run.append((md.get("grade_id") or "locked", cell.source))
            if status != "ok":  # an error, a death or a timeout: the student's doing, or the grader's?
                self._control()
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

    def _control(self) -> None:
        """A locked cell of the master failed in the student's kernel: run the master's locked cells up to it in a
        new kernel with the release's files and none of the student's. If it fails there too, the fault is the
        grader's (an import, a permission, a missing file): :class:`EnvironmentFault`. If not, the student's code
        broke it, and the hand-in is graded as it ran. Each locked cell is run in a control kernel once per notebook
        at most, however often the student's kernel breaks it."""
        if len(self._locked_run) <= self._controlled:
            return
        try:
            control = Kernel(self.settings(), self.log)
        except Exception as exc:
            raise EnvironmentFault(f"a kernel could not start: {exc}") from None
        try:
            control.add_files(self._release)
            for grade_id, source in self._locked_run:
                outputs, status, _ = control.run(source, self.timeout)
                if status != "ok":
                    error = next((f"{o.get('ename')}: {o.get('evalue')}" for o in outputs
                                  if o.get("output_type") == "error"), f"the kernel {status}")
                    raise EnvironmentFault(f"the master's locked cell {grade_id!r} fails in a kernel without the "
                                           f"student's code: {error}")
            self._controlled = len(self._locked_run)
        finally:
            control.close()

    def _test(self, cell) -> None:
        kernel, conn = self.kernel, self.kernel.conn
        limit = self._left()
        msg_id = kernel.kc.execute(SERVE, silent=True, store_history=False, allow_stdin=False)
        if not kernel.await_agent(msg_id, min(10.0, limit)):
            conn.broken = True
        if self.judge is None or not self.judge.alive():
            self._start_judge()
            self.judge.request({"op": "conn"}, 10, [conn.sock.fileno()])
        started = time.monotonic()  # the judge charges the limit as a Clock of itself and the kernel does
        reply = self.judge.request({"op": "test", "source": cell.source, "timeout": limit, "broken": conn.broken,
                                    "kernel": kernel.watched()}, limit + 1 + self.interrupt_grace + 2,
                                   clock=Clock(self.judge.watched(), kernel.watched()))
        self._judge_credit(reply, started)
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
        if reply.get("notes"):
            cell.outputs.append(note([str(n)[:600] for n in reply["notes"][:5]]))
        if broken or status in ("timeout", "died") or not kernel.alive():
            self._restart("the kernel stopped answering during a test")
