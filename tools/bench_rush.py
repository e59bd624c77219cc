"""``make bench-rush``: a deadline rush: a large class handing in all seven assignments, graded by the service.

A scratch course with the course's configuration, every assignment (``01`` .. ``07``) released and on submit
(``c.OnSubmit.assignments``) and the course's own exchange; the grading service (``python -m attention_course.grading
serve``, local workers, one per core) started and warm, as a standing service is. Then ``--students`` students
(default 300) each hand in once, student ``i`` the assignment ``i`` modulo seven, as nbgrader's submit writes a
hand-in into ``inbound/``; each assignment's students take its catalogue's complete, blank, mistaken and alternative
answers, round robin (as ``make bench-submit``). They arrive within ``--window`` seconds (default 600), more of them
toward the deadline: a hand-in arrives at ``window * sqrt(u)`` for ``u`` uniform in [0, 1) (fixed seed), a density
that rises linearly from nothing at the start to twice the average at the deadline (three quarters of them in the
second half of the window).

Latency is from a hand-in's arrival to its feedback page in the exchange (what the student's Assignment List fetches).
Every second the run counts the hand-ins waiting (arrived, no feedback page yet, not ended by the service); the longest
queue is the largest such count. Prints the number of hand-ins, how many got feedback, p50 / p95 / max latency (per
assignment and in all), the longest queue and the wall time; exit status 1, naming them, when some hand-in got no
feedback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from attention_course.grading.course import ROOT, available

from .bench_submit import FINAL, feedback_pages, hand_in, on_submit_course, queue_rows, start_service, stop_service, wait_ready

SEED = 20261202


def arrival_plan(students: int, window: float, assignments: list[str], seed: int = SEED) -> list[tuple]:
    """``(offset, student, assignment, what)`` sorted by ``offset`` (seconds from the start): student ``i`` hands in
    ``assignments[i % len(assignments)]``, answers dealt round robin per assignment, more arrivals toward the end."""
    from .bench import roster

    by_assignment: dict[str, list[str]] = {a: [] for a in assignments}
    names = [f"student{i + 1:03d}" for i in range(students)]
    for i, student in enumerate(names):
        by_assignment[assignments[i % len(assignments)]].append(student)
    rng = random.Random(seed)
    plan = []
    for assignment, group in by_assignment.items():
        for student, what in zip(group, roster(len(group), assignment).values()):
            plan.append((window * math.sqrt(rng.random()), student, assignment, what))
    return sorted(plan, key=lambda p: (p[0], p[1]))


class Watch(threading.Thread):
    """Looks, every ``every`` seconds, for the feedback pages of the hand-ins arrived so far and graded (``done`` in
    the service's queue); keeps each one's latency (its pages' time minus its arrival), the hand-ins the service ended
    without grading, and the longest queue."""

    def __init__(self, course: Path, every: float = 1.0):
        super().__init__(daemon=True)
        self.course, self.every = course, every
        self.lock = threading.Lock()
        self.arrived: dict[str, float] = {}  # entry -> arrival (time.time())
        self.latency: dict[str, float] = {}
        self.ended: dict[str, dict] = {}  # entry -> its queue row: ended without grading
        self.pages: dict[str, list[Path]] = {}
        self.longest, self.longest_at, self.began = 0, 0.0, time.time()
        self.service_longest = 0  # the service's own count: its rows waiting, grading or recording
        self.stop = threading.Event()

    def arrive(self, entry: str, at: float) -> None:
        with self.lock:
            self.arrived[entry] = at

    def settled(self) -> bool:
        with self.lock:
            return len(self.latency) + len(set(self.ended) - set(self.latency)) >= len(self.arrived)

    def look(self) -> None:
        rows = queue_rows(self.course)
        ended = {r["entry"]: r for r in rows if r["state"] in FINAL and r["state"] != "done"}
        done = {r["entry"] for r in rows if r["state"] == "done"}  # a page without it is a notice, not feedback
        with self.lock:
            arrived = dict(self.arrived)
        for entry, t0 in arrived.items():
            if entry in self.latency or entry not in done:
                continue
            if entry not in self.pages:
                self.pages[entry] = feedback_pages(self.course, entry)
            pages = self.pages[entry]
            if pages and all(p.exists() for p in pages):
                self.latency[entry] = max(p.stat().st_mtime for p in pages) - t0
        with self.lock:
            self.ended = ended
            waiting = sum(1 for e in arrived if e not in self.latency and e not in ended)
        if waiting > self.longest:
            self.longest, self.longest_at = waiting, time.time() - self.began
        self.service_longest = max(self.service_longest,
                                   sum(1 for r in rows if r["state"] not in FINAL))

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            self.look()
            self.stop.wait(max(0.0, self.every - (time.monotonic() - started)))


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="make bench-rush", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--window", type=float, default=600.0, help="seconds over which they hand in (default 600)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="give up waiting this long after the last arrival (default 900 s)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="local workers (default one per core)")
    args = parser.parse_args(argv)
    began = time.monotonic()
    assignments = available(ROOT)
    cores = os.cpu_count() or 1
    print(f"Deadline rush: {args.students} students handing in across {len(assignments)} assignments "
          f"({', '.join(a[:2] for a in assignments)}) within {args.window:g} s, more toward the deadline; "
          f"{args.workers} local worker(s) on {cores} CPU core(s)", flush=True)
    plan = arrival_plan(args.students, args.window, assignments)
    which: dict[str, tuple[str, str, str]] = {}  # entry -> (student, assignment, answer)
    with tempfile.TemporaryDirectory(prefix="attention-bench-rush-") as tmp:
        scratch = Path(tmp)
        print(f"  releasing {len(assignments)} assignments into a scratch course ...", flush=True)
        course = on_submit_course(scratch, assignments[0], "c.OnSubmit.poll_seconds = 0.5\n", assignments=assignments)
        log = scratch / "service.log"
        proc = start_service(course, "--workers", str(args.workers), log=log)
        try:
            wait_ready(log, proc=proc)
            setup = time.monotonic() - began
            print(f"  service warm after {setup:.0f} s; hand-ins arriving ...", flush=True)
            watch = Watch(course)
            start = time.monotonic()
            watch.start()
            for offset, student, assignment, what in plan:
                time.sleep(max(0.0, start + offset - time.monotonic()))
                entry = hand_in(course, student, what, assignment)
                watch.arrive(entry, time.time())
                which[entry] = (student, assignment, getattr(what, "name", str(what)))
            deadline = time.monotonic() + args.timeout
            while not watch.settled() and time.monotonic() < deadline:
                time.sleep(0.5)
            watch.stop.set()
            watch.join()
            watch.look()  # a last look after the loop ended
            rush = time.monotonic() - start
        finally:
            stop_service(proc)
        rows = {r["entry"]: r for r in queue_rows(course)}
    wall = time.monotonic() - began
    latency = watch.latency
    states: dict[str, int] = {}
    for row in rows.values():
        states[row["state"]] = states.get(row["state"], 0) + 1

    width = max(len(a) for a in assignments)
    print(f"\n{'':{width}}  {'graded':>7}  {'p50 s':>6}  {'p95 s':>6}  {'max s':>6}")
    for assignment in assignments:
        values = [latency[e] for e, w in which.items() if w[1] == assignment and e in latency]
        count = sum(1 for w in which.values() if w[1] == assignment)
        print(f"{assignment:{width}}  {len(values):>3}/{count:<3}  {pct(values, 0.5):6.1f}  {pct(values, 0.95):6.1f}  "
              f"{max(values, default=float('nan')):6.1f}")
    values = list(latency.values())
    print(f"{'all':{width}}  {len(values):>3}/{len(which):<3}  {pct(values, 0.5):6.1f}  {pct(values, 0.95):6.1f}  "
          f"{max(values, default=float('nan')):6.1f}")
    print(f"\nHand-ins: {len(which)}; with feedback: {len(values)}")
    print(f"Latency (arrival -> feedback page): p50 {pct(values, 0.5):.1f} s, p95 {pct(values, 0.95):.1f} s, "
          f"max {max(values, default=float('nan')):.1f} s")
    print(f"Longest queue: {watch.longest} hand-ins waiting (arrived, no feedback yet), {watch.longest_at:.0f} s "
          f"into the window; the service's queue at most {watch.service_longest} rows not ended")
    print(f"Wall time: {wall:.0f} s (setup {setup:.0f} s, the window's start to the last hand-in settled {rush:.0f} s)")
    print(f"Service queue: {json.dumps(states)}; recorded twice: {sum(1 for r in rows.values() if r['graded'] > 1)}")
    missing = [e for e in which if e not in latency]
    if missing:
        print(f"\n{len(missing)} hand-in(s) got no feedback:")
        for entry in missing:
            student, assignment, answer = which[entry]
            row = rows.get(entry)
            state = f"{row['state']}{': ' + row['note'] if row.get('note') else ''}" if row else "never queued"
            print(f"  {student} {assignment} ({answer}): {state}")
        return 1
    return 0
