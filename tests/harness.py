"""Real nbgrader runs in scratch course folders, shared by the grading tests."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from attention_course.checks import EXPECTED_LOG
from attention_course.grading.cells import (
    BEGIN_HIDDEN,
    BEGIN_STARTER,
    END_HIDDEN,
    END_STARTER,
    replace_blocks,
    uncomment,
)
from attention_course.grading.course import COURSE_ID, ROOT, gradebook_url, scratch_course
from attention_course.grading.deploy.users import add_user, remove_users
from attention_course.grading.run.tables import cell_scores
from tools.submissions import (
    BEGIN_SOLUTION,
    END_SOLUTION,
    Submission,
    catalogue_roster,
    read_notebook,
    write_class,
)

BIN = Path(sys.executable).parent


def masters(assignment: str) -> dict[str, dict]:
    """An assignment's master notebooks, by file name."""
    return {p.name: read_notebook(p) for p in sorted((ROOT / "source" / assignment).glob("*.ipynb"))}


def split_master(nb: dict) -> tuple[set[str], set[str], set[str]]:
    """Stripped lines of a master: (solution-only, hidden-only, everything a student may see)."""
    solution, hidden, visible = set(), set(), set()
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        src = replace_blocks(src, BEGIN_HIDDEN, END_HIDDEN, lambda b, i: hidden.update(b) or [])
        src = replace_blocks(src, BEGIN_SOLUTION, END_SOLUTION, lambda b, i: solution.update(b) or [])
        src = replace_blocks(src, BEGIN_STARTER, END_STARTER, uncomment)
        visible.update(src.split("\n"))
    norm = lambda lines: {l.strip() for l in lines if len(l.strip()) >= 12 and not l.strip().startswith("#")}
    seen, solution = norm(visible), norm(solution)
    # a hidden line that a visible line contains is no secret (the release shows it)
    hidden = {h for h in norm(hidden) - seen - solution if not any(h in v for v in seen)}
    return solution - seen, hidden, seen


def trains_a_model(assignment: str) -> bool:
    """Whether a master trains a model (it prints ``step …``) and shortens it under NBGRADER_EXECUTION."""
    sources = ["".join(c["source"]) for nb in masters(assignment).values() for c in nb["cells"]]
    return any("NBGRADER_EXECUTION" in s for s in sources) and any('f"step {' in s for s in sources)




def as_student(home, user: str, exchange, *args: str) -> subprocess.CompletedProcess:
    """An nbgrader command run by a student: their own folder, the course's exchange, and their id (every
    test student is the same system user here; on JupyterHub each one's user name is their id)."""
    env = dict(os.environ, USER=user, LOGNAME=user, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("JUPYTERHUB_USER", None)
    quiet = [] if args[0] == "list" else ["--log-level=WARN"]  # `list` tells what it finds in its log
    if args[0] in ("submit", "fetch_feedback"):
        quiet.append(f"--student={user}")
    # the student's own nbgrader cache (the secrets submit keeps to fetch feedback), never the real home's
    proc = subprocess.run([str(BIN / "nbgrader"), *args, f"--course={COURSE_ID}", f"--Exchange.root={exchange}",
                           f"--Exchange.cache={Path(home) / '.nbgrader_cache'}", *quiet], cwd=home, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} as {user} failed:\n{proc.stderr[-3000:]}"
    return proc


@contextmanager
def unix_users(*names: str):
    """Real Unix users for a test (root only): each created with a home of its own (0755, as Debian's useradd
    leaves it) and removed, with every process and file of theirs, at the end. Yields their uids, or None where
    users cannot be created (not root, no useradd)."""
    import pwd
    import shutil

    made = []
    try:
        for name in names:
            if os.geteuid() != 0 or not shutil.which("useradd"):
                yield None
                return
            if add_user(name, "/usr/sbin/nologin").returncode != 0:
                yield None
                return
            made.append(name)
        yield [pwd.getpwnam(name).pw_uid for name in names]
    finally:
        remove_users(made)


def as_unix(user: str, uid: int, home: Path, reach: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    """``cmd`` run by the real Unix user ``user`` (uid ``uid``) in ``home``, with nothing of root's environment but the
    course's PATH, in a mount namespace where the paths of ``reach`` (``:``-separated) are reachable to it
    (``tests/tools/as_user.py``)."""
    env = ["env", "-i", f"HOME={home}", f"USER={user}", f"LOGNAME={user}", f"PATH={BIN}:/usr/bin:/bin",
           "PYTHONDONTWRITEBYTECODE=1"]
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "as_user.py"), "--user", str(uid), reach,
                          "--", *env, *cmd], cwd=home, capture_output=True, text=True, timeout=300)
    assert not check or run.returncode == 0, f"{' '.join(cmd)} as {user}:\n{run.stderr[-3000:]}"
    return run


def grade_by_hand(course: Path, assignment: str, student: str, scores: dict, comments: dict, ticks: dict) -> None:
    """As a grader on the question page: a score (as the Formgrader's API sets it: ``Grade.manual_score``, then
    ``needs_manual_grade``), a comment, the ticks (grade id -> lines of the mark scheme)."""
    from nbgrader.api import Gradebook

    from attention_course.grading.nbgrader_glue import handgrades, patches

    patches.install()  # the course's gradebook events, as nbgrader_config.py installs them for nbgrader's commands
    from attention_course.grading.course import gradebook_url

    with Gradebook(gradebook_url(course)) as gb:
        for nb in gb.find_submission(assignment, student).notebooks:
            for grade in nb.grades:
                if grade.name in scores:
                    grade.manual_score = scores[grade.name]
                    grade.needs_manual_grade = False
            for comment in nb.comments:
                if comment.name in comments:
                    comment.manual_comment = comments[comment.name]
            gb.db.commit()
            for grade in nb.grades:
                if grade.name in ticks:
                    handgrades.row_of_grade(gb.db, grade).ticks = json.dumps(ticks[grade.name])
        gb.db.commit()


def hand_state(course: Path, assignment: str, student: str) -> dict:
    """grade id -> (manual score, waits for a grader, comment, ticks, previous score, previous comment, previous
    ticks) of every answer graded by hand."""
    from nbgrader.api import Gradebook

    from attention_course.grading.course import gradebook_url
    from attention_course.grading.nbgrader_glue import handgrades

    found = {}
    with Gradebook(gradebook_url(course)) as gb:
        for nb in gb.find_submission(assignment, student).notebooks:
            comments = {c.name: c.manual_comment for c in nb.comments}
            for grade in nb.grades:
                row = handgrades.row_of_grade(gb.db, grade, create=False)
                if row is None:
                    continue
                found[grade.name] = (grade.manual_score, bool(grade.needs_manual_grade), comments.get(grade.name),
                                     handgrades.read_ticks(row.ticks), row.previous_score, row.previous_comment,
                                     handgrades.read_ticks(row.previous_ticks))
    return found


def answer_into(fetched: Path, answered: dict) -> None:
    """Write the answers of notebook ``answered`` into the released notebook ``fetched`` a student works in
    (its cells, ids and metadata kept: only the source of solution cells changes)."""
    fetched.write_text(json.dumps(answered_notebook(read_notebook(fetched), answered)), encoding="utf-8")


def answered_notebook(released: dict, answered: dict) -> dict:
    """The released notebook ``released`` with the solution cells' source of ``answered`` (changed in place)."""
    by_id = {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in answered["cells"]}
    for cell in released["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid and gid in by_id and cell["metadata"]["nbgrader"].get("solution"):
            cell["source"] = by_id[gid]["source"]
    return released


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command in ``course`` with the venv first on PATH."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    quiet = [] if args[0] == "validate" else ["--log-level=WARN"]  # validate takes no log level
    proc = subprocess.run([str(BIN / "nbgrader"), *args, *quiet], cwd=course, env=env,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


API_CALLS = """
import json, sys
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
app = NbGrader()
app.initialize([])
if sys.argv[1]:
    app.config.CourseDirectory.db_url = sys.argv[1]
app.log.setLevel("ERROR")
api = NbGraderAPI(parent=app)


def generate_solution(assignment_id, force=True):  # not in NbGraderAPI: as generate_assignment is done there
    from nbgrader.converters import GenerateSolution
    from nbgrader.utils import capture_log, temp_attrs

    with temp_attrs(api.coursedir, assignment_id=assignment_id):
        converter = GenerateSolution(coursedir=api.coursedir, parent=api)
        converter.force = force
        return capture_log(converter)


for method, args, kwargs in json.loads(sys.argv[2]):
    result = (generate_solution if method == "generate_solution" else getattr(api, method))(*args, **kwargs)
    if not result["success"]:
        sys.exit(f"{method}{tuple(args)}: {result.get('error', '')}{result.get('log', '')[-3000:]}")
"""


def api_calls(course: Path, calls: list[tuple[str, list, dict]], db_url: str = "") -> None:
    """Several calls of nbgrader's own API (``NbGraderAPI``: generate_assignment, generate_solution,
    generate_feedback, autograde...) in one process, in ``course``: nbgrader's import (3 s of CPU) is paid once."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-c", API_CALLS, db_url, json.dumps(calls)], cwd=course, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader {[c[0] for c in calls]} failed:\n{proc.stderr[-4000:]}")


def release(course: Path, assignments: list[str], db_url: str = "") -> None:
    """``nbgrader generate_assignment`` for several assignments in one process (into ``db_url`` if given)."""
    api_calls(course, [("generate_assignment", [a], {"force": True, "create": True}) for a in assignments], db_url)


def feedback(course: Path, assignments: list[str], processes: int = 2) -> None:
    """``nbgrader generate_feedback`` for several assignments, in ``processes`` processes that share them out by
    their number of hand-ins (one process writes a class's 230 pages in 40 s of one core)."""
    from concurrent.futures import ThreadPoolExecutor

    handins = {a: len(list((course / "submitted").glob(f"*/{a}"))) for a in assignments}
    shares: list[list] = [[] for _ in range(processes)]
    loads = [0] * processes
    for a in sorted(assignments, key=lambda a: -handins[a]):  # the most hand-ins first, to the least loaded
        least = loads.index(min(loads))
        shares[least].append(("generate_feedback", [a], {"force": True}))
        loads[least] += handins[a]
    with ThreadPoolExecutor(processes) as pool:
        list(pool.map(lambda calls: api_calls(course, calls), [share for share in shares if share]))


def course_command(course: Path, command: str, *args: str, check: bool = True, env: dict | None = None
                   ) -> subprocess.CompletedProcess:
    """Run one of the course's commands (``python -m attention_course.grading <command>``) in ``course``
    (``env``: extra variables)."""
    env = dict(os.environ, **(env or {}), PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "attention_course.grading", "--course", str(course), command,
                           *args], cwd=course, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{command} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


#: For a run of a few hand-ins that is not about parallel grading: each worker starts its own fork server (about 4
#: core-seconds, more than grading two hand-ins), and make test's processes share 2 cores.
ONE_WORKER = ("--workers", "1")


def course_autograde(course: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the course's parallel autograde command (``make autograde``) in ``course`` (``env``: extra variables)."""
    return course_command(course, "autograde", *args, check=check, env=env)


def new_course(tmp: Path, assignments: list[str]) -> Path:
    """A scratch course holding this repository's config and the given assignments' sources."""
    return scratch_course(tmp, assignments)


def released_course(tmp: Path, assignments: list[str]) -> Path:
    """:func:`new_course` with the repository's own release of the assignments copied in (test_release proves it is
    what ``generate_assignment`` makes): for the tests that only need students' notebooks, without nbgrader's run."""
    import shutil

    course = new_course(tmp, assignments)
    for a in assignments:
        shutil.copytree(ROOT / "release" / a, course / "release" / a)
    return course


@dataclass
class GradedClass:
    """One assignment released, submitted by a whole synthetic class, autograded and given feedback."""

    course: Path
    assignment: str
    handins: list[Submission]  # what was handed in: catalogue entries, alone or several in one (tools.submissions.packed)
    students: list[str]
    autograde_log: str
    scores: dict = field(default_factory=dict)  # student -> {grade cell: (score, max, needs_manual)}

    @property
    def catalogue(self) -> list[Submission]:
        """The catalogue entries graded, one by one."""
        return [part for h in self.handins for part in (h.parts or (h,))]

    def student(self, entry: str) -> str:
        """The student whose hand-in carries the catalogue entry ``entry``."""
        return next(h.name for h in self.handins if entry in {p.name for p in h.parts or (h,)})

    def parts(self, entry: str) -> tuple[Submission, ...]:
        """Every catalogue entry of the hand-in that carries ``entry`` (``entry`` alone if it was handed in alone)."""
        handin = next(h for h in self.handins if h.name == self.student(entry))
        return handin.parts or (handin,)

    def feedback_text(self, student: str) -> str:
        """The text of a student's feedback pages, tags removed and entities decoded."""
        return feedback_text(self.course, student, self.assignment)

    def first_failure(self, student: str, among=None) -> tuple[str, str]:
        """The first failed test cell of a student's autograded notebooks, in notebook order (of the cells ``among``
        only, if given): (grade id, message)."""
        return first_failure(self.course, student, self.assignment, among)


def feedback_text(course: Path, student: str, assignment: str) -> str:
    """The text of a student's feedback pages, tags removed and entities decoded."""
    texts = []
    for page in sorted((course / "feedback" / student / assignment).glob("*.html")):
        markup = re.sub(r"(?is)<(style|script)\b.*?</\1>", "", page.read_text(encoding="utf-8"))
        texts.append(html.unescape(re.sub(r"<[^>]+>", "", markup)))
    return "\n".join(texts)


def first_failure(course: Path, student: str, assignment: str, among=None) -> tuple[str, str]:
    """The first autograded test cell (of the grade ids ``among``, if given), in notebook order, whose output is an
    error: (grade id, the error's line)."""
    for path in sorted((course / "autograded" / student / assignment).glob("*.ipynb")):
        for cell in read_notebook(path)["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if cell["cell_type"] != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            if among is not None and meta.get("grade_id") not in among:
                continue
            for out in cell.get("outputs", []):
                if out["output_type"] == "error":
                    return meta["grade_id"], f"{out['ename']}: {out['evalue']}"
    return "", ""


def read_scores(course: Path, assignment: str, db_url: str | None = None) -> dict:
    return cell_scores(db_url or gradebook_url(course), assignment)


def tree_digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (its children, theirs, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


class PeakMemory(threading.Thread):
    """The most resident memory of any process this test started (the grading command and what it starts) outside a
    kernel sandbox while grading runs; other tests' processes (under pytest-xdist) do not count. Every 0.5 s it reads
    each such process's own high-water mark (``VmHWM``), the most it has held so far: a peak between two readings is
    seen at the next one, unless the process has ended by then. The course command, its grading processes and their
    zygotes live for the whole run; a judge may not, and is capped by its own address-space limit (JUDGE_BYTES)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.who, self.stop, self.kernel_uids = 0, "", threading.Event(), set()

    def run(self):
        mine = os.getpid()
        while not self.stop.wait(0.5):
            for pid in descendants(mine):
                try:
                    if "attention-judge-" in os.readlink(f"/proc/{pid}/cwd"):
                        self.kernel_uids.add(os.stat(f"/proc/{pid}").st_uid)
                        continue  # kernels (capped by their own sandbox)
                    status = open(f"/proc/{pid}/status").read()
                    high = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) * 1024
                    if high > self.peak:
                        self.peak, self.who = high, open(f"/proc/{pid}/cmdline", "rb").read()[:200]
                except (OSError, AttributeError, ValueError):  # it ended meanwhile
                    continue


#: Short limits keep the hostile hand-ins' faults quick; the judge gets a smaller memory cap than by default. The
#: class's kernels run as uids of their own range (from CLASS_UID_BASE, 2**26 of them; the default base is 1.6e9),
#: so that what they leave behind is told apart from the kernels of tests running at the same time. 10 s a cell: a
#: legitimate cell of 05 passed 8 s, and its hand-in ran out of restarts, when the machine ran at half its speed.
CELL_S, NOTEBOOK_S, JUDGE_BYTES, CLASS_UID_BASE = 10, 60, 2 * 2**30, 1_700_000_000
LIMITS = (f"\nc.JudgedExecute.timeout = {CELL_S}\nc.JudgedExecute.interrupt_grace = 2\n"
          f"c.JudgedExecute.notebook_timeout = {NOTEBOOK_S}\nc.JudgedExecute.judge_memory_limit = {JUDGE_BYTES}\n"
          f"c.JudgedExecute.kernel_uid_base = {CLASS_UID_BASE}\n")


@dataclass
class Class:
    """The test suite's class: every assignment's catalogue and the hostile hand-ins, graded in one run."""

    course: Path
    log: str
    graded: dict  # assignment -> GradedClass (the catalogue's students only)
    hostile: dict  # attacked assignment -> the run as test_security reads it
    seconds: dict  # "assignment/student" -> seconds the hand-in took
    peak: tuple  # (the most resident memory of any grading process, which one)
    kernel_uids: set  # the uids the kernels were seen running as
    tmp: Path  # the grader's temporary folder (empty after grading)
    before: dict  # the catalogue students' hand-ins before grading (digests)
    source_before: dict
    shared_memory: tuple = (0, 0)  # the host's System V shared memory in bytes, before and after grading


def build_class(tmp: Path, catalogues: dict[str, list[Submission]], attacks: list, extra: dict, linked: dict) -> Class:
    """Release every assignment of ``catalogues``; hand in its catalogue entries (what ``make test`` or ``make sweep``
    takes of source/<id>/catalogue.py, alone or several in one hand-in (``tools.submissions.packed``), with the
    complete and the blank hand-in) and the hostile hand-ins
    of tests/catalogue/adversarial.py next to it (``extra``: more folders, such as ids named like glob patterns;
    ``linked``: hand-in folders that are links); autograde all of it in one run of the course command (a worker
    per core; a third worker beside the other test processes slowed a kernel past the 8 s cell limit once) with
    short time limits, watching the grading processes' memory; write the feedback. The catalogue's students
    are graded next to the hostile ones, so every catalogue test also shows that a hostile classmate changes
    nobody else's grade."""
    assignments = list(catalogues)
    course = new_course(tmp, assignments)
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(LIMITS)
    release(course, assignments)
    students = {a: write_class(course, a, catalogue_roster(catalogues[a])) for a in assignments}
    before = {s: tree_digest(course / "submitted" / s) for s in sorted({s for v in students.values() for s in v})}
    source_before = tree_digest(course / "source")
    for assignment in {a.assignment for a in attacks}:
        write_class(course, assignment, {a.name: a.submission() for a in attacks if a.assignment == assignment})
    for assignment, roster in extra.items():
        write_class(course, assignment, roster)
    for link, target in linked.values():
        (course / "submitted" / link).parent.mkdir(parents=True, exist_ok=True)
        (course / "submitted" / link).symlink_to(target, target_is_directory=True)
    memory = PeakMemory()
    memory.start()
    grader_tmp = course.parent / "tmp"  # the grader's own temporary folder, to see what it leaves behind
    grader_tmp.mkdir()
    assert len(str(grader_tmp)) + len("/attention-judge-12345678/judge.sock") <= 107, \
        "the kernels' scratch folders must be in the grader's TMPDIR (a deeper one falls back to /tmp)"
    expected = course / "expected-values.jsonl"  # every value a check compared against (checks.EXPECTED_LOG)
    shm_before = sysv_shared_memory()
    log = course_autograde(course, *assignments, "--force", check=False,
                           env={EXPECTED_LOG: str(expected), "TMPDIR": str(grader_tmp)}).stderr
    shm_after = sysv_shared_memory()
    memory.stop.set()
    memory.join()
    feedback(course, assignments)
    seconds = {m.group(1): float(m.group(2)) for m in re.finditer(r"(\S+/\S+) \(([\d.]+) s\)", log)}
    graded = {}
    for a in assignments:
        scores = read_scores(course, a)
        graded[a] = GradedClass(course, a, catalogues[a], students[a], log,
                                {s: v for s, v in scores.items() if s in students[a]})
    hostile = {a: {"course": course, "tmp": grader_tmp, "log": log, "scores": read_scores(course, a), "assignment": a,
                   "seconds": {k.split("/", 1)[1]: v for k, v in seconds.items() if k.startswith(f"{a}/")}}
               for a in {a.assignment for a in attacks}}
    return Class(course, log, graded, hostile, seconds, (memory.peak, memory.who), memory.kernel_uids, grader_tmp, before,
                 source_before, (shm_before, shm_after))


def sysv_shared_memory() -> int:
    """Bytes of System V shared memory on the host (what a kernel without an IPC namespace could leave behind)."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return sum(int(line.split()[3]) for line in lines)
