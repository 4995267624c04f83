# llama.cpp build flags per platform, shared by setup.sh (llama-cpp-python) and install_llama_server.sh
# (sourced, not run).
#   TETHER_GPU=cuda    GGML_CUDA (needs the CUDA toolkit; see docs/gpu.md)
#   TETHER_GPU=metal   Metal (the default on Apple silicon)
#   TETHER_GPU=cpu     CPU only
#   unset              Metal on Apple silicon, else CPU; on x86-64 the CPU build names AVX/AVX2/FMA/F16C
#                      explicitly, because the native build emits AMX instructions some VMs do not enable.
# An explicit CMAKE_ARGS wins over all of this.
# shellcheck shell=bash

build_flavour() {
    local gpu=${TETHER_GPU:-}
    if [ -z "$gpu" ]; then
        if [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then gpu=metal; else gpu=cpu; fi
    fi
    case "$gpu" in
        cuda|metal|cpu) echo "$gpu" ;;
        *) echo "TETHER_GPU must be cuda, metal or cpu (got '$gpu')" >&2; return 2 ;;
    esac
}

cmake_flags() {
    if [ -n "${CMAKE_ARGS:-}" ]; then
        echo "$CMAKE_ARGS"
        return
    fi
    local flavour
    flavour=$(build_flavour) || return  # a bad TETHER_GPU must not fall through to a CPU build
    case "$flavour" in
        cuda) echo "-DGGML_CUDA=ON" ;;
        metal) echo "-DGGML_METAL=ON" ;;
        cpu)
            case "$(uname -m)" in
                x86_64|amd64) echo "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" ;;
                *) echo "" ;;
            esac ;;
    esac
}

# One line naming a llama-cpp-python build: the flavour and the flags it was configured with.
build_id() {
    local flavour flags
    flavour=$(build_flavour) || return
    flags=$(cmake_flags) || return
    echo "$flavour $flags"
}

# What setup.sh does about llama-cpp-python. pip caches the wheel it built without regard to
# CMAKE_ARGS, so only the default build (no TETHER_GPU, no CMAKE_ARGS) may come from or go to that
# cache; any other build is made with --no-cache-dir. Arguments: whether the pinned version is
# installed (yes|no) and the build id recorded next to it (empty: none). Prints one of
#   skip      installed as wanted
#   adopt     installed before builds were recorded, and the default is wanted: record it, build nothing
#   install   not installed, default wanted: pip install (its cached wheel may serve)
#   build     not installed, another build wanted: pip install --no-cache-dir
#   rebuild   installed as another build: pip install --no-cache-dir --force-reinstall --no-deps
llama_install_action() {
    local installed=$1 recorded=$2 wanted default
    wanted=$(build_id) || return
    default=$(TETHER_GPU='' CMAKE_ARGS='' build_id) || return
    if [ "$installed" != yes ]; then
        if [ "$wanted" = "$default" ]; then echo install; else echo build; fi
    elif [ "$recorded" = "$wanted" ]; then
        echo skip
    elif [ -z "$recorded" ] && [ "$wanted" = "$default" ]; then
        echo adopt
    else
        echo rebuild
    fi
}

# pip's extra arguments for an action of llama_install_action.
llama_pip_flags() {
    case "$1" in
        install) echo "" ;;
        build) echo "--no-cache-dir" ;;
        rebuild) echo "--no-cache-dir --force-reinstall --no-deps" ;;
        *) echo "llama_pip_flags: nothing to install for '$1'" >&2; return 2 ;;
    esac
}
