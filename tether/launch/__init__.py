"""``tether launch``: point a coding client (opencode, cn, aider, Claude Code) at a tether server.

``runner.launch`` finds or starts the server, merges the client's config (``plan`` and one module per
client), backs up and diffs what it replaces, then runs the client. ``cli.launch_command`` is the
command-line face.
"""

from __future__ import annotations

from tether.launch.plan import ClientPlan, FileChange, Target
from tether.launch.runner import CLIENTS, LaunchOptions, launch

__all__ = ["CLIENTS", "ClientPlan", "FileChange", "LaunchOptions", "Target", "launch"]
