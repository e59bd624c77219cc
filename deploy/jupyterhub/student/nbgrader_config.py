"""nbgrader settings of every server the shared environment runs (installed as <env>/etc/jupyter/nbgrader_config.py).

A student's server reads this file and not the course's nbgrader_config.py (which stays in the instructor's closed
folder), so the course's Validate settings come from the one function the course's file calls too.
"""

import os

from attention_course.grading.errors import CourseError
from attention_course.grading.nbgrader_glue import patches
from attention_course.nbgrader_settings import COURSE_ID, validate_settings

# The course's changes to nbgrader on a shared exchange: copies never follow links, a hand-in's folder 0755 (stock
# 0777: a classmate could add files to it), the exchange sticky (attention_course/grading/nbgrader_glue/patches.py).
try:
    patches.install()
except CourseError as exc:  # the wrong nbgrader: stop with the course's words (traitlets would go on)
    raise SystemExit(str(exc)) from None

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = COURSE_ID
# The class's one exchange: the hub gives every server NBGRADER_EXCHANGE_ROOT (deploy/jupyterhub/jupyterhub_config.py);
# on a server of your own, write its path here instead.
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE_ROOT", "/srv/nbgrader/exchange")
# Who may fetch and submit to which course: the hub's groups nbgrader-<course> (students) and formgrade-<course>
# (instructors), asked with the server's own token; `submit --student=someone-else` is refused.
if os.environ.get("JUPYTERHUB_API_TOKEN"):
    from nbgrader.auth import JupyterHubAuthPlugin

    c.Authenticator.plugin_class = JupyterHubAuthPlugin
validate_settings(c)
