"""JupyterHub for a class of Attention from Scratch: ``jupyterhub -f deploy/jupyterhub/jupyterhub_config.py``.

Everything that differs between classes is in one JSON file, ``class.json``, named by ``ATTENTION_HUB_CLASS``
(``make hub`` writes it; ``attention_course.grading.deploy.hub.Class`` lists its keys): the instructor, the students, the shared
environment, the exchange, the instructor's course folder, the ports. Logins are the machine's (PAM); on a real
server put an OAuthenticator or LTI authenticator in ``c.JupyterHub.authenticator_class`` and keep the rest
(docs/jupyterhub.md).
"""

import json
import os

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

klass = json.load(open(os.environ["ATTENTION_HUB_CLASS"]))
COURSE = "attention-from-scratch"
ENV = klass["env"]
instructor, students = klass["instructor"], klass["students"]

# -- where it listens: loopback unless the class file says otherwise -----------------------------------------
c.JupyterHub.ip = klass.get("ip", "127.0.0.1")
c.JupyterHub.port = klass.get("port", 8000)
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = klass["hub_port"]
# the hub's own files, root's alone (<state>/hub, 0700): its database, cookie secret and log
c.JupyterHub.db_url = f"sqlite:///{klass['state']}/hub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{klass['state']}/hub/jupyterhub_cookie_secret"
# The proxy: the Python implementation of configurable-http-proxy (requirements-hub.txt says why), on loopback.
# It waits at most 20 s for a server's answer unless told otherwise (tornado's default), and a student's Validate
# runs the whole notebook before it answers (longer on a busy hub): half an hour, as a cell may take five minutes.
c.ConfigurableHTTPProxy.command = [f"{ENV}/bin/configurable-http-proxy", "--proxy-timeout", str(30 * 60 * 1000)]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{klass['proxy_api_port']}"

# -- who may log in ---------------------------------------------------------------------------------------------
c.Authenticator.allowed_users = {instructor, *students}
c.Authenticator.admin_users = set()  # the instructor needs no hub admin rights: the groups below are enough

# -- each user's server: their own Unix user, the shared environment --------------------------------------------
c.JupyterHub.spawner_class = LocalProcessSpawner
c.Spawner.cmd = [f"{ENV}/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = {
    # every server and every nbgrader command in it finds the class's one exchange
    "NBGRADER_EXCHANGE_ROOT": klass["exchange"],
    "PATH": f"{ENV}/bin:/usr/local/bin:/usr/bin:/bin",
}


def per_role(spawner):
    """The instructor's server opens on the course folder with the Formgrader and the assignment tools (their
    settings in <env>/etc/jupyter-instructor); a student's server opens on their home, without them."""
    if spawner.user.name == instructor:
        spawner.notebook_dir = klass["course"]
        # nbgrader (the Formgrader included) reads the course's nbgrader_config.py from its working folder
        spawner.cmd = ["/bin/sh", "-c", f'cd "{klass["course"]}" && exec "{ENV}/bin/jupyterhub-singleuser" "$@"',
                       "jupyterhub-singleuser"]
        spawner.environment["JUPYTER_CONFIG_PATH"] = f"{ENV}/etc/jupyter-instructor"
        # her make, in the course folder, runs the shared environment (no .venv there); her terminals are login
        # shells, whose PATH /etc/profile sets: her ~/.profile puts the environment first again (hub.instructor_profile)
        spawner.environment["ATTENTION_ENV"] = ENV
    else:
        spawner.notebook_dir = "~"


c.Spawner.pre_spawn_hook = per_role

# -- groups and roles: nbgrader's course list and its JupyterHub auth plugin -----------------------------------
c.JupyterHub.load_groups = {
    f"formgrade-{COURSE}": {"users": [instructor]},
    f"nbgrader-{COURSE}": {"users": list(students)},
}
c.JupyterHub.load_roles = [
    # a server's token may do what its user may (nbgrader asks the hub which courses its user is in)
    {"name": "server", "scopes": ["inherit"]},
    {"name": "students", "groups": [f"nbgrader-{COURSE}"], "scopes": ["self", "list:services"]},
    # the class's scripts and tests act through this service's token: start servers, make tokens, read groups
    {"name": "class-admin", "services": ["class-admin"],
     "scopes": ["admin:users", "admin:servers", "tokens", "admin:groups", "list:users", "read:users"]},
]
c.JupyterHub.services = [{"name": "class-admin", "api_token": klass["api_token"]}]

# -- feedback at submit: the grading service, run by the hub as the instructor ---------------------------------
# It grades each hand-in of the assignments the course's nbgrader_config.py puts on submit (c.OnSubmit) and releases
# its feedback to the student; the hub starts it with the hub and starts it again if it exits. Its output goes to the
# hub's log (root's); its own log, each hand-in's outcome in one line, is service.log in her course folder, and she has
# it read a changed nbgrader_config.py or extensions.csv (it notices by itself) with `make serve-reload`.
if klass.get("grading_service", True):
    c.JupyterHub.services.append({
        "name": "grading",
        "user": instructor,
        "cwd": klass["course"],
        "command": [f"{ENV}/bin/python", "-m", "attention_course.grading", "--course", klass["course"], "serve"],
        "environment": {"NBGRADER_EXCHANGE_ROOT": klass["exchange"], "PATH": f"{ENV}/bin:/usr/bin:/bin",
                        "LANG": "C.UTF-8"},
    })
    # nbgrader asks the hub which courses its user is in (JupyterHubAuthPlugin) with the service's token: read-only
    c.JupyterHub.load_roles.append({"name": "grading-service", "services": ["grading"],
                                    "scopes": ["read:users:name", "read:users:groups"]})
