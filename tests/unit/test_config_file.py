"""``tether.toml``: discovery, profiles, precedence (cli > env > file > default), errors, ``config show``."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.support.serve import capture_serve
from tether.cli import app
from tether.config import ServerConfig
from tether.errors import ConfigError

LAYERS = ("cli", "env", "file")
CTX = {"cli": 2048, "env": 3072, "file": 4096}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean world: empty cwd, a private HOME and XDG dir, no TETHER_* variables."""
    for name in [name for name in os.environ if name.startswith("TETHER_")]:
        monkeypatch.delenv(name)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """``tether serve`` up to loading the model: the ``ServerConfig`` it would run with."""
    return capture_serve(monkeypatch)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def show(*args: str) -> dict[str, Any]:
    result = invoke("config", "show", "--json", *args)
    assert result.exit_code == 0, result.output
    shown: dict[str, Any] = json.loads(result.stdout)
    return shown


def fails(*args: str) -> str:
    """Run the CLI, expect the one-line exit-2 error, return it."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


# -- precedence: every subset of {cli, env, file}; the highest present wins, else the default ------

SUBSETS = [s for n in range(len(LAYERS) + 1) for s in itertools.combinations(LAYERS, n)]


def _set_up(layers: tuple[str, ...], home: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    if "env" in layers:
        monkeypatch.setenv("TETHER_CTX", str(CTX["env"]))
    if "file" in layers:
        write(home / "cwd" / "tether.toml", f"ctx = {CTX['file']}\n")
    return ["--ctx", str(CTX["cli"])] if "cli" in layers else []


def _expected(layers: tuple[str, ...], home: Path) -> tuple[int, str]:
    if not layers:
        return 8192, "default"
    winner = layers[0]  # LAYERS is in precedence order
    source = f"file:{home / 'cwd' / 'tether.toml'}" if winner == "file" else winner
    return CTX[winner], source


@pytest.mark.parametrize("layers", SUBSETS, ids=lambda s: "+".join(s) or "none")
def test_precedence_in_config_show(
    layers: tuple[str, ...], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _set_up(layers, home, monkeypatch)
    value, source = _expected(layers, home)
    assert show(*args)["options"]["ctx"] == {"value": value, "source": source}


@pytest.mark.parametrize("layers", SUBSETS, ids=lambda s: "+".join(s) or "none")
def test_precedence_in_serve(
    layers: tuple[str, ...], home: Path, monkeypatch: pytest.MonkeyPatch, served: list[ServerConfig]
) -> None:
    args = _set_up(layers, home, monkeypatch)
    result = invoke("serve", *args)
    assert result.exit_code == 0, result.output
    assert served[0].n_ctx == _expected(layers, home)[0]


def test_every_kind_of_value_from_the_file(home: Path, served: list[ServerConfig]) -> None:
    write(
        home / "cwd" / "tether.toml",
        'preset = "strict"\nqueue-timeout = 0\ncompaction = true\nserver_tools = ["read_file", "grep"]\n'
        'work_dir = "sandbox"\nmodel = "~/m.gguf"\nworkflow = "flows/a.yaml"\nmodel_alias = "gpt-4o,local"\n',
    )
    assert invoke("serve").exit_code == 0
    config = served[0]
    assert (config.preset, config.constrain, config.queue_timeout_s, config.compaction) == (
        "strict",
        "strict",
        None,
        True,
    )
    assert config.server_tools == ("read_file", "grep")
    assert config.model_aliases == ("gpt-4o", "local")
    # Paths in a file are relative to the file (and ~ is expanded), not to where serve starts.
    assert config.work_dir == str(home / "cwd" / "sandbox")
    assert config.model_path == str(home / "home" / "m.gguf")
    assert config.workflows == (str(home / "cwd" / "flows" / "a.yaml"),)


def test_file_keeps_the_public_bind_rule(home: Path, served: list[ServerConfig]) -> None:
    write(home / "cwd" / "tether.toml", 'host = "0.0.0.0"\n')
    assert "api-key" in fails("serve") and not served
    write(home / "cwd" / "tether.toml", 'host = "0.0.0.0"\napi_key = "k"\n')
    assert invoke("serve").exit_code == 0 and served[0].host == "0.0.0.0"


# -- profiles ---------------------------------------------------------------------------------------

PROFILED = """\
ctx = 4096
slots = 2
[profiles.gpu]
slots = 8
preset = "strict"
[profiles.tiny]
ctx = 1024
"""


def test_a_profile_overrides_the_top_level(home: Path) -> None:
    path = write(home / "cwd" / "tether.toml", PROFILED)
    options = show("--profile", "gpu")["options"]
    assert options["slots"] == {"value": 8, "source": f"file:{path}[gpu]"}
    assert options["preset"] == {"value": "strict", "source": f"file:{path}[gpu]"}
    assert options["ctx"] == {"value": 4096, "source": f"file:{path}"}
    plain = show()["options"]  # no profile: top level only
    assert (plain["slots"]["value"], plain["preset"]["source"]) == (2, "default")


def test_cli_and_env_win_over_a_profile(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(home / "cwd" / "tether.toml", PROFILED)
    monkeypatch.setenv("TETHER_PRESET", "bare")
    options = show("--profile", "gpu", "--slots", "3")["options"]
    assert options["slots"] == {"value": 3, "source": "cli"}
    assert options["preset"] == {"value": "bare", "source": "env"}


def test_profile_from_the_environment(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(home / "cwd" / "tether.toml", PROFILED)
    monkeypatch.setenv("TETHER_PROFILE", "tiny")
    shown = show()
    assert shown["profile"] == "tiny" and shown["options"]["ctx"]["value"] == 1024


def test_unknown_profile_lists_the_available_ones(home: Path) -> None:
    write(home / "cwd" / "tether.toml", PROFILED)
    line = fails("serve", "--profile", "cpu")
    assert "'cpu'" in line and "available: gpu, tiny" in line and "tether.toml" in line


def test_a_profile_needs_a_file(home: Path) -> None:
    line = fails("config", "show", "--profile", "gpu")
    assert "no config file found" in line and str(home / "cwd" / "tether.toml") in line


# -- errors: one line, exit 2, naming the key and the file ---------------------------------------


def test_unknown_key_names_the_key_the_file_and_a_close_match(home: Path) -> None:
    path = write(home / "cwd" / "tether.toml", "ctx = 4096\nqueue_limt = 3\n")
    line = fails("serve")
    assert str(path) in line and "'queue_limt'" in line and "did you mean 'queue_limit'" in line


def test_unknown_key_inside_a_profile_names_the_profile(home: Path) -> None:
    write(home / "cwd" / "tether.toml", "[profiles.gpu]\nbogus_option = 1\n")
    # Checked even when that profile is not selected: a typo should not wait for the day it is used.
    line = fails("config", "show")
    assert "'bogus_option'" in line and "[profiles.gpu]" in line and "known keys:" in line


def test_a_table_where_a_profile_was_meant(home: Path) -> None:
    write(home / "cwd" / "tether.toml", "[gpu]\nslots = 2\n")
    assert "profiles go in [profiles.gpu]" in fails("config", "show")


def test_dashed_and_snake_spellings(home: Path) -> None:
    write(home / "cwd" / "tether.toml", "queue-limit = 3\n")
    assert show()["options"]["queue_limit"]["value"] == 3
    write(home / "cwd" / "tether.toml", "queue-limit = 3\nqueue_limit = 4\n")
    assert "given twice" in fails("config", "show")


def test_bad_value_names_the_key_the_file_and_the_expected_type(home: Path) -> None:
    path = write(home / "cwd" / "tether.toml", 'ctx = "lots"\n')
    line = fails("serve")
    assert line.startswith(f"tether: error: ctx (from {path})")
    assert "expected an integer" in line and "'lots'" in line
    write(home / "cwd" / "tether.toml", '[profiles.x]\npreset = "everything"\n')
    line = fails("config", "show", "--profile", "x")
    assert "preset" in line and "[profiles.x]" in line and "one of 'bare'" in line


def test_bad_value_from_the_environment_says_so(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_SLOTS", "0")
    line = fails("config", "show")
    assert "slots (from TETHER_SLOTS)" in line and "expected an integer" in line


def test_invalid_toml(home: Path) -> None:
    write(home / "cwd" / "tether.toml", "ctx = \n")
    assert "not valid TOML" in fails("serve")


def test_missing_explicit_file(home: Path) -> None:
    assert "no such file" in fails("serve", "--config", "nowhere.toml")


# -- discovery --------------------------------------------------------------------------------------


def test_discovers_the_xdg_dir_then_prefers_the_cwd(home: Path) -> None:
    user = write(home / "xdg" / "tether" / "tether.toml", "slots = 5\n")
    shown = show()
    assert shown["config_file"] == str(user) and shown["options"]["slots"]["source"] == f"file:{user}"
    local = write(home / "cwd" / "tether.toml", "slots = 6\n")
    shown = show()
    assert shown["config_file"] == str(local) and shown["options"]["slots"]["value"] == 6


def test_falls_back_to_dot_config_without_xdg(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    user = write(home / "home" / ".config" / "tether" / "tether.toml", "slots = 7\n")
    assert show()["config_file"] == str(user)


def test_explicit_config_wins_over_discovery(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(home / "cwd" / "tether.toml", "slots = 6\n")
    other = write(home / "elsewhere.toml", "slots = 9\n")
    assert show("--config", str(other))["options"]["slots"]["value"] == 9
    monkeypatch.setenv("TETHER_CONFIG", str(other))
    assert show()["config_file"] == str(other)


def test_no_file_anywhere(home: Path) -> None:
    shown = show()
    assert shown["config_file"] is None
    assert {row["source"] for row in shown["options"].values()} == {"default"}


# -- config show's table, serve's help ----------------------------------------------------------------


def test_show_prints_a_table_and_hides_the_key(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        home / "cwd" / "tether.toml",
        PROFILED.replace("[profiles.gpu]\n", '[profiles.gpu]\napi_key = "sekret"\n'),
    )
    monkeypatch.setenv("TETHER_PORT", "9001")
    result = invoke("config", "show", "--profile", "gpu", "--ctx", "2048")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:]}
    assert result.stdout.splitlines()[0] == f"config file: {path} (profile gpu)"
    assert rows["option"] == ["value", "source"]
    assert rows["ctx"] == ["2048", "cli"] and rows["port"] == ["9001", "env"]
    assert rows["slots"] == ["8", f"file:{path}[gpu]"] and rows["engine"] == ["auto", "default"]
    assert rows["api_key"] == ["***", f"file:{path}[gpu]"]
    assert "sekret" not in result.output
    assert show("--profile", "gpu")["options"]["api_key"]["value"] == "***"


def test_serve_help_documents_config_and_profile() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--config" in result.output and "tether.toml" in result.output
    assert "--profile" in result.output


def test_the_documented_example_works(home: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    example = page.split("```toml\n", 1)[1].split("```", 1)[0]
    path = write(home / "cwd" / "tether.toml", example)
    assert show()["options"]["ctx"] == {"value": 16384, "source": f"file:{path}"}
    agent = show("--profile", "agent")["options"]
    assert agent["work_dir"]["value"] == str(home / "cwd" / "workspace")
    assert agent["server_tools"]["value"] == ["read_file", "grep"]
    assert show("--profile", "lan")["options"]["host"]["source"] == f"file:{path}[lan]"


def _option_rows() -> list[str]:
    """docs/configuration.md's table as ``tether serve --help`` and ``Settings`` give it."""
    import re

    import typer

    from tether.config import Settings

    params = {p.name: p for p in typer.main.get_command(app).commands["serve"].params}  # type: ignore[attr-defined]
    rows = []
    for name in Settings.model_fields:
        assert name in params, f"setting {name} has no serve flag"
        p = params[name]
        flag = next(o for o in p.opts if o.startswith("--"))
        flag += f"/{p.secondary_opts[0]}" if p.secondary_opts else ""
        help_ = p.help or ""
        text = re.sub(r"\s*\((default: .*?; )?env TETHER_[A-Z_]+\)$", "", help_).replace("|", "\\|")
        default = m.group(1) if (m := re.search(r"\(default: (.*?); env", help_)) else ""
        rows.append(f"| `{name}` | `{flag}` | `TETHER_{name.upper()}` | {default} | {text} |")
    return rows


def test_every_setting_is_a_flag_a_variable_and_a_documented_key() -> None:
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    table = [line for line in page.splitlines() if line.startswith("| `")]
    assert table == _option_rows()


def test_config_show_says_what_unset_options_mean(home: Path) -> None:
    from tether.engine.locate import bundled_model_path

    lines = {line.split()[0]: line for line in invoke("config", "show").stdout.splitlines() if line.strip()}
    assert f"{bundled_model_path()} (bundled)" in lines["model"]
    assert "up to the window" in lines["max_tokens"] and "(all cores)" in lines["threads"]
    backed = invoke("config", "show", "--backend", "http://127.0.0.1:9").stdout
    assert "(bundled)" not in backed


def test_mcp_servers_from_an_mcp_table(home: Path) -> None:
    from tether.config_file import resolve
    from tether.mcp.config import read_mcp_config

    by_file = write(home / "a" / "tether.toml", '[mcp]\nconfig = "mcp.json"\n')
    assert resolve({}, config_file=by_file).settings.mcp_config == str(home / "a" / "mcp.json")
    inline = write(
        home / "b" / "tether.toml",
        '[mcp.servers.weather]\ncommand = "uvx"\nargs = ["weather-mcp"]\nnetwork = true\n',
    )
    value = resolve({}, config_file=inline).settings.mcp_config
    assert value is not None
    (spec,) = read_mcp_config(value)
    assert (spec.name, spec.command, spec.args, spec.network) == ("weather", "uvx", ("weather-mcp",), True)
    both = write(home / "c" / "tether.toml", 'mcp_config = "x.json"\n[mcp]\nconfig = "y.json"\n')
    with pytest.raises(ConfigError, match="once"):
        resolve({}, config_file=both)
    neither = write(home / "d" / "tether.toml", "[mcp]\nservers_typo = 1\n")
    with pytest.raises(ConfigError, match=r"\[mcp\] holds either"):
        resolve({}, config_file=neither)
