#!/usr/bin/env bash
# Installs what `tether eval --suite bfcl:...` needs into ./.venv, and nothing more.
#
# bfcl-eval is pinned and installed with --no-deps: its declared dependencies pull every vendor SDK
# (boto3, cohere, google-genai, mistralai, qwen-agent, sentence-transformers + torch, faiss, ...), none
# of which the AST categories use. The modules tether imports (bfcl_eval.utils, model_handler.utils,
# the AST checker; see tether/evals/bfcl_deps.py) need only the packages below; the tree-sitter
# versions are the ones bfcl-eval pins (its Java/JS parsers are loaded when model_handler.utils is
# imported, and newer tree-sitter releases changed the Language() constructor); mpmath is what the
# multi-turn MathAPI backend imports.
# Idempotent. Usage: scripts/install_bfcl.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${1:-.venv/bin/python}
BFCL_VERSION=2026.3.23
export PIP_DISABLE_PIP_VERSION_CHECK=1

have() { "$PY" - "$@" <<'PYEOF'
import importlib.metadata as m, sys
try:
    sys.exit(0 if m.version(sys.argv[1]) == sys.argv[2] else 1)
except m.PackageNotFoundError:
    sys.exit(1)
PYEOF
}

if ! have bfcl-eval "$BFCL_VERSION"; then
  "$PY" -m pip install -q --no-deps "bfcl-eval==$BFCL_VERSION"
fi
"$PY" -m pip install -q \
  "tree_sitter==0.21.3" "tree-sitter-java==0.21.0" "tree-sitter-javascript==0.21.4" \
  "tenacity>=8.5.0" "filelock>=3.12" "mpmath==1.3.0"
# Check: the data, the tool conversion and the checker load, and a ground-truth answer scores.
"$PY" - <<'PYEOF'
from tether.evals import bfcl
item = bfcl.load_items("simple_python")[0]
assert bfcl.score_message(item, bfcl.ground_truth_message(item)).correct
print(f"bfcl-eval ready: {item.id} scores with BFCL's AST checker")
PYEOF
