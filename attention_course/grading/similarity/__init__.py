"""Which hand-ins were copied? The similarity report over the students' own code.

:mod:`.report` is the command and the report's data (:func:`write`); :mod:`.read` reads a hand-in's code and
tokenises it, :mod:`.normal` normalises it (with :mod:`.blocks`, :mod:`.forms` and :mod:`.inline`), :mod:`.opaque`
names what cannot be read, :mod:`.fingerprints` are copydetect's fingerprints and what two share, :mod:`.parts`
compares by part and by rarity, and :mod:`.page` writes the page.
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "THRESHOLD": "report",
    "handed_in": "report",
    "main": "report",
    "write": "report",
    "normalise": "normal",
    "normalise_all": "normal",
    "installed": "opaque",
    "filtered": "read",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)
