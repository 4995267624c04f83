"""Finding, starting and stopping the tether server ``tether launch`` points a client at.

A server that answers ``GET /health`` like tether does is reused and asked for its model
(``GET /v1/models``: the served name and window). Otherwise launch starts one
(``tether serve``, or a command given with ``--server-command``), logging to a file, and waits
until it answers.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tether.errors import ConfigError

__all__ = [
    "Served",
    "client_base",
    "default_command",
    "expand_command",
    "log_path",
    "predicted_model",
    "prefix_cache_home",
    "probe",
    "shown",
    "start",
    "stop",
]


@dataclass(frozen=True)
class Served:
    model: str
    n_ctx: int


def client_base(host: str, port: int) -> str:
    """The URL a client uses: a wildcard bind is reached on loopback."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def probe(base: str, api_key: str | None, default_ctx: int, *, timeout: float = 2.0) -> Served | None:
    """The model a tether server at ``base`` serves; None when nothing answers there."""
    try:
        health = httpx.get(f"{base}/health", timeout=timeout)
    except httpx.TransportError:
        return None
    body = _json(health)
    if health.status_code != 200 or not isinstance(body, dict) or body.get("status") != "ok":
        raise ConfigError(
            f"something answers at {base} but it is not a tether server (GET /health: {health.status_code}); "
            "pick another --port"
        )
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        models = httpx.get(f"{base}/v1/models", headers=headers, timeout=timeout)
    except httpx.TransportError as exc:
        raise ConfigError(f"the tether server at {base} did not list its models: {exc}") from exc
    if models.status_code == 401:
        raise ConfigError(
            f"the tether server at {base} needs its API key: pass --api-key (or TETHER_API_KEY)"
        )
    listing = _json(models)
    try:
        card = listing["data"][0]
        return Served(str(card["id"]), int((card.get("tether") or {}).get("n_ctx") or default_ctx))
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"unexpected answer from {base}/v1/models ({models.status_code}): {models.text[:200]}"
        ) from exc


def default_command(
    host: str,
    port: int,
    model: str | None,
    ctx: int | None,
    api_key: str | None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """``tether serve`` for a client: the prefix cache's disk tier on (an agent's long prompt then
    survives restarts), unless the environment already names a directory for it."""
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--host", host, "--port", str(port)]
    if model:
        cmd += ["--model", model]
    if ctx:
        cmd += ["--ctx", str(ctx)]
    if api_key:
        cmd += ["--api-key", api_key]
    env = os.environ if environ is None else environ
    if not env.get("TETHER_PREFIX_CACHE_DIR"):
        cmd += ["--prefix-cache-dir", str(prefix_cache_home(env))]
    return cmd


def prefix_cache_home(environ: Mapping[str, str]) -> Path:
    """Where ``tether launch`` keeps cached prefixes: ``$XDG_CACHE_HOME/tether/prefix``."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tether" / "prefix"


def expand_command(template: str, host: str, port: int) -> list[str]:
    """``--server-command``: shell words, with ``{host}`` and ``{port}`` filled in."""
    return shlex.split(template.replace("{host}", host).replace("{port}", str(port)))


def shown(cmd: Sequence[str], secret: str | None) -> str:
    """A command line to print, with the API key masked."""
    return shlex.join(part.replace(secret, "***") if secret else part for part in cmd)


def predicted_model(model: str | None) -> str:
    """The name ``tether serve`` would give ``model`` (a dry run with no server to ask)."""
    from tether.engine.llama_cpp import model_id_for
    from tether.engine.locate import bundled_model_path

    return model_id_for(Path(model) if model else bundled_model_path(), {})


def log_path(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"tether-launch-{port}.log"


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def start(
    cmd: Sequence[str],
    base: str,
    *,
    api_key: str | None,
    default_ctx: int,
    log: Path,
    environ: Mapping[str, str],
    timeout: float,
) -> tuple[subprocess.Popen[bytes], Served]:
    """Start ``cmd`` (its own session, so the client's Ctrl-C does not reach it) and wait for it to answer."""
    with log.open("ab") as sink:
        try:
            proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                env=dict(environ),
                start_new_session=True,
            )
        except OSError as exc:
            raise ConfigError(f"cannot start the server ({shlex.join(cmd)}): {exc}") from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise ConfigError(
                    f"the server exited with code {proc.returncode} before answering; {log}:\n{_tail(log)}"
                )
            served = probe(base, api_key, default_ctx, timeout=1.0)
            if served is not None:
                return proc, served
            if time.monotonic() > deadline:
                raise ConfigError(f"the server did not answer at {base} within {timeout:.0f} s; see {log}")
            time.sleep(0.2)
    except BaseException:
        stop(proc)
        raise


def stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM (tether cancels generations and exits within its shutdown grace), then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
