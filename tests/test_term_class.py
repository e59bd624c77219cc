"""A term with real Unix users on a shared exchange, as on the course's JupyterHub: what a term builds survives
what a term does to it (issue 59's acceptance, end to end).

Three students are real users: ann and ben fetch, answer and hand in with nbgrader's own commands; cat, on the class
list with an extension, never hands in. The instructor (root here) collects, autogrades with the course command,
grades every written answer by hand (score, comment, ticks), writes and releases feedback, and the students fetch it.
Then, one after the other: ben hands in again (one written answer changed, one untouched, a slip in his code), a
hidden test is fixed in ``source/`` and autograde runs (order A), a test's points are changed and released first
(order B), and a forced regrade. After each: every written answer whose text is unchanged keeps its score, comment
and ticks; a changed one waits for a grader with its old grade beside it; every hand-in whose score changed reaches
its student's Assignment List (nbgrader's own listing, run as that student, says there is feedback to fetch) and the
page she fetches names the change; a late hand-in stays late. cat is "not yet due" while her extension runs, then
"missing" and 0 in the Canvas CSV once it has ended.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from harness import (
    BIN,
    COURSE_ID,
    ONE_WORKER,
    ROOT,
    answer_into,
    as_student,
    as_unix,
    course_autograde,
    course_command,
    grade_by_hand,
    hand_state,
    masters,
    nbgrader,
    new_course,
    read_scores,
    unix_users,
)
from nbgrader.utils import parse_utc

from attention_course.grading.course import available, catalogue_path, gradebook_url
from attention_course.grading.nbgrader_glue import marking
from tools.submissions import apply_submission, load_catalogue, read_notebook, solved_notebook, write_notebook

A = available()[1]  # three written answers

#: What the student's Assignment List reads (nbgrader's lab extension lists submissions through this, as the student).
LISTED = """
import json, sys
from traitlets.config import Config
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeFactory
config = Config()
config.CourseDirectory.course_id, config.Exchange.root, config.Exchange.cache = sys.argv[1:4]
config.ExchangeList.cached = True
lister = ExchangeFactory(config=config).List(coursedir=CourseDirectory(config=config),
                                             authenticator=Authenticator(config=config), config=config)
print(json.dumps([{k: s.get(k) for k in ("timestamp", "has_exchange_feedback", "has_local_feedback", "feedback_updated")}
                  for a in lister.start() for s in a.get("submissions", [a])], default=str))
"""


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def test_a_term_keeps_hand_grades_reaches_students_and_marks_missing_work(tmp_path):
    """Real Unix users where this host can make them (root and useradd); elsewhere each student is this user with a
    home and an nbgrader cache of her own, on the same exchange (the term's record is what is tested; the exchange's
    permissions between real users are test_exchange.py's and test_hub.py's)."""
    tag = os.getpid()
    ann, ben, cat = f"ann{tag}", f"ben{tag}", f"cat{tag}"
    with unix_users(ann, ben, cat) as uids:
        real = uids is not None
        uid = dict(zip((ann, ben, cat), uids or [os.getuid()] * 3))
        top = Path(tempfile.mkdtemp(prefix="attn-term-"))  # under /tmp: the students can reach it
        try:
            os.chmod(top, 0o755)
            course = new_course(tmp_path, [A])
            # a shared exchange, where collect checks each hand-in's owner; without real users, the course's own
            # (one user's: every folder is hers)
            exchange = top / "exchange" if real else course / "exchange"
            exchange.mkdir(exist_ok=True)
            config = (course / "nbgrader_config.py").read_text()
            if real:
                config += f"\nc.Exchange.root = {str(exchange)!r}\n"
            (course / "nbgrader_config.py").write_text(config)
            homes = {u: Path(f"/home/{u}") if real else tmp_path / "home" / u for u in (ann, ben, cat)}
            for home in homes.values():
                home.mkdir(parents=True, exist_ok=True)
            reach = ":".join([os.path.realpath(sys.base_prefix), sys.prefix, str(ROOT), str(top),
                              *map(str, homes.values())])

            cache = {u: homes[u] / ".nbgrader_cache" for u in homes}  # her submissions' secrets

            def student(user: str, *args: str):
                """An nbgrader command of the student's, in her home, with her own cache."""
                if not real:
                    return as_student(homes[user], user, exchange, *args)
                return as_unix(user, uid[user], homes[user], reach, str(BIN / "nbgrader"), *args, f"--course={COURSE_ID}",
                               f"--Exchange.root={exchange}", f"--Exchange.cache={cache[user]}", "--log-level=WARN")

            def listed(user: str) -> list[dict]:
                cmd = [sys.executable, "-c", LISTED, COURSE_ID, str(exchange), str(cache[user])]
                if real:
                    return json.loads(as_unix(user, uid[user], homes[user], reach, *cmd).stdout)
                return json.loads(subprocess.run(cmd, cwd=homes[user], capture_output=True, text=True, check=True).stdout)

            def fetch_page(user: str) -> str:
                """The page of her newest hand-in, as she fetches it from the exchange (feedback/<hand-in time>/)."""
                student(user, "fetch_feedback", A)
                folders = sorted(p for p in (homes[user] / A / "feedback").iterdir() if p.is_dir())
                pages = list(folders[-1].glob("*.html")) if folders else []
                assert pages, f"{user} fetched no page"
                return pages[0].read_text(encoding="utf-8")

            def autograde(*args: str) -> str:
                return course_autograde(course, *ONE_WORKER, *args).stderr

            # released; cat is on the class list (as a roster import puts her into the gradebook), extended 1 day
            nbgrader(course, "generate_assignment", A, "--force")
            nbgrader(course, "release_assignment", A, "--force")
            from nbgrader.api import Gradebook
            with Gradebook(gradebook_url(course)) as gb:
                gb.add_student(cat)
            work = {ann: solved_notebook(masters(A)[n]) for n in masters(A)}
            [notebook] = list(masters(A))
            for user in (ann, ben, cat):
                student(user, "fetch_assignment", A)
            for user in (ann, ben):
                answer_into(homes[user] / A / notebook, work[ann] if user == ann else solved_notebook(masters(A)[notebook]))
                os.chown(homes[user] / A / notebook, uid[user], uid[user]) if real else None
                student(user, "submit", A)
            nbgrader(course, "collect", A)
            handed = max(parse_utc((course / "submitted" / u / A / "timestamp.txt").read_text().strip())
                         .replace(tzinfo=timezone.utc) for u in (ann, ben))
            due = handed.replace(microsecond=0) + timedelta(seconds=2)  # both on time; anything later is late
            (course / "nbgrader_config.py").write_text(config + f"\nc.Term.due = {{{A!r}: {stamp(due)!r}}}\n")
            (course / "extensions.csv").write_text(f"student,assignment,days\n{cat},{A},1\n")
            err = autograde()
            assert "Graded 2," in err, err[-3000:]

            # every written answer graded by hand, with a comment and ticks; pages released and fetched
            questions = marking.questions(course, A)
            assert len(questions) >= 2, "the test needs two written answers"
            first, second = questions[0], questions[1]
            marks = {q.grade_id: q.points - 1 for q in questions}
            for user in (ann, ben):
                grade_by_hand(course, A, user, marks, {q.grade_id: f"{user[:3]}: see the scheme's first line" for q in questions},
                              {q.grade_id: [i % len(q.items)] for i, q in enumerate(questions)})
            graded = {u: hand_state(course, A, u) for u in (ann, ben)}
            assert all(not waits and score == marks[g] and ticks for u in graded for g, (score, waits, _, ticks, *_)
                       in graded[u].items()), graded
            nbgrader(course, "generate_feedback", A, "--force")
            nbgrader(course, "release_feedback", A)
            for user in (ann, ben):
                fetch_page(user)
                assert [s["feedback_updated"] for s in listed(user)] == [False], listed(user)

            def table() -> tuple[dict, dict]:
                """grades.csv (student -> this assignment's cell under "score", the rest by column) and the Canvas CSV."""
                course_command(course, "table", "--provisional")
                rows = {r["student"]: r for r in csv.DictReader(open(course / "grades.csv"))}
                for r in rows.values():
                    r["score"] = next(v for h, v in r.items() if h.startswith(f"{A} ("))
                return rows, {r[2]: r[-1] for r in list(csv.reader(open(course / "grades-canvas.csv")))[2:]}

            rows, canvas = table()
            assert rows[cat]["score"] == "not yet due" and canvas[cat] == "", (rows[cat], canvas)
            assert not rows[ann]["late penalty"].strip("0.") and not rows[ben]["late penalty"].strip("0."), rows

            def reached(user: str, change: str) -> None:
                """Her Assignment List says there is new feedback; the page she fetches names the change."""
                newest = listed(user)[-1]
                assert newest["has_exchange_feedback"] and (newest["feedback_updated"] or not newest["has_local_feedback"]), \
                    (user, listed(user))
                page = fetch_page(user)
                assert change in page, (user, change, page[page.find("<body"):][:3000])

            # 1. ben hands in again after the due date: his first written answer changed, the second untouched (blank
            # space only), a slip in his code
            mistake = next(s for s in load_catalogue(catalogue_path(A)) if s.is_mistake and s.loses)
            again = apply_submission(masters(A), mistake)[notebook]
            for cell in again["cells"]:
                gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
                if gid == first.grade_id:
                    cell["source"] = "".join(cell["source"]) + "\n\nAlso: the rows are distributions."
                elif gid == second.grade_id:
                    cell["source"] = "".join(cell["source"]).rstrip() + "\n\n"
            answer_into(homes[ben] / A / notebook, again)
            student(ben, "submit", A)
            nbgrader(course, "collect", "--update", A)
            err = autograde()
            assert re.search(rf"Scores changed by this run \(1, [^)]*\): {A}/{ben} [\d.]+ -> [\d.]+\n", err), err[-3000:]
            assert hand_state(course, A, ann) == graded[ann]
            kept = hand_state(course, A, ben)
            was = graded[ben][first.grade_id]  # its score, comment and ticks, kept as the previous ones
            assert kept[first.grade_id] == (None, True, None, [], was[0], was[2], was[3]), (kept[first.grade_id], was)
            assert all(kept[q.grade_id] == graded[ben][q.grade_id] for q in questions[1:]), kept
            reached(ben, "Your new hand-in replaced your earlier one on")  # released to him as his first page was
            assert '<li class="late-penalty">Handed in' in fetch_page(ben)
            rows, _ = table()
            assert float(rows[ben]["late penalty"] or 0) > 0 and "late" in rows[ben]["notes"], rows[ben]
            late = rows[ben]["notes"].split(",")[0]  # how late, from the hand-in's time (its penalty follows the score)
            assert late.endswith(" late") and not late.split(": ", 1)[1].startswith("0 "), late
            grade_by_hand(course, A, ben, {first.grade_id: first.points}, {first.grade_id: "Now complete."},
                          {first.grade_id: list(range(len(first.items)))})
            graded[ben] = hand_state(course, A, ben)

            # 2. order A: a hidden test fixed in source/ (it now fails for everybody), then autograde
            now = read_scores(course, A)
            master = next((course / "source" / A).glob("*.ipynb"))
            nb = read_notebook(master)
            test = next(c for c in nb["cells"] if "BEGIN HIDDEN TESTS" in "".join(c["source"])
                        and c["metadata"]["nbgrader"].get("points", 0) > 0
                        and all(now[u][c["metadata"]["nbgrader"]["grade_id"]][0] > 0 for u in (ann, ben)))
            cell = test["metadata"]["nbgrader"]["grade_id"]
            test["source"] = "".join(test["source"]).replace("### END HIDDEN TESTS", "assert False, 'fixed'\n### END HIDDEN TESTS")
            write_notebook(nb, master)
            err = autograde()
            assert "changed since the gradebook took its tests" in err and "Graded 2," in err, err[-3000:]
            assert {u: hand_state(course, A, u) for u in (ann, ben)} == graded
            assert "released to the student (2," in err, err[-3000:]
            for user in (ann, ben):
                reached(user, "A test was corrected on")
            assert f"{cell} " in fetch_page(ann)

            # 3. order B: the points of a test both pass changed, released first, then autograde
            scores = read_scores(course, A)
            passed = next(g for g, (score, points, manual) in scores[ann].items() if not manual and g != cell
                          and score == points > 0 and scores[ben][g][0] == points)
            nb = read_notebook(master)
            test = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == passed)
            test["metadata"]["nbgrader"]["points"] += 1
            write_notebook(nb, master)
            nbgrader(course, "generate_assignment", A, "--force")
            err = autograde()
            assert "Graded 2," in err and "released to the student (2," in err, err[-3000:]
            assert {u: hand_state(course, A, u) for u in (ann, ben)} == graded
            for user in (ann, ben):
                reached(user, "The grading of this assignment was corrected on")
            scores = read_scores(course, A)
            assert all(scores[u][passed][0] == test["metadata"]["nbgrader"]["points"] for u in (ann, ben)), scores

            # 4. a forced regrade: nothing moves, nothing is released, the late flag stays
            err = autograde("--force")
            assert "released to the student" not in err, err[-3000:]
            assert {u: hand_state(course, A, u) for u in (ann, ben)} == graded
            assert read_scores(course, A) == scores
            rows, canvas = table()
            assert rows[ben]["notes"].split(",")[0] == late and float(rows[ben]["late penalty"]) > 0, (late, rows[ben])
            assert not [u for u in (ann, ben) if listed(u)[-1]["feedback_updated"]], "a run that changed nothing released"
            assert rows[cat]["score"] == "not yet due" and canvas[cat] == "", rows[cat]

            # 5. cat's extension is cut to 30 seconds, which have passed: missing, 0 in the Canvas CSV
            (course / "extensions.csv").write_text(f"student,assignment,days\n{cat},{A},{30 / 86400:.8f}\n")
            time.sleep(max(0.0, (due + timedelta(seconds=31) - datetime.now(timezone.utc)).total_seconds()))
            rows, canvas = table()
            assert rows[cat]["score"] == "missing" and canvas[cat] == "0", (rows[cat], canvas)
            assert float(canvas[ann]) > 0 and float(canvas[ben]) > 0, canvas
        finally:
            shutil.rmtree(top, ignore_errors=True)
