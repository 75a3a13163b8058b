#!/usr/bin/env bash
# autotune's measurements on a lent GPU machine (H100 or H200; python 3.12, torch 2.11,
# transformers 5.17; no lmdeploy, no optuna, no fonts, no network). Every mode prints the card
# it ran on first: results files name that card, never the kind that was asked for.
#
#   bash bench/gpu/fetch_wheels.sh            # once, where the registries answer: fills .whl/
#   bash bench/gpu/run.sh setup               # install the wheels, show the machine, build the
#                                             # dummy checkpoint and the evaluation pool
#   bash bench/gpu/run.sh exec CMD ARGS       # CMD with the wheels installed (autotune ... too)
#   bash bench/gpu/run.sh study [BUDGET]      # the default space with --dummy-weights to BUDGET
#                                             # of trial time (8m), cut with SIGINT before the
#                                             # call's $CALL_S (575 s); issued again on the warm
#                                             # machine it resumes the same study
#   bash bench/gpu/run.sh verify              # relaunch the study's recommendation, compare
#                                             # (--tolerance 0.05), then `best`
#   bash bench/gpu/run.sh sides               # the recommendation's launch, 64 in flight, at
#                                             # every image side the space searches (grid.py)
#   bash bench/gpu/run.sh second-study [BUDGET]  # a second, fresh study on the same machine:
#                                             # the answers cache of the first is warm
#   bash bench/gpu/run.sh grid                # the exhaustive LMDeploy grid, engines reused
#   bash bench/gpu/run.sh repeat              # fresh launches of one configuration ($LAUNCH)
#   bash bench/gpu/run.sh defaults            # fresh launches of LMDeploy's defaults against
#                                             # the study's baseline trial (collect_study.py)
#   bash bench/gpu/run.sh oom                 # trials that cannot fit fail as oom
#   bash bench/gpu/run.sh two-gpus            # 2 GPUs: the same trials on --gpus 0 and 0,1,
#                                             # then a tensor-parallel trial
#   bash bench/gpu/run.sh fp8-and-cache       # FP8 vs bf16, prefix cache off vs on
#   bash bench/gpu/run.sh guide-recipe        # the default space beside the guide's recipe
#   bash bench/gpu/run.sh accuracy-through-lmdeploy  # real (tiny) weights: the reader through
#                                             # LMDeploy judged by the floor, against the
#                                             # in-process engine at the same sides
#   bash bench/gpu/run.sh train               # the test model's recipe, in calls issued back
#                                             # to back (state in /tmp while the machine is warm)
#
# Results go to $OUT (default bench/out/); the study database of the calls before is kept in
# $KEEP (/tmp/autotune-keep) on a warm machine, else read from bench/carry/$STUDY.db.gz.
# The device tool carries at most 64 MiB: carry `.snap` (`git archive HEAD` without the tiny
# model's checkpoint, which the GPU runs never read) and `.whl`.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-study}
OUT=${OUT:-bench/out}
KEEP=${KEEP:-/tmp/autotune-keep}
CALL_S=${CALL_S:-575}
SITE=${AUTOTUNE_SITE:-/tmp/autotune-site}          # wheels install here, not into the image
export AUTOTUNE_DUMMY_DIR=${AUTOTUNE_DUMMY_DIR:-/tmp/autotune-dummy}   # 4.3 GB checkpoint
STUDY=${STUDY:-gpu-default}
# Studies live in $KEEP, beside their answers cache (answers/), so a later call on the warm
# machine finds both; each mode copies the database into $OUT to bring it back.
DB="sqlite:///$KEEP/$STUDY.db"
LAUNCH=${LAUNCH:-'{"backend": "lmdeploy", "dtype": "bfloat16", "compile_mode": "default", "kv_cache_fraction": 0.3}'}
SIDES_REQUEST='{"batch_size": [64], "image_max_side": [512, 768, 1024, null]}'
STARTED=$SECONDS
mkdir -p "$OUT" "$KEEP"

if [ ! -f "$SITE/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl || { echo "wheel install failed"; exit 1; }
  touch "$SITE/.installed"
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"        # the `lmdeploy` command the server runner starts
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# Multi-GPU machines of this workplace: NVLink multicast stays off (device/KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
autotune() { python3 -m autotune.cli "$@"; }
left_s() { echo $(( CALL_S - (SECONDS - STARTED) )); }
tables_off() { grep -v "^[│┃┏┡└ ]"; }

machine() {
  # The host CPU matters: LMDeploy's PyTorch engine schedules on it (15% between hosts).
  echo "host: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total,clocks.max.sm \
    --format=csv,noheader | sed 's/^/card: /'
}

setup() {
  machine
  python3 -c "import lmdeploy, optuna; print('lmdeploy', lmdeploy.__version__, 'optuna', optuna.__version__)"
  python3 - <<'EOF' 2>&1 | tail -1
import time
from autotune.checkpoints.dummy import dummy_checkpoint
started = time.perf_counter()
path = dummy_checkpoint("Qwen/Qwen3-VL-2B-Instruct", device="cuda")
print(f"dummy checkpoint ready in {time.perf_counter() - started:.1f} s: {path}")
EOF
  local started=$SECONDS
  autotune evalset show ocr-caption-3k >"$OUT/pool.txt" 2>&1 || { tail -3 "$OUT/pool.txt"; exit 1; }
  echo "evaluation pool ocr-caption-3k ready in $((SECONDS - started)) s"
}

restore() {  # the study database of the calls before: on this machine, else carried
  if [ ! -f "$KEEP/$STUDY.db" ] && [ -f "bench/carry/$STUDY.db.gz" ]; then
    gunzip -c "bench/carry/$STUDY.db.gz" >"$KEEP/$STUDY.db"
  fi
}

bring_back() { [ -f "$KEEP/$STUDY.db" ] && cp "$KEEP/$STUDY.db" "$OUT/"; }

best() {
  autotune best --study "$STUDY" --storage "$DB" --json >"$OUT/best.json" 2>&1
  autotune best --study "$STUDY" --storage "$DB" 2>&1 | tee "$OUT/best.txt" | tables_off | head -40
}

study() {  # start or resume the study to BUDGET of trial time within this call
  local budget=${1:-8m}
  restore
  timeout -s INT -k 20 "$(left_s)" python3 -m autotune.cli run --space default --dummy-weights \
    --budget "$budget" --study "$STUDY" --storage "$DB" 2>&1 | tee -a "$OUT/$STUDY.log" | tables_off
  echo "study exit status ${PIPESTATUS[0]} after $((SECONDS - STARTED)) s"
  best
  bring_back
}

verify() {
  # A fresh launch of the recommended command, measured again: throughput must agree within 5%.
  restore
  autotune verify --study "$STUDY" --storage "$DB" --json --tolerance 0.05 \
    >"$OUT/verify.json" 2>"$OUT/verify.log"
  echo "verify exit status $?"
  python3 -c "import json; r = json.load(open('$OUT/verify.json')); print('verify passed:', r['passed'], r['failure']); [print(' ', c['metric'], c['recorded'], c['measured'], c['passed']) for c in r['checks']]"
  best
  bring_back
}

sides() {  # the recommendation's launch at 64 in flight over every searched image side
  local launch
  restore
  autotune best --study "$STUDY" --storage "$DB" --json >"$OUT/best.json" 2>&1
  launch=$(python3 -c "import json; c = json.load(open('$OUT/best.json'))['recommended']['config']; print(json.dumps({k: c[k] for k in ('backend', 'dtype', 'compile_mode', 'kv_cache_fraction')}))")
  echo "sides of the launch: $launch"
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name sides \
    --min-launch-s 100 --deadline-s "$(left_s)" --launch "$launch" --request "$SIDES_REQUEST" \
    2>&1 | tee "$OUT/sides.log" | grep -v "^  "
}

grid() {
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" \
    --deadline-s "$(left_s)" \
    --launch '{"backend": "lmdeploy", "dtype": "bfloat16", "compile_mode": "default", "kv_cache_fraction": 0.3}' \
    --launch '{"backend": "lmdeploy", "dtype": "bfloat16", "compile_mode": "none", "kv_cache_fraction": 0.3}' \
    --request '{"batch_size": [1, 16, 64], "image_max_side": [null, 768]}' 2>&1 | tee "$OUT/grid.log"
}

repeat() {  # fresh launches of $LAUNCH at 64 in flight until the call's time is spent
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name repeat \
    --repeat "${REPEATS:-3}" --launch "$LAUNCH" --request '{"batch_size": [64]}' \
    --deadline-s "$(left_s)" --min-launch-s 110 2>&1 | tee "$OUT/repeat.log" | grep -v "^  "
  python3 bench/gpu/collect_study.py --repeat "$OUT/repeat.json" \
    --json "$OUT/repeat-summary.json" --markdown "$OUT/repeat-summary.md" | head -30
}

defaults() {  # fresh launches of LMDeploy's defaults beside the study's baseline trial
  restore
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name defaults \
    --repeat "${REPEATS:-2}" --launch '{"backend": "lmdeploy", "engine_defaults": true}' \
    --request '{"batch_size": [64]}' --deadline-s "$(left_s)" --min-launch-s 110 2>&1 \
    | tee "$OUT/defaults.log" | grep -v "^  "
  python3 bench/gpu/collect_study.py --study "$KEEP/$STUDY.db" --defaults "$OUT/defaults.json" \
    --json "$OUT/baseline.json" --markdown "$OUT/baseline.md" && cat "$OUT/baseline.md"
  bring_back
}

oom() {
  # Full-HD images, so a batch of 256 in transformers cannot fit.
  python3 bench/gpu/bench_evalset.py /tmp/bench-evalset >/dev/null
  autotune run --space bench/gpu/oom.yaml --dummy-weights --evalset /tmp/bench-evalset \
    --study gpu-oom --storage "sqlite:///$OUT/gpu-oom.db" 2>&1 | tee "$OUT/oom.log"
  nvidia-smi --query-gpu=index,memory.used --format=csv | tee -a "$OUT/oom.log"
  autotune best --study gpu-oom --storage "sqlite:///$OUT/gpu-oom.db" --json >"$OUT/oom-best.json"
}

two_gpus() {
  # Fresh studies each time: the comparison needs both runs to measure all six trials.
  rm -f "$OUT"/two-gpus-*.journal*
  local t0 t1 t2
  t0=$(date +%s)
  autotune run --space bench/gpu/two-gpus.yaml --dummy-weights --gpus 0 --study two-gpus-1 \
    --storage "$OUT/two-gpus-1.journal" 2>&1 | tee "$OUT/two-gpus-1.log" | tail -3
  t1=$(date +%s)
  autotune run --space bench/gpu/two-gpus.yaml --dummy-weights --gpus 0,1 --study two-gpus-2 \
    --storage "$OUT/two-gpus-2.journal" 2>&1 | tee "$OUT/two-gpus-2.log" | tail -3
  t2=$(date +%s)
  echo "{\"one_gpu_s\": $((t1 - t0)), \"two_gpus_s\": $((t2 - t1))}" >"$OUT/two-gpus-walls.json"
  autotune run --space bench/gpu/tensor-parallel.yaml --dummy-weights --gpus 0,1 \
    --study tensor-parallel --storage "$OUT/tensor-parallel.journal" 2>&1 \
    | tee "$OUT/tensor-parallel.log" | tail -3
  python3 bench/gpu/collect_two_gpus.py "$OUT" | tee "$OUT/two-gpus-summary.json" | head -20
}

fp8_and_cache() {
  # The FP8 dummy checkpoint is built on first use (a few minutes on the CPU side of the host).
  autotune run --space bench/gpu/fp8-and-cache.yaml --dummy-weights --study fp8-and-cache \
    --storage "sqlite:///$OUT/fp8-and-cache.db" 2>&1 | tee "$OUT/fp8-and-cache.log" | tail -12
  python3 bench/gpu/collect_fp8_and_cache.py "$OUT" >/dev/null && head -60 "$OUT/fp8-and-cache.json"
}

guide_recipe() {
  autotune run --space default --dummy-weights --budget "${BUDGET:-7m}" \
    --study guide-recipe --storage "sqlite:///$OUT/guide-recipe.db" 2>&1 \
    | tee "$OUT/guide-recipe.log" | tail -5
  autotune best --study guide-recipe --storage "sqlite:///$OUT/guide-recipe.db" \
    2>&1 | tee "$OUT/guide-recipe-best.txt"
}

accuracy_through_lmdeploy() {
  # No dummy checkpoint: the trained tiny reader answers. The study (reference in process, the
  # rest through `lmdeploy serve api_server`), then the in-process engine at each searched side
  # on the same GPU, so LMDeploy's answers are compared with it item by item, side by side.
  local side override
  timeout 300 python3 -m autotune.cli run --space bench/gpu/smoke-lmdeploy.yaml --trials 5 \
    --storage "sqlite:///$OUT/through-lmdeploy.db" --study through-lmdeploy 2>&1 \
    | tee "$OUT/through-lmdeploy.log"
  mkdir -p "$OUT/inprocess"
  for side in full 32 48 64; do
    override=()
    [ "$side" = full ] || override=(--param "image_max_side=$side")
    timeout 90 python3 -m autotune.cli eval --space bench/gpu/smoke-lmdeploy.yaml --json \
      ${override[@]+"${override[@]}"} >"$OUT/inprocess/eval-$side.json" \
      2>>"$OUT/through-lmdeploy.log" || echo "eval at side $side failed"
  done
  python3 bench/gpu/collect_accuracy_through_lmdeploy.py \
    --storage "sqlite:///$OUT/through-lmdeploy.db" --study through-lmdeploy \
    --out "$OUT" --inprocess "$OUT/inprocess"
}

train() {
  local state=${TRAIN_STATE:-/tmp/train-state} model=/tmp/tiny-qwen3-vl status
  python3 -m tools.train_test_model --out "$model" --overwrite --steps "${TRAIN_STEPS:-1500}" \
    --state "$state" --stop-after "${TRAIN_STOP_AFTER:-540}" --eval-dtypes "" \
    --log-json "$OUT/train_log.json" 2>&1 | tee -a "$OUT/train.log"
  status=${PIPESTATUS[0]}
  if [ "$status" -eq 0 ]; then
    # $OUT returns files of at most 16 MiB: the 36 MB checkpoint comes back in parts.
    (cd "$model" && tar cf - . ) | split -b 15m - "$OUT/checkpoint.tar.part-"
    echo "trained; reassemble with: cat checkpoint.tar.part-* | tar xf - -C models/tiny-qwen3-vl"
  elif [ "$status" -eq 3 ]; then
    echo "paused; issue the same call again at once (the state lives in $state on this machine)"
  fi
}

case "$MODE" in
  setup) setup ;;
  exec) shift; "$@" ;;
  study) setup; shift; study "${1:-8m}" ;;
  verify) machine; verify ;;
  sides) machine; sides ;;
  second-study) machine; STUDY=${STUDY}-second; DB="sqlite:///$KEEP/$STUDY.db"; shift; study "${1:-8m}" ;;
  grid) setup >/dev/null; grid ;;
  repeat) setup; repeat ;;
  defaults) setup >/dev/null; defaults ;;
  oom) setup; oom ;;
  two-gpus) setup; two_gpus ;;
  fp8-and-cache) setup; fp8_and_cache ;;
  guide-recipe) setup; guide_recipe ;;
  accuracy-through-lmdeploy) machine; accuracy_through_lmdeploy ;;
  train) machine; train ;;
  *)
    echo "usage: $0 setup|exec CMD|study [BUDGET]|verify|sides|second-study [BUDGET]|grid|repeat|defaults|oom|two-gpus|fp8-and-cache|guide-recipe|accuracy-through-lmdeploy|train" >&2
    exit 2
    ;;
esac
