"""The Formgrader's pages: nbgrader's submission page under a Content-Security-Policy that lets only its own
scripts run (a nonce per page), with a link from each written answer's marking guide to the question pages, and
those pages' routes (:mod:`.questions`) added to the Formgrader's server. Installed by :func:`.patches.install`.
"""

from __future__ import annotations

from jupyter_server.utils import url_path_join
from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension
from nbgrader.server_extensions.formgrader.handlers import SubmissionHandler

from .marking import with_question_links
from .questions import nonced, routes

#: nbgrader's template shows a student's name with two inline onclick handlers; the policy forbids those,
#: so the same behaviour is attached by a script that carries the page's nonce. The same script gives the
#: keyboard back the links to the question pages (a.marking) that nbgrader's page takes out of the tab order.
_TOGGLES = ('onclick="toggle_name(true);"', 'onclick="toggle_name(false);"')
_TOGGLE_SCRIPT = ("<script>$(function () { $('.name-hidden').on('click', function () { toggle_name(true); }); "
                  "$('.name-shown').on('click', function () { toggle_name(false); }); "
                  "setTimeout(function () { $('a.marking').removeAttr('tabindex'); }, 0); "
                  "});</script>")


def with_nonce(page: str) -> tuple[str, str]:
    """The Formgrader's submission page under :func:`nonced`, its inline handlers replaced by a script."""
    for toggle in _TOGGLES:
        page = page.replace(toggle, "")
    return nonced(page.replace("</body>", _TOGGLE_SCRIPT + "</body>", 1))


def install() -> None:
    """Patch the submission page's writer and the Formgrader's handler list (idempotent through the caller)."""
    stock_write = SubmissionHandler.write

    def write(self, chunk):
        if isinstance(chunk, str) and "<html" in chunk[:4096].lower():
            chunk, policy = with_nonce(with_question_links(chunk, self.base_url))
            self.set_header("Content-Security-Policy", policy)
        return stock_write(self, chunk)

    SubmissionHandler.write = write

    stock_handlers = FormgradeExtension.init_handlers

    def init_handlers(self, webapp):  # the question pages (marking.py), before nbgrader's catch-all 404

        base = webapp.settings["base_url"]
        webapp.add_handlers(".*$", [(url_path_join(base, path.lstrip("/")), handler) for path, handler in routes()])
        return stock_handlers(self, webapp)

    FormgradeExtension.init_handlers = init_handlers
