"""A grading process on this machine: nbgrader and the course's configuration loaded once, a fork server started,
then one hand-in after another graded with nbgrader's own ``Autograde`` converter (the pipeline ``nbgrader autograde``
runs: sanitize, judged execution, ``SaveAutoGrades``, late penalties), a kernel process of its own per notebook.

The course command runs one per core (:func:`grade_locally`); a Dask worker (:mod:`.cluster`) and the grading
service's workers (:mod:`.service.workers`) set up the same process (:func:`worker_init`) in a scratch course.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_all_start_methods, get_context, parent_process, util
from pathlib import Path

from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

from ..judging.executor import POOL, EnvironmentFault, JudgedExecute
from ..kernels import forkserver, sandbox
from ..nbgrader_glue.gradebook import close_inherited_locks
from ..nbgrader_glue.handgrades import KeepHandGrades
from ..nbgrader_glue.term import ApplyTerm
from .outcome import FAILED, GRADED, GRADER, Outcome, not_graded


def sandbox_settings(course: Path, app=None) -> dict:
    """The kernel sandbox's settings as the course's configuration sets them (``JudgedExecute``)."""
    if app is None:
        os.chdir(course)
        app = NbGrader()
        app.initialize([])
    return JudgedExecute(parent=app).settings()


# -- workers -----------------------------------------------------------------------------
_API = None


def worker_init(course: str, db_url: str, records: bool = True) -> None:
    """Set up this grading process on ``course``. ``records=False``: a scratch course whose results the gradebook's
    one writer records again (:func:`.cluster.record`): the pipeline's steps that only write the gradebook
    (:func:`recording_step`) are left out here, as that pass runs them."""
    global _API
    os.chdir(course)
    if db_url.startswith("sqlite") and "?" not in db_url:  # workers take turns to write: wait, do not fail
        db_url += "?timeout=300"
    os.environ.setdefault("MPLBACKEND", "Agg")
    app = NbGrader()
    app.initialize([])
    app.config.CourseDirectory.root = course
    app.config.CourseDirectory.db_url = db_url
    app.log.setLevel("WARNING")
    if not records:
        steps = app.config.Autograde.get("autograde_preprocessors", [])
        app.config.Autograde.autograde_preprocessors = [p for p in steps if not recording_step(p)]
    _API = NbGraderAPI(parent=app)
    _API.log.setLevel("WARNING")
    executor = JudgedExecute(parent=_API)
    if executor.prestart:  # start the fork server and the first kernel now, while other workers do the same
        POOL.prime(executor.settings(), _API.log)


def recording_step(step) -> bool:
    """Whether an autograde step only records in the gradebook (grades, hand grades kept, the term's dates, late
    penalties) and leaves the notebook as it is."""
    return isinstance(step, type) and issubclass(step, (SaveAutoGrades, AssignLatePenalties, KeepHandGrades, ApplyTerm))


def forked_worker_init(course: str, db_url: str) -> None:
    """:func:`worker_init` in a process forked by multiprocessing (:func:`worker_context`). What it holds of its
    parent's is put down first: its copy of the gradebook's writer lock is closed (the parent keeps the lock; a copy
    left open would hold it after the parent's end), and it ends with its parent (a parent-death signal) instead of
    waiting for ever on a pool nobody reads. The parent's database engines are forgotten at the fork
    (:func:`.speedups.after_fork`). A forked process ends with ``os._exit`` and so skips ``atexit``: what the kernel
    pool and the fork servers registered there (the next kernel stopped, the zygote ended, their scratch folders
    removed) runs as the process's own exit instead."""
    close_inherited_locks()
    end_with_parent(parent_process().pid)
    worker_init(course, db_url)
    util.Finalize(None, _close_kernels, exitpriority=0)


def end_with_parent(parent: int) -> None:
    """Have the system kill this process when its parent ``parent`` ends (Linux), or end now if it already has."""
    try:
        sandbox.parent_death_signal()
    except (OSError, AttributeError):  # not Linux: the pool's pipes still end it when the parent's end closes them
        return
    if os.getppid() != parent:  # the parent ended before the signal was asked for
        os._exit(1)


def _close_kernels() -> None:
    POOL.close()  # the pool first: it may still be starting a kernel from a fork server
    forkserver.close_all()


def worker_api():
    """The nbgrader API of this grading process (set up by :func:`worker_init`)."""
    return _API


def grade_one(assignment: str, student: str) -> Outcome:
    """Autograde one hand-in of the course in this process, writing its grades into the gradebook."""
    start = time.monotonic()
    faults = len(EnvironmentFault.raised)
    result = _API.autograde(assignment, student, force=True, create=False)
    raised = EnvironmentFault.raised[faults:]
    status = GRADED if result.get("success") and not raised else GRADER if raised else FAILED
    return Outcome(assignment, student, status, log=result.get("log", ""), error=result.get("error", ""),
                   seconds=time.monotonic() - start, faults=raised)


def worker_context():
    """How grading processes start: forked from the asking process (the course command), which has imported nbgrader
    and read the course's configuration by then, so a grading process starts with nothing to import (a fresh Python
    took 1.2 core-seconds, multiprocessing's fork server 1.5 to 2.9, for every run). A fork is taken only from a
    process that runs one thread, counted by the system (a library's native thread pool too: the course command loads
    no NumPy), and that grades nothing itself (no kernel, kernel pool or fork server of its own that a child would
    share). What a forked process holds of its parent's is put down in :func:`forked_worker_init`. Otherwise, or
    where ``fork`` does not exist, each is a fresh Python (``spawn``)."""
    if ("fork" in get_all_start_methods() and os_threads() == 1 and _API is None and not POOL.holds()
            and not forkserver.running()):
        return get_context("fork")
    return get_context("spawn")


def os_threads() -> int:
    """The threads of this process as the system counts them (``/proc``; Python's own count where there is none)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def grade_locally(course: Path, db_url: str, todo: list, workers: int):
    """Grade ``todo`` in ``workers`` local processes; yields (job, result) as each finishes."""
    context = worker_context()  # (the pool forks its processes at the first submit, before it starts a thread)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=worker_init if context.get_start_method() == "spawn" else forked_worker_init,
                             initargs=(str(course), db_url)) as pool:
        futures = {pool.submit(grade_one, j.assignment, j.student): j for j in todo}
        for future in as_completed(futures):
            try:
                result = future.result()
            except BrokenProcessPool as exc:  # every call left fails now: never wait on the pool's pipe
                drop_pool(pool)
                job = futures[future]
                result = not_graded(job.assignment, job.student, GRADER, f"the grading worker died ({exc})")
            except Exception as exc:
                job = futures[future]
                result = not_graded(job.assignment, job.student, GRADER, f"{type(exc).__name__}: {exc}")
            yield futures[future], result


def drop_pool(pool) -> None:
    """End a process pool that lost a worker (or is no longer wanted) without waiting on it: its processes killed, and
    the read end of its call queue closed, so that a call still being written into the pipe (the service's payload,
    megabytes of notebooks, fills it) fails at once instead of blocking for ever. Python 3.11 before 3.11.5 (Debian
    12's 3.11.2) otherwise hangs at exit, joining the pool's manager thread, which waits on that write (CPython
    gh-94777, fixed in later releases; the fix closes the same end)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()
    reader = getattr(getattr(pool, "_call_queue", None), "_reader", None)
    if reader is not None:
        try:
            reader.close()
        except OSError:
            pass
    pool.shutdown(wait=False, cancel_futures=True)
