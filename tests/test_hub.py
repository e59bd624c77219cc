"""A class on JupyterHub, end to end, with real Unix users: ``make hub``'s class on loopback.

An instructor and two students (users this test makes and removes), the shared environment, the exchange as the
course prepares it, JupyterHub with deploy/jupyterhub/jupyterhub_config.py and PAM logins. Each student works
through their own server's REST API (the calls JupyterLab's Assignment List and Validate button make): fetch,
answer, Validate, submit. One student also plants a blank in the classmate's name dated 2099 and backdates a hand-in
of her own, from her own account, as a terminal of hers would. The instructor releases, collects and returns
feedback through the Formgrader's API of her own server, and types the documented commands (make doctor, make
autograde, nbgrader, python -m attention_course.grading) into a terminal of her JupyterLab and (make feedback, make
grades) into a login shell of hers, as over ssh: her course folder has no .venv.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
from harness import answered_notebook, masters, read_scores

from attention_course.grading.course import COURSE_ID, available, catalogue_path, gradebook_url
from attention_course.grading.deploy import hub
from attention_course.grading.run.doctor import exchange_findings
from attention_course.grading.run.tables import score_table
from tools.bench_submit import queue_rows
from tools.submissions import apply_submission, load_catalogue, solved_notebook

A, B = available()[:2]
NOTEBOOK, NOTEBOOK_B = "self_attention.ipynb", "multihead_attention.ipynb"


def _as(user: str, klass: hub.Class, *cmd: str, cwd: str | None = None, check=True) -> subprocess.CompletedProcess:
    """A command as ``user`` with the shared environment first on PATH (what a terminal of theirs runs)."""
    home = os.path.expanduser("~" + user)
    env = ["env", "-i", f"HOME={home}", f"USER={user}", f"LOGNAME={user}", f"PATH={klass.env}/bin:/usr/bin:/bin",
           f"NBGRADER_EXCHANGE_ROOT={klass.exchange}", "LANG=C.UTF-8"]
    run = subprocess.run(["runuser", "-u", user, "--", *env, *cmd], cwd=cwd or home, capture_output=True, text=True,
                         timeout=600)
    if check:
        assert run.returncode == 0, f"{' '.join(cmd)} as {user} ({run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-3000:]}"
    return run


class Hub:
    """The hub's REST API as the class-admin service, and each user's server with a token of theirs."""

    def __init__(self, klass: hub.Class):
        self.klass = klass
        self.base = f"http://{klass.ip}:{klass.port}"
        self.admin = {"Authorization": f"token {klass.api_token}"}
        self.tokens: dict[str, str] = {}

    def api(self, method: str, path: str, **kw) -> requests.Response:
        r = requests.request(method, f"{self.base}/hub/api{path}", headers=self.admin, timeout=60, **kw)
        assert r.ok, f"{method} {path}: {r.status_code} {r.text[:500]}"
        return r

    def start(self, user: str) -> None:
        self.tokens[user] = self.api("POST", f"/users/{user}/tokens", json={"note": "test"}).json()["token"]
        r = requests.post(f"{self.base}/hub/api/users/{user}/server", headers=self.admin, timeout=60)
        assert r.status_code in (201, 202), f"{user}'s server: {r.status_code} {r.text[:500]}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.api("GET", f"/users/{user}").json()["servers"].get("", {}).get("ready"):
                return
            time.sleep(1)
        raise AssertionError(f"{user}'s server did not start in 180 s")

    def server(self, user: str, method: str, path: str, as_user: str | None = None, **kw) -> requests.Response:
        token = self.tokens[as_user or user]
        return requests.request(method, f"{self.base}/user/{user}{path}", timeout=900,
                                headers={"Authorization": f"token {token}"}, **kw)

    def terminal(self, user: str, command: str, seconds: float = 600) -> tuple[int, str]:
        """``command`` typed into a new terminal of ``user``'s JupyterLab (the terminals REST API and its websocket,
        as JupyterLab's Terminal does): its exit status and what the terminal showed."""
        import re
        import secrets

        import websocket  # websocket-client

        name = self.json(user, "POST", "/api/terminals")["name"]
        ws = websocket.create_connection(f"ws://{self.klass.ip}:{self.klass.port}/user/{user}/terminals/websocket/{name}",
                                         header=[f"Authorization: token {self.tokens[user]}"], timeout=seconds)
        marker, shown, deadline = f"END{secrets.token_hex(4)}", "", time.monotonic() + seconds
        try:
            ws.send(json.dumps(["stdin", f"{command}; echo {marker}-$?\r"]))
            while not (ended := re.search(rf"{marker}-(\d+)", shown)) and time.monotonic() < deadline:
                message = json.loads(ws.recv())
                if message[0] == "stdout":
                    shown += message[1]
        finally:
            ws.close()
            self.server(user, "DELETE", f"/api/terminals/{name}")
        assert ended, f"{command!r} in {user}'s terminal did not end in {seconds:.0f} s:\n{shown[-3000:]}"
        return int(ended.group(1)), shown

    def json(self, user: str, method: str, path: str, **kw) -> dict:
        """A call of ``user``'s server whose answer must be JSON (the status and the start of the page if not)."""
        started = time.monotonic()
        r = self.server(user, method, path, **kw)
        try:
            return r.json()
        except ValueError:
            raise AssertionError(f"{method} {path} on {user}'s server: {r.status_code} after "
                                 f"{time.monotonic() - started:.0f} s, not JSON: {r.text[:600]}") from None


#: Run by the attacker from her own account: a blank in the classmate's name dated 2099, a hand-in of her own dated
#: 2000, then the attempts that stay refused (list inbound/, rename the course's folder and inbound/, read the
#: classmate's home and the instructor's course folder, list the feedback folder, read the hub's own files).
PLANT = """
import json, os, shutil, sys
inbound, blank, mine, forged, early, victim_home, course, hub_state = sys.argv[1:9]
for name, nb in ((forged, blank), (early, mine)):
    os.mkdir(os.path.join(inbound, name))
    shutil.copy(nb, os.path.join(inbound, name, os.path.basename(nb)))
    open(os.path.join(inbound, name, "timestamp.txt"), "w").write(name.split("+")[2])
    open(os.path.join(inbound, name, "submission_secret.txt"), "w").write(name.split("+")[-1] * 16)
tried = {}
for what, attempt in (
        ("list inbound", lambda: os.listdir(inbound)),
        ("rename the course folder", lambda: os.rename(os.path.dirname(inbound), os.path.dirname(inbound) + "-x")),
        ("remove inbound", lambda: os.rename(inbound, inbound + "-x")),
        ("list the classmate's home", lambda: os.listdir(victim_home)),
        ("read the instructor's gradebook", lambda: open(os.path.join(course, "gradebook.db"), "rb").read(1)),
        ("list the instructor's course", lambda: os.listdir(course)),
        ("list returned feedback", lambda: os.listdir(os.path.join(os.path.dirname(inbound), "feedback"))),
        ("list the class's folder", lambda: os.listdir(hub_state)),
        ("read the hub's database", lambda: open(os.path.join(hub_state, "hub", "jupyterhub.sqlite"), "rb").read(1)),
        ("read the hub's class file", lambda: open(os.path.join(hub_state, "hub", "class.json"), "rb").read(1))):
    try:
        attempt()
        tried[what] = "DONE"
    except OSError as exc:
        tried[what] = type(exc).__name__
print(json.dumps(tried))
"""


def test_a_term_on_jupyterhub_with_real_users():
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("needs root, useradd and runuser: the hub's users are real Unix users")
    env = hub.ENV_PREFIX
    tag = os.getpid() % 100000
    teach, ann, bea = f"teach{tag}", f"ann{tag}", f"bea{tag}"
    try:
        port = hub.free_port()
    except OSError as exc:
        pytest.skip(f"no free port on loopback: {exc}")
    state = Path(tempfile.mkdtemp(prefix="attn-hub-"))
    klass = hub.new_class(state, [ann, bea], teach, env, port=port)
    proc = None
    try:
        # B is graded on submit by the hub's grading service (A goes through the instructor's usual commands)
        with open(Path(klass.course) / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.OnSubmit.assignments = [{B!r}]\nc.OnSubmit.poll_seconds = 0.5\n")
        proc = hub.start_hub(klass)
        h = Hub(klass)

        # a person logs in with the machine's password (PAM) and is sent to their server
        s = requests.Session()
        s.get(f"{h.base}/hub/login", timeout=30)
        login = s.post(f"{h.base}/hub/login", data={"username": ann, "password": klass.passwords[ann],
                                                    "_xsrf": s.cookies.get("_xsrf", "")},
                       allow_redirects=False, timeout=60)
        assert login.status_code == 302 and "jupyterhub-session-id" in s.cookies, (login.status_code, login.text[:300])
        wrong = requests.Session()
        wrong.get(f"{h.base}/hub/login", timeout=30)
        refused = wrong.post(f"{h.base}/hub/login", data={"username": ann, "password": "not-hers",
                                                          "_xsrf": wrong.cookies.get("_xsrf", "")},
                             allow_redirects=False, timeout=60)
        assert refused.status_code != 302, "a wrong password logged in"

        for user in (teach, ann, bea):
            h.start(user)
        # the Formgrader is the instructor's alone
        assert h.server(teach, "GET", "/formgrader/api/assignments").status_code == 200
        assert h.server(ann, "GET", "/formgrader/api/assignments").status_code == 404
        # and so are the question pages (hand grading one question across the class), under the hub's prefix
        assert h.server(teach, "GET", "/formgrader/questions").status_code == 200
        assert h.server(ann, "GET", "/formgrader/questions").status_code == 404
        # a token of one student opens nothing of another's server
        assert h.server(bea, "GET", "/api/contents", as_user=ann).status_code in (403, 404)

        # a Validate that takes longer than the proxy's default wait (20 s) still answers: a notebook that sleeps
        slow = {"cells": [{"cell_type": "code", "source": "import time\ntime.sleep(22)", "metadata": {}, "outputs": [],
                           "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        assert h.server(bea, "PUT", "/api/contents/slow.ipynb", json={"type": "notebook", "content": slow}).ok
        started = time.monotonic()
        answer = h.json(bea, "POST", "/assignments/validate", data={"path": "slow.ipynb"})
        assert answer["success"] and time.monotonic() - started > 20, answer

        # the instructor releases from her Formgrader
        released = h.json(teach, "POST", f"/formgrader/api/assignment/{A}/release")
        assert released.get("success"), released
        inbound = Path(klass.exchange) / COURSE_ID / "inbound"

        # each student fetches, answers, runs Validate, hands in, all through their own server
        mistake = next(s for s in load_catalogue(catalogue_path(A)) if s.is_mistake and s.loses)
        work = {ann: {NOTEBOOK: solved_notebook(masters(A)[NOTEBOOK])},
                bea: apply_submission(masters(A), mistake)}
        validated = {}
        for user, answers in work.items():
            listed = h.json(user, "GET", "/assignments", params={"course_id": COURSE_ID})
            assert listed["success"] and A in json.dumps(listed["value"]), listed
            fetched = h.json(user, "POST", "/assignments/fetch", data={"course_id": COURSE_ID, "assignment_id": A})
            assert fetched["success"], fetched
            path = f"/api/contents/{A}/{NOTEBOOK}"
            nb = h.json(user, "GET", path)["content"]
            saved = h.server(user, "PUT", path, json={"type": "notebook", "content": answered_notebook(nb, answers[NOTEBOOK])})
            assert saved.status_code == 200, saved.text[:500]
            validated[user] = h.json(user, "POST", "/assignments/validate", data={"path": f"{A}/{NOTEBOOK}"})
        assert validated[ann]["success"] and "failed" not in json.dumps(validated[ann]["value"]), validated[ann]
        failed = validated[bea]["value"].get("failed") if isinstance(validated[bea]["value"], dict) else None
        assert failed, f"Validate passed {mistake.name}: {validated[bea]}"
        # the course's Validate, not stock nbgrader's: the report keeps long lines whole (stock cuts them at 90)
        lines = [line for cell in failed for line in cell.get("error", "").splitlines()]
        assert max(map(len, lines)) > 90 and not any(line.endswith("...") for line in lines), lines
        homes = {u: Path(os.path.expanduser("~" + u)) for u in (teach, ann, bea)}
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in homes.values())

        # before handing in, bea plants a blank in ann's name dated 2099 and a hand-in of hers dated 2000, from her account
        forged = f"{ann}+{A}+2099-01-01 00:00:00.000000 UTC+forged"
        early = f"{bea}+{A}+2000-01-01 00:00:00.000000 UTC+early"
        blank = homes[bea] / "blank.ipynb"
        shutil.copy(Path(klass.course) / "release" / A / NOTEBOOK, blank)
        os.chown(blank, homes[bea].stat().st_uid, homes[bea].stat().st_gid)
        tried = json.loads(_as(bea, klass, f"{klass.env}/bin/python", "-c", PLANT, str(inbound), str(blank),
                               str(homes[bea] / A / NOTEBOOK), forged, early, str(homes[ann]), klass.course, klass.state).stdout)
        assert set(tried.values()) == {"PermissionError"}, f"a student could: {tried}"
        # then both hand in for real from their servers (bea's real one comes after her backdated one)
        for user in work:
            submitted = h.json(user, "POST", "/assignments/submit", data={"course_id": COURSE_ID, "assignment_id": A})
            assert submitted["success"], submitted
        entries = {p.name: stat.S_IMODE(p.stat().st_mode) for p in inbound.iterdir()}
        assert all(mode == 0o755 for name, mode in entries.items() if "forged" not in name and "early" not in name), \
            f"a hand-in's folder others can write into: {entries}"

        collected = h.json(teach, "POST", f"/formgrader/api/assignment/{A}/collect")
        assert collected.get("success"), collected
        assert f"owned by {bea}" in collected.get("log", ""), collected.get("log", "")[-2000:]
        # the instructor grades in a terminal of her JupyterLab, typing what the docs say (her course folder has no
        # .venv: make and nbgrader are the shared environment's, from her login shell's profile)
        assert not (Path(klass.course) / ".venv").exists()
        status, said = h.terminal(teach, "make doctor && make autograde && nbgrader --version && "
                                         "python -m attention_course.grading table")
        assert status == 0 and "Graded 2" in said and "sandbox" in said.lower(), said[-4000:]
        assert f"{bea}" in said.split("nbgrader version", 1)[-1], said[-2000:]  # the grade table lists her
        assert not (Path(klass.course) / ".venv").exists(), "make built a .venv in the course folder"
        course = Path(klass.course)
        scores = read_scores(course, A, gradebook_url(course))
        assert all(s == m for s, m, manual in scores[ann].values() if not manual), scores[ann]
        assert {n for n, (s, m, manual) in scores[bea].items() if not manual and s < m} == set(mistake.loses)
        stamp = (course / "submitted" / bea / A / "timestamp.txt").read_text()
        assert "2000" not in stamp and "2099" not in (course / "submitted" / ann / A / "timestamp.txt").read_text()
        _, rows = score_table(gradebook_url(course), [A], course)
        problems = {r[0]: r[-1] for r in rows}
        assert f"owned by {bea}" in problems[ann] and f"owned by {bea}" in problems[bea], problems
        assert "re-dated by collect: its name says 2000-01-01" in problems[bea], problems
        assert "Re-dated" in collected.get("log", ""), collected.get("log", "")[-2000:]

        # the written question's page on the instructor's server lists both students' answers
        page = h.server(teach, "GET", f"/formgrader/questions/{A}/{NOTEBOOK[:-6]}/heatmap_answer")
        assert page.status_code == 200 and "2 answers" in page.text and "Mark scheme" in page.text, page.text[:500]
        assert h.server(teach, "GET", f"/formgrader/questions/{A}/{NOTEBOOK[:-6]}/..%2F..").status_code == 404

        # feedback written with make in an ssh-like login shell of hers, returned through the Formgrader, fetched by
        # each student from their own server
        shell = subprocess.run(["runuser", "-l", teach, "-c", f"cd {klass.course} && make feedback && make grades"],
                               capture_output=True, text=True, timeout=600)
        assert shell.returncode == 0 and f"{A}: 2 page(s)" in shell.stdout, shell.stdout[-2000:] + shell.stderr[-3000:]
        # and a shell that reads no profile (cron, ssh host make ...): the course folder's .attention-env
        bare = subprocess.run(["runuser", "-u", teach, "--", "env", "-i", f"HOME={homes[teach]}", "PATH=/usr/bin:/bin",
                               "LANG=C.UTF-8", "make", "-C", klass.course, "grades"], capture_output=True, text=True,
                              timeout=600)
        assert bare.returncode == 0 and bea in bare.stdout, bare.stdout[-2000:] + bare.stderr[-3000:]
        assert not (Path(klass.course) / ".venv").exists(), "make built a .venv in the course folder"
        done = h.json(teach, "POST", f"/formgrader/api/assignment/{A}/release_feedback")
        assert done.get("success"), (done.get("error", "")[-2000:], done.get("log", "")[-2000:])
        for user in (ann, bea):
            got = h.json(user, "POST", "/assignments/fetch_feedback", data={"course_id": COURSE_ID, "assignment_id": A})
            assert got["success"], got
            pages = list((homes[user] / A / "feedback").rglob("*.html"))
            assert pages, f"{user} received no feedback"
        # and neither reads the other's hand-in or feedback
        peek = _as(ann, klass, f"{klass.env}/bin/python", "-c",
                   "import os, sys\nfor p in sys.argv[1:]:\n    try:\n        os.listdir(p); print('DONE')\n"
                   "    except OSError as e:\n        print(type(e).__name__)",
                   str(homes[bea] / A / "feedback"), str(homes[bea] / A), str(inbound),
                   str(Path(klass.exchange) / COURSE_ID / "feedback"), str(course / "submitted"))
        assert peek.stdout.split() == ["PermissionError"] * 5, peek.stdout

        _feedback_at_submit(h, klass, homes, teach, ann)

        modes = {str(p): f"{stat.S_IMODE(p.stat().st_mode):04o}" for p in
                 [Path(klass.exchange), Path(klass.exchange) / COURSE_ID, inbound, *homes.values()]}
        print("modes:", json.dumps(modes))
        rows = {what: holds for what, holds, _ in exchange_findings(klass.exchange, COURSE_ID, homes="/nonexistent")
                if what != "homes"}
        assert rows.get("exchange") and rows.get("inbound"), rows
    finally:
        if proc is not None:
            hub.stop_hub(proc)
        uids = {pwd.getpwnam(u).pw_uid for u in (teach, ann, bea)}
        left = [e.path for e in os.scandir("/tmp") if e.stat(follow_symlinks=False).st_uid in uids]
        hub.remove_class(klass)
    assert not [p for p in left if os.path.lexists(p)], f"the class's users left these in /tmp: {left}"


def _queue(klass: hub.Class) -> list[dict]:
    return queue_rows(Path(klass.course))


def _wait(what: str, condition, seconds: float = 240, klass: hub.Class | None = None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    said = ""
    if klass is not None:  # the service's lines in the hub's log, and the queue
        lines = (klass.private / "jupyterhub.log").read_text(errors="replace").splitlines()
        said = "\n".join(line for line in lines if not line.startswith(("[I ", "[D ", "[W ")))[-6000:]
        said += f"\nqueue: {_queue(klass)}"
    raise AssertionError(f"waited {seconds:.0f} s for {what}\n{said}")


def _service_pids(teach: str) -> list[int]:
    found = subprocess.run(["pgrep", "-u", teach, "-f", "attention_course.grading --course .* serve$"],
                           capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _feedback_at_submit(h: Hub, klass: hub.Class, homes: dict, teach: str, ann: str) -> None:
    """B on submit: ann hands in through her server, the service is killed while it grades and the hub starts it
    again; the hand-in is graded once and its page with the score reaches her Assignment List. A second hand-in
    inside the limit gets the limit's page."""
    from nbgrader.api import Gradebook

    # released from a terminal of hers, as make hub's message says
    status, said = h.terminal(teach, f"nbgrader release_assignment {B}")
    assert status == 0 and "Released as" in said, said[-3000:]
    assert h.json(ann, "POST", "/assignments/fetch", data={"course_id": COURSE_ID, "assignment_id": B})["success"]
    answer = solved_notebook(masters(B)[NOTEBOOK_B])
    first = next(c for c in answer["cells"] if c["cell_type"] == "code" and c.get("metadata", {}).get(
        "nbgrader", {}).get("solution"))
    first["source"] += "\nimport time\ntime.sleep(8)  # long enough to be killed in the middle of\n"
    path = f"/api/contents/{B}/{NOTEBOOK_B}"
    nb = h.json(ann, "GET", path)["content"]
    assert h.server(ann, "PUT", path, json={"type": "notebook", "content": answered_notebook(nb, answer)}).ok
    pids = _wait("the grading service", lambda: _service_pids(teach), 120, klass)
    assert h.json(ann, "POST", "/assignments/submit", data={"course_id": COURSE_ID, "assignment_id": B})["success"]

    # the service is killed while a worker grades the hand-in; the hub starts it again
    _wait("the hand-in being graded", lambda: any(r["state"] == "grading" for r in _queue(klass)), 240, klass)
    os.kill(pids[0], 9)
    restarted = _wait("the hub to start the service again", lambda: [p for p in _service_pids(teach) if p not in pids],
                      120, klass)
    [row] = _wait("the hand-in graded", lambda: [r for r in _queue(klass) if r["state"] == "done"], 240, klass)
    assert row["graded"] == 1 and row["attempts"] == 2 and row["student"] == ann, row
    course = Path(klass.course)
    with Gradebook(gradebook_url(course), COURSE_ID) as gb:
        assert [s.student.id for s in gb.assignment_submissions(B)] == [ann]
        assert gb.find_submission(B, ann).score == row["score"] > 0, row

    # the page with the score appears in her Assignment List
    listed = h.json(ann, "GET", "/assignments", params={"course_id": COURSE_ID})
    assert any(s.get("has_exchange_feedback") for a in listed["value"] if a.get("assignment_id") == B
               for s in a.get("submissions", [])), listed["value"]
    assert h.json(ann, "POST", "/assignments/fetch_feedback", data={"course_id": COURSE_ID, "assignment_id": B})[
        "success"]
    [page] = list((homes[ann] / B / "feedback").rglob("*.html"))
    text = page.read_text()
    assert f"{row['score']:g}" in text and "BEGIN HIDDEN" not in text, text[:2000]

    # a second hand-in inside the limit: its page says when it will be graded
    assert h.json(ann, "POST", "/assignments/submit", data={"course_id": COURSE_ID, "assignment_id": B})["success"]
    _wait("the limit's page", lambda: any(r["told"] and "Next grading at" in r["told"] for r in _queue(klass)), 60, klass)
    assert h.json(ann, "POST", "/assignments/fetch_feedback", data={"course_id": COURSE_ID, "assignment_id": B})[
        "success"]
    pages = {p.read_text() for p in (homes[ann] / B / "feedback").rglob("*.html")}
    assert len(pages) == 2 and any("Next grading at" in p for p in pages), [p[:300] for p in pages]
    assert restarted and len([r for r in _queue(klass) if r["state"] == "done"]) == 1

    # the service's log is hers, in her course folder, a line per outcome; she has it read its settings from her terminal
    log = course / "service.log"
    assert (log.stat().st_uid, stat.S_IMODE(log.stat().st_mode)) == (pwd.getpwnam(teach).pw_uid, 0o600)
    text = log.read_text()
    assert f"Hand-in: {ann}, {B}, handed in " in text and f": graded {row['score']:g} / " in text, text[-3000:]
    status, said = h.terminal(teach, "make serve-reload")
    assert status == 0 and "Settings reloaded (make serve-reload asked)" in said, said[-3000:]


def test_stopping_a_trial_keeps_the_instructors_work(tmp_path):
    """``make hub``'s stop (:func:`hub.remove_class` with ``save_to``) on an instructor made here with a course folder of
    made-up work: her gradebook, grades, feedback, hand-ins, settings, the service's log and her changed sources are
    copied into a root-only ``hub-trial-*`` folder before her account goes; a link to a root-only file and a pipe she
    left are not followed; and where the copy cannot be made, her home stays."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("needs root, useradd and runuser: the trial's users are real Unix users")
    tag = os.getpid() % 100000
    teach, stud, other = f"keep{tag}", f"kstu{tag}", f"kfail{tag}"
    hub.make_users([teach, stud, other])
    try:
        def course_of(user: str) -> tuple[Path, hub.Class]:
            home = Path(os.path.expanduser("~" + user))
            course = home / COURSE_ID
            work = {"gradebook.db": b"SQLite format 3\0 her grades", "grades.csv": b"student,01\nann,42\n",
                    f"feedback/ann/{A}/{NOTEBOOK[:-6]}.html": b"<p>42</p>", f"autograded/ann/{A}/{NOTEBOOK}": b"{}",
                    f"submitted/ann/{A}/{NOTEBOOK}": b"{}", "extensions.csv": b"student,assignment,days\nann,01,2\n",
                    "nbgrader_config.py": b"c = get_config()\n", "service.log": b"[...] Hand-in: ann graded 42 / 50\n",
                    ".grading-service/queue.sqlite": b"queue", ".grading-service/work/scratch.ipynb": b"not kept",
                    f"source/{A}/{NOTEBOOK}": (hub.ROOT / "source" / A / NOTEBOOK).read_bytes() + b" ",  # her fix
                    f"source/{B}/{NOTEBOOK_B}": (hub.ROOT / "source" / B / NOTEBOOK_B).read_bytes(),  # as shipped
                    "README.md": b"the course's own, not hers"}
            for rel, data in work.items():
                (course / rel).parent.mkdir(parents=True, exist_ok=True)
                (course / rel).write_bytes(data)
            (course / "grades-canvas.csv").symlink_to("/etc/shadow")  # a link among the kept names: never followed
            (course / "feedback" / "ann" / "shadow").symlink_to("/etc/shadow")
            os.mkfifo(course / "submitted" / "ann" / "pipe")  # would block a copy that opened it to read
            subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)
            state = tmp_path / f"state-{user}"
            (state / "hub").mkdir(parents=True)
            return course, hub.Class(state=str(state), env="/nonexistent", exchange=str(state / "exchange"),
                                     course=str(course), instructor=user, students=[stud] if user == teach else [])

        course, klass = course_of(teach)
        hers = subprocess.Popen(["runuser", "-u", teach, "--", "sleep", "300"])  # her server, still running
        said: list[str] = []
        started = time.monotonic()
        saved = hub.remove_class(klass, save_to=tmp_path, log=said.append)
        assert time.monotonic() - started < 60 and hers.wait(10) is not None
        for user in (teach, stud):
            with pytest.raises(KeyError):
                pwd.getpwnam(user)
        assert not course.exists() and not Path(klass.state).exists()
        assert saved is not None and saved.parent == tmp_path and saved.name.startswith("hub-trial-"), saved
        assert said == [f"The instructor's work (gradebook, grades, feedback, hand-ins, settings, the service's log) "
                        f"is kept in {saved}/ (root's; README.txt says what it holds)."], said
        st = saved.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
        kept = {str(p.relative_to(saved)) for p in saved.rglob("*") if p.is_file() or p.is_symlink()}
        assert kept == {"README.txt", "gradebook.db", "grades.csv", f"feedback/ann/{A}/{NOTEBOOK[:-6]}.html",
                        f"autograded/ann/{A}/{NOTEBOOK}", f"submitted/ann/{A}/{NOTEBOOK}", "extensions.csv",
                        "nbgrader_config.py", "service.log", ".grading-service/queue.sqlite",
                        f"source/{A}/{NOTEBOOK}"}, kept
        assert (saved / "gradebook.db").read_bytes() == b"SQLite format 3\0 her grades"
        assert (saved / "source" / A / NOTEBOOK).read_bytes().endswith(b" ")
        assert all(p.stat().st_uid == 0 and not stat.S_IMODE(p.stat().st_mode) & 0o077 for p in saved.rglob("*"))
        readme = (saved / "README.txt").read_text()
        assert all(name in readme for name in ("grades-canvas.csv", "feedback/ann/shadow", "submitted/ann/pipe")), \
            readme

        # the copy cannot be made (its folder is a file): her home stays, her account goes
        course, klass = course_of(other)
        said.clear()
        blocked = tmp_path / "a-file"
        blocked.write_text("")
        assert hub.remove_class(klass, save_to=blocked, log=said.append) is None
        with pytest.raises(KeyError):
            pwd.getpwnam(other)
        assert (course / "gradebook.db").read_bytes() == b"SQLite format 3\0 her grades"
        assert len(said) == 1 and "could NOT be copied out" in said[0] and str(course.parent) in said[0], said
        shutil.rmtree(course.parent)
    finally:
        hub.remove_users([teach, stud, other])
