"""Grade on the workers of a Dask cluster: ``autograde --scheduler tcp://host:8786``.

The machine that keeps the gradebook (the *client*) plans the run exactly as local grading does
(skip-unchanged fingerprints, unusable folders) and stays the gradebook's only writer. Each hand-in
travels to a Dask worker as bytes, with what grading it needs: the assignment's ``source/`` folder,
the files its release gives every student (:func:`.trust.kernel_files`), the course's ``nbgrader_config.py``
and a fingerprint of the course package. A worker whose sandbox lacks a layer the instructor has not accepted
grades nothing (:func:`.doctor.refused`). Workers share no filesystem with the client: each keeps a scratch course in its own local directory and grades
there with nbgrader's own ``Autograde`` and the course's judged, sandboxed executor (its own fork
server, as a local grading process). The executed notebooks come back; the client then runs
nbgrader's ``Autograde`` once more on the hand-in with :class:`Delivered` in place of the execution
step, which records the grades, late penalties and the autograded notebook in its own gradebook.

A worker that dies mid-run loses nothing: the scheduler gives its hand-ins to another worker (a
hand-in that has killed ``distributed.scheduler.allowed-failures`` workers is reported as not graded),
and the client records each hand-in once, when its result arrives.

Start workers with one thread each (``dask worker ADDRESS --nthreads 1``, as many as the machine
has cores): a worker process grades one notebook at a time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Unicode

from .. import trust
from ..course import PACKAGE_DIR
from ..errors import ConfigError, CourseError
from ..judging.executor import EnvironmentFault, JudgedExecute
from ..nbgrader_glue.gradebook import register
from . import doctor
from .outcome import FAILED, GRADED, GRADER, HANDIN, Outcome, not_graded
from .plan import course_fingerprint, hash_tree
from .progress import notable_lines
from .worker import sandbox_settings, worker_api, worker_init


class Delivered(NbGraderPreprocessor):
    """Stands in for the execution step where a hand-in graded elsewhere is recorded: the notebook its worker
    executed, from the recorder's folder (``folder/<student>/<assignment>/<notebook>.ipynb``, :func:`record`)."""

    folder = Unicode("", help="where the recorder puts the executed notebooks it is given").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        student, assignment, name = (info.get("student", ""), info.get("assignment", ""), info.get("notebook", ""))
        try:
            executed = (Path(self.folder) / student / assignment / f"{name}.ipynb").read_text(encoding="utf-8")
        except (OSError, ValueError):
            raise RuntimeError(f"no worker returned {name}.ipynb of {student}/{assignment}") from None
        return nbformat.reads(executed, as_version=4), resources


def package_fingerprint() -> str:
    digest = hashlib.sha256()
    hash_tree(digest, PACKAGE_DIR, skip=("__pycache__",))
    return digest.hexdigest()


def read_tree(root: Path) -> dict[str, bytes]:
    """The files of ``root`` that :func:`.trust.inspect_handin` accepts (never through a link), by relative
    POSIX path."""
    return {rel: path.read_bytes() for path, rel, _ in trust.inspect_handin(root).files}


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    """Replace ``root`` by ``files`` (relative paths only)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for rel, data in files.items():
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"refusing to write {rel!r}")
        path = root.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def course_payload(course: Path, assignment: str, accept: set[str] = frozenset()) -> dict:
    """What a worker needs to grade hand-ins of ``assignment``, besides the hand-in itself (``accept``: the missing
    sandbox layers the instructor accepts, as for local grading)."""
    return {"assignment": assignment, "accept": sorted(accept), "fingerprint": course_fingerprint(course, assignment),
            "package": package_fingerprint(), "config": (course / "nbgrader_config.py").read_bytes(),
            "source": read_tree(course / "source" / assignment),
            "release": {rel: data for rel, data in read_tree(course / "release" / assignment).items()
                        if not rel.endswith(".ipynb")}}


# -- on the worker -------------------------------------------------------------------------
_LOCK = threading.Lock()  # one notebook at a time per worker process (grading changes the working directory)


@dataclass
class WorkerCourse:
    """What a worker process keeps between hand-ins: its scratch course (``root``, made for ``config``), the
    assignments put into its gradebook (by their fingerprint), the course package's fingerprint, and its sandbox
    as probed once."""

    root: Path | None = None
    config: bytes | None = None
    assignments: dict = field(default_factory=dict)
    package: str | None = None
    sandbox: tuple | None = None
    profiler_stopped: bool = False


#: This worker process's scratch course (one per process: the lock above lets one hand-in at a time use it).
_HERE = WorkerCourse()


def _dask_worker():
    """The Dask worker this code runs in, or None (the grading service's local workers, the tests)."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def _scratch_root() -> Path:
    worker = _dask_worker()
    base = Path(worker.local_directory) if worker is not None else Path(os.environ.get("TMPDIR", "/tmp"))
    return base / "attention-course"


def worker_name() -> str:
    worker = _dask_worker()
    return worker.address if worker is not None else os.uname().nodename


def stop_profiler() -> None:
    """Stop this Dask worker's sampling of the thread that runs its tasks, once. By default
    (``distributed.worker.profile``) the worker's event loop walks that thread's stack every 10 ms, holding the
    interpreter while the grading thread waits. Grading is deep Python (nbgrader, the judge's replies): on the 2-core
    machine the two workers' own processes took 41 to 44 core-seconds for a class of 140 with it and 29 to 34
    without (docs/performance.md). It only feeds the dashboard's profile page. (On Python 3.12 and later a worker
    also samples its own event loop from a thread, which only the workers' configuration turns off: docs/dask.md.)
    Outside a Dask worker (the grading service's local workers), nothing."""
    if _HERE.profiler_stopped:
        return
    _HERE.profiler_stopped = True
    worker = _dask_worker()
    if worker is None:
        return

    def stop() -> None:  # on the worker's event loop, which runs the periodic callbacks
        for name in ("profile", "profile-cycle"):
            callback = worker.periodic_callbacks.get(name)
            if callback is not None:
                callback.stop()

    worker.loop.add_callback(stop)  # (tornado's one thread-safe way into the loop)


def use_scratch(root: Path) -> None:
    """Grade in scratch courses under ``root`` (a local worker of the grading service: each its own folder) instead
    of the Dask worker's local directory."""
    _HERE.root = root


def prepare(payload: dict) -> Path:
    """The worker's scratch course, holding the payload's configuration and assignment source; refused where this
    worker's sandbox lacks a layer the instructor has not accepted."""
    if _HERE.package is None:
        _HERE.package = package_fingerprint()
    if payload["package"] != _HERE.package:
        raise RuntimeError("this worker's attention_course package differs from the client's: install the same "
                           "version of the course on every worker")
    root = _HERE.root or _scratch_root()
    db_url = f"sqlite:///{root / 'gradebook.db'}"
    if _HERE.config != payload["config"]:  # a new configuration: a new scratch course and nbgrader app
        shutil.rmtree(root, ignore_errors=True)
        (root / "source").mkdir(parents=True)
        (root / "nbgrader_config.py").write_bytes(payload["config"])
        _HERE.root, _HERE.config, _HERE.assignments, _HERE.sandbox = root, payload["config"], {}, None
        worker_init(str(root), db_url, records=False)  # the gradebook's one writer records it
    if _HERE.sandbox is None:  # this worker's host, probed once as the client probes its own
        settings = sandbox_settings(root, worker_api())
        _HERE.sandbox = (doctor.probe(settings, str(root / "nbgrader_config.py")), settings)
    gaps = doctor.refused(*_HERE.sandbox, set(payload.get("accept", [])))
    if gaps:
        raise RuntimeError(f"the sandbox of worker {worker_name()} lacks {', '.join(gaps)} (`make doctor` on that "
                           "machine says how to add them; --accept-missing grades anyway)")
    assignment = payload["assignment"]
    if _HERE.assignments.get(assignment) != payload["fingerprint"]:
        write_tree(root / "source" / assignment, payload["source"])
        write_tree(root / "release" / assignment, payload.get("release", {}))  # what a kernel may be given
        register(root, db_url, assignment)
        _HERE.assignments[assignment] = payload["fingerprint"]
    return root


def unreadable_notebooks(names: list[str], files: dict[str, bytes]) -> list[str]:
    """Which of the notebooks ``names`` that ``files`` hold nbformat cannot read (not UTF-8, not JSON, not a
    notebook): the hand-in's own problem, whatever its bytes say."""
    bad = []
    for name in names:
        if name not in files:
            continue
        try:
            nbformat.reads(files[name].decode("utf-8"), as_version=4)
        except Exception:  # UnicodeDecodeError, NotJSONError, a JSON that is not a notebook, a nesting too deep
            bad.append(name)
    return bad


def grade_on_worker(payload: dict, student: str, handin: dict[str, bytes]) -> Outcome:
    """Autograde one hand-in in the worker's scratch course; returns its :class:`.outcome.Outcome` with the executed
    notebooks, whose ``status`` says whose a failure is, decided by where it happened, never by an error's text:
    graded; the hand-in's (a notebook of it cannot be read, ``unreadable`` names them); the grader's (an
    :class:`.executor.EnvironmentFault` raised here while grading it: not the student's); failed (anything else: not
    graded, the instructor sees why). A worker that cannot grade at all (its sandbox, its package) raises instead:
    the caller's future fails, also the grader's."""
    with _LOCK:
        start = time.monotonic()
        stop_profiler()
        try:
            root = prepare(payload)
        except (SystemExit, CourseError) as exc:  # nbgrader's and the course's command-line errors must not end the worker
            raise RuntimeError(str(exc)) from None
        expected = sorted(rel for rel in payload["source"] if rel.endswith(".ipynb") and "/" not in rel)
        unreadable = unreadable_notebooks(expected, handin)
        assignment = payload["assignment"]
        if unreadable:
            return not_graded(assignment, student, HANDIN, f"{', '.join(unreadable)} cannot be read as a notebook (not "
                              "UTF-8 JSON in nbformat 4)", unreadable=unreadable, seconds=time.monotonic() - start,
                              worker=worker_name())
        os.chdir(root)
        submitted = root / "submitted" / student / assignment
        graded = root / "autograded" / student / assignment
        faults = len(EnvironmentFault.raised)
        try:
            try:
                write_tree(submitted, handin)
            except (OSError, ValueError) as exc:  # a name or path this machine cannot hold: the hand-in's
                return not_graded(assignment, student, HANDIN, "a file of the hand-in cannot be written here "
                                  f"({type(exc).__name__})", seconds=time.monotonic() - start, worker=worker_name())
            shutil.rmtree(graded, ignore_errors=True)
            result = worker_api().autograde(assignment, student, force=True, create=True)
            notebooks = {p.stem: p.read_text(encoding="utf-8") for p in sorted(graded.glob("*.ipynb"))}
        finally:
            shutil.rmtree(submitted.parent, ignore_errors=True)
            shutil.rmtree(graded.parent, ignore_errors=True)
        raised = EnvironmentFault.raised[faults:]
        success = bool(result.get("success")) and bool(notebooks) and not raised
        return Outcome(assignment, student, GRADED if success else GRADER if raised else FAILED,
                       log="\n".join(notable_lines(result.get("log", ""))),
                       error=result.get("error", "") or ("" if notebooks else "the worker produced no notebook"),
                       seconds=time.monotonic() - start, worker=worker_name(), notebooks=notebooks, faults=raised)


# -- on the client ---------------------------------------------------------------------------
def recorder(course: Path, db_url: str, folder: Path):
    """An nbgrader API whose autograde records the notebooks :func:`record` puts in ``folder`` (a folder of the
    grader's own) instead of executing: the gradebook's one writer for hand-ins graded elsewhere."""
    app = NbGrader()
    app.initialize([])
    app.config.CourseDirectory.root = str(course)
    app.config.CourseDirectory.db_url = db_url
    app.config.Delivered.folder = str(folder)
    steps = list(app.config.Autograde.get("autograde_preprocessors", []))
    replaced = [Delivered if isinstance(p, type) and issubclass(p, (JudgedExecute, Execute)) else p for p in steps]
    if Delivered not in replaced:
        raise ConfigError("nbgrader_config.py sets no execution step in c.Autograde.autograde_preprocessors: "
                         "there is nothing to run on the cluster")
    app.config.Autograde.autograde_preprocessors = replaced
    app.log.setLevel("WARNING")
    api = NbGraderAPI(parent=app)
    api.log.setLevel("WARNING")
    return api


def record(api, folder: Path, outcome: Outcome) -> Outcome:
    """Record a hand-in graded elsewhere (``outcome``, with its executed notebooks) in the gradebook through the
    :func:`recorder` ``api`` whose folder is ``folder``: the one place such results are written."""
    start = time.monotonic()
    delivered = Path(folder) / outcome.student / outcome.assignment
    shutil.rmtree(delivered, ignore_errors=True)
    delivered.mkdir(parents=True)
    try:
        for name, text in outcome.notebooks.items():
            (delivered / f"{name}.ipynb").write_text(text, encoding="utf-8")
        result = api.autograde(outcome.assignment, outcome.student, force=True, create=False)
    finally:
        shutil.rmtree(delivered, ignore_errors=True)
    return outcome.recorded(result, time.monotonic() - start)


def grade(course: Path, db_url: str, todo: list, scheduler: str, accept: set[str] = frozenset()):
    """Grade ``todo`` (:class:`.plan.Job`) on the cluster at ``scheduler``; yields (job, result) as each is recorded."""
    from distributed import Client, as_completed
    from distributed.client import FutureCancelledError

    client = Client(scheduler, timeout="30s", name="attention-course-autograde")
    delivery = None
    try:
        payloads, futures, handins, retried = {}, {}, {}, set()

        def scatter(assignment: str):
            # one object (a dict given to scatter would become one key per item, shared across assignments),
            # copied to every worker: scattered data has no recipe, and a single copy dies with its worker
            payloads[assignment] = client.scatter([course_payload(course, assignment, accept)], hash=False,
                                                  broadcast=True)[0]

        def submit(job):
            handin = handins[(job.assignment, job.student)]
            future = client.submit(grade_on_worker, payloads[job.assignment], job.student, handin, pure=False,
                                   key=f"autograde-{job.assignment}-{job.student}-{os.urandom(4).hex()}")
            futures[future] = (job, payloads[job.assignment].key)
            return future

        for job in todo:
            if job.assignment not in payloads:
                scatter(job.assignment)
            try:
                handins[(job.assignment, job.student)] = read_tree(course / "submitted" / job.student
                                                                   / job.assignment)
            except (OSError, ValueError) as exc:
                yield job, not_graded(job.assignment, job.student, HANDIN, f"the hand-in could not be read: {exc}")
                continue
            submit(job)
        delivery = Path(tempfile.mkdtemp(prefix="attention-delivered-"))
        api = recorder(course, db_url, delivery)
        running = as_completed(list(futures))
        for future in running:
            job, payload_key = futures.pop(future)
            try:
                result = future.result()
            except FutureCancelledError:  # its payload was lost with the workers that held it: send it again, once
                future.release()
                if (job.assignment, job.student) not in retried:
                    retried.add((job.assignment, job.student))
                    if payloads[job.assignment].key == payload_key:
                        scatter(job.assignment)
                    running.add(submit(job))
                    continue
                result = not_graded(job.assignment, job.student, GRADER, "the cluster lost this hand-in twice")
            except Exception as exc:  # KilledWorker (it took down too many workers), or the task's own error
                result = not_graded(job.assignment, job.student, GRADER, f"{type(exc).__name__}: {exc}")
            handins.pop((job.assignment, job.student), None)
            future.release()
            if result.success:
                result = record(api, delivery, result)
            yield job, result
    finally:
        client.close()
        if delivery is not None:
            shutil.rmtree(delivery, ignore_errors=True)
