import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from harness import build_class, unix_users

from attention_course.grading.course import available, catalogue_path
from attention_course.grading.kernels.sandbox import landlock_abi
from tools.submissions import Submission, load_catalogue, packed, representative

sys.path.insert(0, str(Path(__file__).parent / "catalogue"))
sys.path.insert(0, str(Path(__file__).parent / "tools"))
import adversarial  # noqa: E402

GRADED = [a for a in available() if catalogue_path(a).exists()]
#: The hostile hand-ins this host can run (some need Landlock's signal scoping, or root to make a device file).
ATTACKS = [a for a in adversarial.ATTACKS if not (a.needs == "signals" and landlock_abi() < 6)
           and not (a.needs == "root" and os.geteuid() != 0)]
#: ``make sweep`` (ATTENTION_SWEEP=1) grades and validates every entry of every catalogue; ``make test`` the
#: representative part (:func:`tools.submissions.representative`).
SWEEP = os.environ.get("ATTENTION_SWEEP") == "1"


def catalogue_in_run(assignment: str) -> list[Submission]:
    """The entries of an assignment's catalogue that this run grades and validates: all of them under
    ``make sweep``; under ``make test`` the representative part, with every entry a hostile hand-in is built on."""
    catalogue = load_catalogue(catalogue_path(assignment))
    if SWEEP:
        return catalogue
    return representative(catalogue, keep=attacked_bases(assignment))


def attacked_bases(assignment: str) -> set[str]:
    """The catalogue entries the hostile hand-ins of an assignment are built on (their grades are compared by name)."""
    return {a.base for a in adversarial.ATTACKS if a.assignment == assignment}


def handins_in_run(assignment: str) -> list[Submission]:
    """What this run hands in for :func:`catalogue_in_run`: under ``make sweep`` each entry alone; under ``make test``
    entries that change different cells and lose different grade cells share a hand-in (:func:`tools.submissions.packed`)."""
    entries = catalogue_in_run(assignment)
    return entries if SWEEP else packed(entries, keep=attacked_bases(assignment))


def pytest_terminal_summary(terminalreporter):
    """Say at the end of the run how much of the catalogues it took (-q included)."""
    counts = [(len(catalogue_in_run(a)), len(load_catalogue(catalogue_path(a)))) for a in GRADED]
    handins = sum(len(handins_in_run(a)) for a in GRADED)
    terminalreporter.write_line(
        f"catalogues: {sum(t for t, _ in counts)} of {sum(n for _, n in counts)} entries in this run's graded class "
        f"and Validate checks, in {handins} hand-ins " +
        ("(make sweep: all, each alone)" if SWEEP else "(make test: the representative part, entries that touch "
                                                       "different cells sharing a hand-in; make sweep takes all, each alone)"))


#: Fixtures that run nbgrader, a grading run, a server or a browser: a test using one is ``slow`` (make test only).
SLOW_FIXTURES = {"the_class", "graded", "hostile", "regenerated", "demo", "world", "stage"}
SLOW_MODULES = {"test_exchange.py", "test_load.py", "test_parallel.py", "test_browser.py", "test_browser_inert.py", "test_isolation.py",
                "test_faults.py", "test_hub.py", "test_term.py", "test_bundle.py", "test_term_class.py", "test_regrade.py"}


#: Files whose tests share the session's graded class: under pytest-xdist (make test) they run in one worker.
CLASS_MODULES = {"test_grading.py", "test_security.py", "test_accessibility.py"}
#: The other long files, longest first (seconds of one xdist process in a make test run on a fresh clone, measured
#: 2026-12-02): handed out before the short ones, so that no process is left with a long file while the others have
#: finished. make test passes --no-loadscope-reorder: without it xdist hands files out by their number of tests, not
#: in this order. The hub's file first: on a fresh machine it builds the shared environment.
LONG_MODULES = ["test_hub.py",  # ~165 s, ~230 s the first time on a machine
                "test_release.py",  # ~370 s
                "test_term.py",  # ~245 s
                "test_bundle.py",  # ~205 s: a student's install (issue 58)
                "test_exchange.py",  # ~165 s
                "test_parallel.py",  # ~160 s
                "test_browser.py",  # ~150 s
                "test_term_class.py",  # ~145 s: a term with real users (issue 59)
                "test_similarity.py",  # ~80 s
                "test_faults.py",  # ~75 s
                "test_service.py",  # ~70 s
                "test_sandbox.py",  # ~65 s
                "test_browser_inert.py",  # ~50 s
                "test_regrade.py",  # ~50 s
                "test_isolation.py"]  # ~45 s


def _order(item) -> int:
    name = item.path.name
    if name in CLASS_MODULES:
        return 0
    return 1 + LONG_MODULES.index(name) if name in LONG_MODULES else 1 + len(LONG_MODULES)


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=_order)  # the longest work first (a stable sort: each file's tests keep their order)


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test`` runs four workers on two cores), each test file goes whole to one worker, so that its
    module fixtures (a scratch course, a server, a browser) are built once; the files that read the graded
    class go together, so that it is graded once. (xdist's own ``loadgroup`` names groups through a node
    attribute that pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "the graded class" if Path(path).name in CLASS_MODULES else path

    return ByFile(config, log)


#: The folders every user of the machine writes in: no test, grader or kernel may change their mode or owner.
SHARED_FOLDERS = sorted({"/tmp", tempfile.gettempdir()})
_SHARED = pytest.StashKey[dict]()


def shared_folders() -> dict:
    return {path: (f"{stat.S_IMODE(st.st_mode):o}", st.st_uid) for path in SHARED_FOLDERS for st in [os.stat(path)]}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_SHARED] = shared_folders()  # before any fixture of the test (a module's or the session's included)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Every test ends with the temporary folders' modes and owners as it found them before its fixtures were set up
    (1777, root's, for /tmp): a grader that changed them (a kernel's scratch removed with its parent's mode taken
    away) would lock every user of a hub out of /tmp. Checked after the test's teardown; the test fails."""
    outcome = yield
    report = outcome.get_result()
    before = item.stash.get(_SHARED, None)
    if call.when == "teardown" and before is not None:
        after = shared_folders()
        if after != before:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} (its fixtures included) changed folders every user writes in: "
                               + ", ".join(f"{p} {before[p]} -> {after[p]}" for p in before if after[p] != before[p]))


@pytest.fixture(scope="session")
def grader_user():
    """The uid of an ordinary user for the tests that grade as one: a Unix user this session creates (home 0755,
    as Debian's useradd leaves it) and removes at its end; 65534 where users cannot be created; this process's own
    uid when the tests do not run as root."""
    if os.geteuid() != 0:
        yield os.getuid()
        return
    with unix_users(f"attn-grader-{os.getpid()}") as uids:
        yield uids[0] if uids else 65534


@pytest.fixture(scope="session")
def the_class(tmp_path_factory):
    """Every catalogued assignment's catalogue and every hostile hand-in, graded once per session in one run."""
    A = adversarial.ASSIGNMENT
    globs = {A: {**{gid: adversarial.BASE["unscaled-scores"] for gid in adversarial.GLOB_IDS},
                 "blank-reads-source": adversarial.BLANK_READS_SOURCE}}
    return build_class(tmp_path_factory.mktemp("class"), {a: handins_in_run(a) for a in GRADED}, ATTACKS, globs, adversarial.LINKED_FOLDERS)


@pytest.fixture(scope="session")
def graded(the_class):
    """``graded(assignment) -> GradedClass``: the catalogue's students of one assignment."""
    return the_class.graded.__getitem__


@pytest.fixture(scope="session")
def hostile(the_class):
    """``hostile(assignment)``: an attacked assignment's whole run (catalogue and hostile hand-ins)."""
    return the_class.hostile.__getitem__
