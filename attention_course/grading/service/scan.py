"""The grading service's look at the exchange: which new folders of ``inbound/`` it queues, and how (:class:`Scan`,
a part of :class:`.service.Service`)."""

from __future__ import annotations

import os

from .. import trust
from . import pages as pages
from .log import moment
from .queue import settled

#: How many new folders of one student, and of everyone, one round looks at (a student who floods ``inbound/``
#: with folders delays herself only).
PER_STUDENT, PER_ROUND = 3, 200


class Scan:
    """Queues new folders of ``inbound/`` (the service's ``inbound``, ``queue``, ``assignments``, notices and outcome
    lines)."""

    def scan(self, now: float) -> bool:
        """Queue every new folder of ``inbound/`` of an assignment on submit."""
        if not self.assignments:
            return False
        try:
            names = os.listdir(self.inbound)
        except OSError as exc:
            if not getattr(self, "_said_inbound", False):
                self.log(f"Cannot list {self.inbound} ({exc.strerror}): nothing is graded until it can be")
                self._said_inbound = True
            return False
        known = self.queue.known()
        fresh: dict[str, list[str]] = {}
        looked: dict[str, int] = {}  # a student's new folders looked at in this round
        for name in sorted(names):
            parts = name.split("+")
            if name in known or len(parts) < 4 or parts[-3] not in self.assignments:
                continue
            student = "+".join(parts[:-3])
            if looked.get(student, 0) >= PER_STUDENT or sum(looked.values()) >= PER_ROUND:
                continue  # a student who floods inbound/ delays herself only: the rest wait for the next round
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                if name not in self.unreadable:
                    self.unreadable.add(name)
                    self.log(f"Refused {name}: its name is not valid UTF-8 (left in the exchange)")
                continue
            if not settled(self.inbound, name, now):
                continue
            looked[student] = looked.get(student, 0) + 1
            fresh.setdefault(parts[-3], []).append(name)
        for assignment, batch in fresh.items():
            taken, refused = trust.inbound_entries(self.inbound, batch, self.logins, check_owner=self.shared,
                                                   now=now, ignore=self.ignore)
            trust.record_refusals(self.course, assignment, refused)
            for entry in refused:
                secret, _, _ = trust.inbound_view(self.inbound, entry["entry"], self._owner(entry["student"]))
                self.queue.add(entry["entry"], assignment, entry["student"], now, "refused", entry["why"],
                               secret or "")
                self._outcome(self.queue.row(entry["entry"]), f"not taken: {entry['why']}")
                self._notice(self.queue.row(entry["entry"]), *pages.not_taken(now, entry["why"]))
            for entry in taken:
                self._queue(entry, assignment)
        return bool(fresh)

    def _queue(self, entry, assignment: str) -> None:
        """Queue a folder the look took (:func:`.trust.inbound_entries`): waiting, or late, or refused."""
        seen = entry.seen.timestamp()
        secret, _, _ = trust.inbound_view(self.inbound, entry.name, entry.uid)
        if not trust.plain_id(entry.student):  # nbgrader reads ids as globs: never collected by the service
            self.queue.add(entry.name, assignment, entry.student, seen, "refused", "not a plain student id")
            self._outcome(self.queue.row(entry.name), "not taken: not a plain student id")
            return
        deadline = self._deadline(entry.student, assignment)
        if deadline is not None and seen > deadline:
            self.queue.add(entry.name, assignment, entry.student, seen, "late",
                           "after the deadline: for the instructor's commands", secret or "")
            self._outcome(self.queue.row(entry.name), f"late: after the deadline ({moment(deadline)}, extension "
                                                      "included); left to the instructor's commands")
            self._notice(self.queue.row(entry.name), *pages.late(seen, deadline))
            return
        self.queue.add(entry.name, assignment, entry.student, seen, secret=secret or "")
        self._outcome(self.queue.row(entry.name), "waiting to be graded")

