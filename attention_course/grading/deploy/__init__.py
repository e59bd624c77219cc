"""What the course is installed as: the student bundle, environments, and a class on JupyterHub.

:mod:`.bundle` writes what students get (``make student-bundle``); :mod:`.environment` fills a new environment from
the course's own (the hub's, the bundle's); :mod:`.hub` runs a class on JupyterHub (exchange, a hub on one
machine) with the Unix users of :mod:`.users`, :mod:`.trial` is ``make hub`` (a trial class started and stopped)
and :mod:`.hub_trial` what a trial's instructor keeps when it stops.
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "NAME": "bundle",
    "TORCH_CPU_INDEX": "bundle",
    "notebook_imports": "bundle",
    "released_assignments": "bundle",
    "write_bundle": "bundle",
    "copy_installed": "environment",
    "prepare_exchange": "hub",
    "stop_session": "hub",
    "add_user": "users",
    "make_users": "users",
    "remove_users": "users",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)
