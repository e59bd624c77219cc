"""Instructor tooling: nbgrader extensions, the demo class and grade tables.

Nothing here is imported by a student notebook.
"""
