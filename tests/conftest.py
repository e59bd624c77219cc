import pytest

from attention_course.grading.course import available, catalogue_path

from harness import grade_class

GRADED = [a for a in available() if catalogue_path(a).exists()]


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """Each assignment graded once per session: ``graded(assignment) -> GradedClass``."""
    cache = {}

    def get(assignment):
        if assignment not in cache:
            cache[assignment] = grade_class(tmp_path_factory.mktemp(assignment), assignment)
        return cache[assignment]

    return get
