"""tether in front of real remote backends; ``checks`` holds what their tests share."""

import pytest

# Its asserts report their operands as a test module's do.
pytest.register_assert_rewrite("tests.backends.checks")
