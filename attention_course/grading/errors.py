"""The course's errors: a problem of the course's own set-up, said in words the instructor can act on.

Library code raises these; only a command line turns them into an exit code and a message (the course command,
``make serve``, the hub's trial, ``nbgrader_config.py`` for nbgrader's own commands). None of them is ever a
student's fault: a hand-in's own problems are grades and notes, never exceptions that reach here.
"""

from __future__ import annotations


class CourseError(Exception):
    """A problem of the course's set-up; the command line prints its text and exits with :attr:`exit_code`."""

    exit_code = 1


class ConfigError(CourseError):
    """``nbgrader_config.py``, the term or the extensions CSV say something the course cannot use."""


class UsageError(CourseError):
    """The command was asked for something that is not there (an assignment, a release)."""

    exit_code = 2


class GradebookError(CourseError):
    """The gradebook cannot take an assignment as ``source/`` has it."""


class SandboxUnavailable(CourseError):
    """A layer of the kernels' sandbox the course requires does not hold on this host (``make doctor``)."""


class AlreadyRunning(CourseError):
    """Another grading service already holds the course's lock."""


class EnvironmentMismatch(CourseError):
    """The installed packages are not the ones the course pins (nbgrader's version, a missing pin)."""


class UsersNotRemoved(CourseError):
    """Unix users a trial class or a test made are still there after every try to remove them."""
