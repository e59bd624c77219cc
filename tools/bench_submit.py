"""``make bench-submit``: feedback at submit under load: a class handing in within a minute, graded by the service.

A scratch course with the course's configuration, ``01_self_attention`` on submit (``c.OnSubmit``) and the
course's own exchange; the grading service (``python -m attention_course.grading serve``) started and warm, as a
standing service is; then ``--students`` students (default 60: the catalogue's complete, blank, mistaken and
alternative answers, round robin) each hand in once, at moments spread at random (fixed seed) over ``--window``
seconds (default 60), as nbgrader's submit writes a hand-in into ``inbound/``. Latency is from a hand-in's arrival
to its feedback page in the exchange (what the student's Assignment List fetches). Run with local workers (one per
core) and with two Dask workers on loopback; prints p50 / p95 / max for each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from attention_course.grading.course import ROOT, scratch_course
from attention_course.grading.deploy.hub import stop_session
from attention_course.grading.service.queue import FINAL

from .loopback import LoopbackCluster
from .submissions import write_class

ASSIGNMENT = "01_self_attention"
COURSE_ID = "attention-from-scratch"


def on_submit_course(scratch: Path, assignment: str = ASSIGNMENT, settings: str = "",
                     assignments: list[str] | None = None) -> Path:
    """A released scratch course whose configuration turns ``assignment`` on submit (plus ``settings``); given
    ``assignments``, every one of those instead (released and on submit)."""
    names = list(assignments) if assignments else [assignment]
    config = (ROOT / "nbgrader_config.py").read_text() + f"\nc.OnSubmit.assignments = {names!r}\n" + settings
    course = scratch_course(scratch, names, config)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("NBGRADER_EXCHANGE_ROOT", None)
    for name in names:
        for step in ("generate_assignment", "release_assignment"):
            subprocess.run([str(Path(sys.executable).parent / "nbgrader"), step, name, "--force",
                            "--log-level=ERROR"], cwd=course, env=env, check=True, capture_output=True)
    return course


def hand_in(course: Path, student: str, what, assignment: str = ASSIGNMENT) -> str:
    """Hand in ``what`` (a roster entry of :func:`tools.submissions.write_class`) as nbgrader's submit does into the
    course's own exchange; returns the inbound folder's name."""
    stage = course.parent / "stage"  # written beside the course: the service may be collecting into submitted/
    if not stage.is_dir():
        stage.mkdir()
        for folder in ("source", "release"):
            (stage / folder).symlink_to(course / folder)
    write_class(stage, assignment, {student: what})
    staged = stage / "submitted" / student / assignment
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    (staged / "timestamp.txt").write_text(stamp)
    (staged / "submission_secret.txt").write_text(secrets.token_hex(64))  # written last, as submit does
    entry = f"{student}+{assignment}+{stamp}+{secrets.token_hex(4)}"
    inbound = course / "exchange" / COURSE_ID / "inbound"
    os.replace(staged, inbound / entry)  # appears at once, whole
    shutil.rmtree(stage / "submitted" / student)
    return entry


def feedback_pages(course: Path, entry: str) -> list[Path]:
    """The pages released for the hand-in ``entry`` (one per notebook), where fetch_feedback looks."""
    from nbgrader.utils import notebook_hash

    inbound = course / "exchange" / COURSE_ID / "inbound" / entry
    secret = (inbound / "submission_secret.txt").read_text().strip()
    return [course / "exchange" / COURSE_ID / "feedback" / f"{notebook_hash(secret=secret, notebook_id=p.stem)}.html"
            for p in sorted(inbound.glob("*.ipynb"))]


def start_service(course: Path, *args: str, log: Path) -> subprocess.Popen:
    """The service in its own process group; returns once it is warm (its workers ready)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("NBGRADER_EXCHANGE_ROOT", None)
    out = open(log, "ab")
    return subprocess.Popen([sys.executable, "-m", "attention_course.grading", "--course", str(course),
                             "serve", *args], cwd=course, env=env,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop_service(proc: subprocess.Popen) -> None:
    stop_session(proc, 60)  # the service ends its workers on SIGTERM


def queue_rows(course: Path) -> list[dict]:
    """The grading service's queue as plain rows, oldest first (none before the service made it)."""
    path = course / ".grading-service" / "queue.sqlite"
    if not path.exists():
        return []
    with sqlite3.connect(path, timeout=30) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM handin ORDER BY seen")]


def wait_ready(log: Path, timeout: float = 300, proc: subprocess.Popen | None = None) -> None:
    """Wait until the service says its workers are warm (their scratch course and fork server ready); given its
    ``proc``, give up at once when it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "] Ready" in log.read_text(errors="replace"):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the service ended (status {proc.returncode}) before it was ready:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"the service did not start in {timeout:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


def _run(scratch: Path, name: str, args, service_args: list[str]) -> dict:
    from .bench import roster

    course = on_submit_course(scratch, ASSIGNMENT, "c.OnSubmit.poll_seconds = 0.5\n")
    log = scratch / "service.log"
    proc = start_service(course, *service_args, log=log)
    try:
        wait_ready(log)
        rng = random.Random(20261127)
        plan = sorted((rng.uniform(0, args.window), student, what) for student, what in roster(args.students).items())
        start = time.monotonic()
        arrived: dict[str, float] = {}
        for offset, student, what in plan:
            time.sleep(max(0.0, start + offset - time.monotonic()))
            entry = hand_in(course, student, what)
            arrived[entry] = time.time()
        latency: dict[str, float] = {}
        deadline = time.monotonic() + args.timeout
        ended: set[str] = set()  # hand-ins the service ended without grading (not graded, superseded...)
        while len(latency) + len(ended - set(latency)) < len(arrived) and time.monotonic() < deadline:
            ended = {r["entry"] for r in queue_rows(course) if r["state"] in FINAL and r["state"] != "done"}
            for entry, t0 in arrived.items():
                if entry not in latency:
                    pages = feedback_pages(course, entry)
                    if pages and all(p.exists() for p in pages):
                        latency[entry] = max(p.stat().st_mtime for p in pages) - t0
            time.sleep(0.2)
    finally:
        stop_service(proc)
    rows = queue_rows(course)
    states = {}
    for row in rows:
        states[row["state"]] = states.get(row["state"], 0) + 1
    values = sorted(latency.values())

    def pct(q: float) -> float:
        return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")

    return {"name": name, "students": len(arrived), "with_feedback": len(values), "p50": pct(0.5), "p95": pct(0.95),
            "max": values[-1] if values else float("nan"), "states": states,
            "recorded_twice": sum(1 for r in rows if r["graded"] > 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="make bench-submit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=60)
    parser.add_argument("--window", type=float, default=60.0, help="seconds over which they hand in (default 60)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up waiting after this (default 600 s)")
    parser.add_argument("--only", choices=["local", "dask"], default=None)
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    print(f"Feedback at submit: {args.students} students handing in {ASSIGNMENT} within {args.window:g} s, on "
          f"{cores} CPU core(s)", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="attention-bench-submit-") as tmp:
        if args.only in (None, "local"):
            print(f"  local workers ({cores}) ...", flush=True)
            results.append(_run(Path(tmp) / "local", f"{cores} local workers", args, ["--workers", str(cores)]))
        if args.only in (None, "dask"):
            print("  2 Dask workers on loopback ...", flush=True)
            with LoopbackCluster(Path(tmp) / "cluster", workers=2) as cluster:
                results.append(_run(Path(tmp) / "dask", "2 Dask workers (loopback)", args,
                                    ["--scheduler", cluster.address]))
    width = max(len(r["name"]) for r in results)
    print(f"\n{'':{width}}  {'graded':>7}  {'p50 s':>6}  {'p95 s':>6}  {'max s':>6}  queue")
    failed = False
    for r in results:
        print(f"{r['name']:{width}}  {r['with_feedback']:>3}/{r['students']:<3}  {r['p50']:6.1f}  {r['p95']:6.1f}  "
              f"{r['max']:6.1f}  {json.dumps(r['states'])}")
        failed |= r["with_feedback"] < r["students"] or r["recorded_twice"] > 0
    print("Goal: p95 under 60 s for 60 students on 2 cores.")
    return 1 if failed else 0
