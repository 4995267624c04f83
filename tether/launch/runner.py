"""``tether launch CLIENT``: find or start a server, merge the client's config, run the client.

Output goes through two callables so the CLI owns printing: ``out`` (stdout) gets only the merged
config files, so ``tether launch opencode --dry-run > opencode.json`` is usable as it is; ``say``
(stderr) gets everything else: the server used, diffs, backups, the command run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tether.errors import ConfigError
from tether.launch import aider, claude, continue_cli, opencode
from tether.launch.plan import ClientPlan, FileChange, Planner, Target
from tether.launch.server import (
    Served,
    client_base,
    default_command,
    expand_command,
    log_path,
    predicted_model,
    probe,
    shown,
    start,
    stop,
)
from tether.mcp.config import load_mcp_config

__all__ = ["CLIENTS", "LaunchOptions", "apply", "backup_path", "launch", "planner"]

Echo = Callable[[str], None]

CLIENTS: dict[str, Planner] = {
    "opencode": opencode.plan,
    "cn": continue_cli.plan,
    "aider": aider.plan,
    "claude": claude.plan,
}
INSTALL = {
    "opencode": "npm install -g opencode-ai",
    "cn": "npm install -g @continuedev/cli",
    "aider": "pipx install aider-chat",
    "claude": "npm install -g @anthropic-ai/claude-code",
}
# The pinned clients scripts/install_clients.sh puts in the checkout (what the client tests drive).
PINNED = {
    "opencode": Path("node_modules/.bin/opencode"),
    "cn": Path("node_modules/.bin/cn"),
    "aider": Path("aider-venv/bin/aider"),
}
DEFAULT_CTX = 8192  # ``tether serve``'s default window, for a dry run with nothing to ask


@dataclass(frozen=True)
class LaunchOptions:
    client: str
    host: str = "127.0.0.1"
    port: int = 8000
    model: str | None = None  # model file for a server launch starts
    ctx: int | None = None
    api_key: str | None = None
    config_path: Path | None = None
    dry_run: bool = False
    no_start: bool = False
    server_command: str | None = None  # replaces ``tether serve …``; ``{host}``/``{port}`` filled in
    client_args: tuple[str, ...] = ()
    start_timeout: float = 300.0
    mcp_config: Path | None = None  # an mcpServers file, written into the client's own config


def planner(client: str) -> Planner:
    try:
        return CLIENTS[client]
    except KeyError:
        raise ConfigError(f"unknown client {client!r}: choose one of {', '.join(CLIENTS)}") from None


def backup_path(path: Path, now: datetime) -> Path:
    """``NAME.YYYYmmdd-HHMMSS.bak`` next to ``path``, never overwriting an earlier backup."""
    stamp = now.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}-{n}.bak")
        n += 1
    return candidate


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically, keeping its permission bits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def apply(changes: tuple[FileChange, ...], say: Echo, now: datetime | None = None) -> None:
    """Show each change's diff, back up the file it replaces, write it."""
    now = now or datetime.now()
    for change in changes:
        if not change.changed:
            say(f"{change.path}: already up to date")
            continue
        say(change.diff().rstrip("\n"))
        for note in change.notes:
            say(f"note: {note}")
        if change.before is not None:
            backup = backup_path(change.path, now)
            shutil.copy2(change.path, backup)
            say(f"backed up {change.path} to {backup}")
        _write(change.path, change.after)
        say(f"wrote {change.path}")


def _show(plan: ClientPlan, out: Echo, say: Echo) -> None:
    for change in plan.files:
        state = "unchanged" if not change.changed else "new file" if change.before is None else "changed"
        say(f"# {change.path} ({state}; nothing written: --dry-run)")
        out(change.after.rstrip("\n"))
        if change.changed and change.before is not None:  # a new file's diff would only repeat it
            say(change.diff().rstrip("\n"))
        for note in change.notes:
            say(f"note: {note}")


def client_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Where pinned clients may be: ``TETHER_CLIENTS_DIR`` when set, else ``.cache/clients`` of this
    checkout and of the working directory."""
    if environ.get("TETHER_CLIENTS_DIR"):
        return [Path(environ["TETHER_CLIENTS_DIR"])]
    return [Path(__file__).resolve().parents[2] / ".cache" / "clients", Path.cwd() / ".cache" / "clients"]


def find_client(client: str, environ: Mapping[str, str]) -> str | None:
    """The client's binary: the project's pinned install first, then PATH."""
    pinned = PINNED.get(client)
    if pinned is not None:
        for root in client_dirs(environ):
            if os.access(root / pinned, os.X_OK):
                return str(root / pinned)
    return shutil.which(client, path=environ.get("PATH"))


def _missing(client: str) -> str:
    pinned = (
        " (scripts/install_clients.sh installs the pinned one under .cache/clients)"
        if client in PINNED
        else ""
    )
    return f"{client} is not installed: not under .cache/clients nor on PATH; install it{pinned} or: {INSTALL[client]}"


def _command_line(plan: ClientPlan, options: LaunchOptions) -> str:
    env = [f"{k}={v}" for k, v in plan.env.items()]
    return shown([*env, *plan.argv, *options.client_args], options.api_key)


def _run_client(binary: str, plan: ClientPlan, args: tuple[str, ...], environ: Mapping[str, str]) -> int:
    env = {k: v for k, v in environ.items() if k not in plan.unset}
    env.update(plan.env)
    # A handler, not SIG_IGN: the client (which exec resets to the default) gets Ctrl-C, launch
    # survives it to stop the server it started.
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        code = subprocess.run([binary, *plan.argv[1:], *args], env=env, check=False).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code


def _server(
    options: LaunchOptions, base: str, environ: Mapping[str, str], say: Echo
) -> tuple[Served, subprocess.Popen[bytes] | None]:
    default_ctx = options.ctx or DEFAULT_CTX
    served = probe(base, options.api_key, default_ctx)
    if served is not None:
        say(f"using the tether server at {base} (model {served.model}, {served.n_ctx}-token window)")
        return served, None
    if options.no_start:
        raise ConfigError(f"no tether server answers at {base} and --no-start was given")
    if options.server_command:
        cmd = expand_command(options.server_command, options.host, options.port)
    else:
        cmd = default_command(
            options.host, options.port, options.model, options.ctx, options.api_key, environ
        )
    if options.dry_run:
        name = predicted_model(options.model) if not options.server_command else "model"
        say(f"no server answers at {base}; launch would start: {shown(cmd, options.api_key)}")
        say(f"(model name {name!r} predicted; a real launch uses the name the server reports)")
        return Served(name, default_ctx), None
    log = log_path(options.port)
    say(f"starting {shown(cmd, options.api_key)} (log: {log})")
    proc, served = start(
        cmd,
        base,
        api_key=options.api_key,
        default_ctx=default_ctx,
        log=log,
        environ=environ,
        timeout=options.start_timeout,
    )
    say(f"tether server ready at {base} (model {served.model}, {served.n_ctx}-token window)")
    return served, proc


def launch(options: LaunchOptions, *, out: Echo, say: Echo, environ: Mapping[str, str] | None = None) -> int:
    """Run the whole launch; the client's exit status (0 for a dry run)."""
    environ = os.environ if environ is None else environ
    plan_client = planner(options.client)
    binary = find_client(options.client, environ)
    if binary is None and not options.dry_run:
        raise ConfigError(_missing(options.client))
    base = client_base(options.host, options.port)
    served, proc = _server(options, base, environ, say)
    try:
        mcp = load_mcp_config(options.mcp_config) if options.mcp_config else ()
        target = Target(
            base, served.model, served.n_ctx, options.api_key or "unused", mcp, options.mcp_config
        )
        plan = plan_client(target, options.config_path, environ)
        if options.dry_run or binary is None:
            _show(plan, out, say)
            say(f"would run: {_command_line(plan, options)}")
            say(f"the client: {binary}" if binary is not None else f"warning: {_missing(options.client)}")
            return 0
        apply(plan.files, say)
        say(f"running: {_command_line(plan, options)}")
        return _run_client(binary, plan, options.client_args, environ)
    finally:
        if proc is not None:
            say("stopping the tether server launch started")
            stop(proc)
