"""Formulas typeset without a network: TeX in Markdown cells becomes MathML when pages are written.

nbconvert's pages (feedback, Formgrader) leave ``$...$`` for MathJax, which they load from a CDN: a
student who opens their feedback offline, or a grading machine with no internet access, sees raw TeX.
``TypesetMath`` converts each formula of a Markdown cell into MathML (``latex2mathml``), which every
current browser draws natively, with no script. Code (fenced or inline) is left alone, an escaped ``\\$``
stays a dollar sign, and a formula that cannot be converted stays as its TeX source, unchanged.
"""

from __future__ import annotations

import re

from latex2mathml.converter import convert
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

_TOKENS = re.compile(
    r"""
    (?P<code>^[ ]{0,3}(?P<fence>```+|~~~+)[^\n]*\n.*?(?:^[ ]{0,3}(?P=fence)[ \t]*$|\Z)  # fenced code
       |(?P<ticks>`+)(?!`).*?(?<!`)(?P=ticks)(?!`))                                     # inline code
    |(?P<escaped>\\\$)
    |\$\$(?P<display>.+?)\$\$
    |\\\[(?P<display2>.+?)\\\]
    |\\\((?P<inline2>.+?)\\\)
    |\$(?P<inline>[^\s$](?:[^$\n]|\n(?![ \t]*\n))*?(?<![\s\\]))\$(?!\d)
    """,
    re.S | re.M | re.X,
)

# Characters Markdown would read inside the MathML's text (emphasis, links, escapes, code, math).
_MARKDOWN_SPECIAL = {c: f"&#{ord(c)};" for c in "\\`*_[]{}$~|"}
_TEXT = re.compile(r">([^<]+)<")


def to_mathml(tex: str, display: bool) -> str | None:
    """The MathML for one formula on a single line, safe inside Markdown; None if it cannot be read."""
    try:
        html = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # the library raises many kinds for TeX it does not know
        return None
    html = _TEXT.sub(lambda m: ">" + "".join(_MARKDOWN_SPECIAL.get(c, c) for c in m.group(1)) + "<", html)
    if display:  # a formula wider than a small screen scrolls in its own box, which the keyboard must reach
        html = html.replace("<math ", '<math tabindex="0" ', 1)
    return html.replace("\n", " ")


def typeset(markdown: str) -> str:
    """``markdown`` with every formula it holds replaced by MathML."""

    def one(m: re.Match) -> str:
        if m.group("code") or m.group("escaped"):
            return m.group(0)
        for name, display in (("display", True), ("display2", True), ("inline", False), ("inline2", False)):
            tex = m.group(name)
            if tex is not None:
                return to_mathml(tex, display) or m.group(0)
        return m.group(0)

    return _TOKENS.sub(one, markdown)


class TypesetMath(Preprocessor):
    """Replace the TeX of every Markdown cell with MathML (see the module's docstring)."""

    enabled = Bool(True).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = typeset(cell.source)
        return cell, resources
