"""A subset of the client task suite (``benchmarks/client_tasks.py``) in ``make test``: real clients
finish real tasks on the bundled model, checked by the answer they print, never by an exit code.

opencode reads a file and answers from its content (the read, then an answer made of the result's
value); cn reads a file the user names (not one named after its ``Read`` tool). The whole suite, five
tasks per client, is ``make eval-clients`` (docs/evals.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.client_tasks import TASKS, run_task
from tests.clients.harness import Netns, Server

pytestmark = pytest.mark.timeout(600)
BY_NAME = {task.name: task for task in TASKS}


@pytest.mark.parametrize(("client", "task"), [("opencode", "read"), ("cn", "read")])
def test_a_client_finishes_a_task_on_the_bundled_model(
    client: str, task: str, model_server: Server, netns: Netns, tmp_path: Path, installed: dict[str, str]
) -> None:
    result = run_task(client, BY_NAME[task], model_server, netns, tmp_path, timeout=300)
    assert result["passed"], result
