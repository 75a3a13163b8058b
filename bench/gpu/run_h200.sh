#!/usr/bin/env bash
# Run autotune's GPU measurements on an offline H200 machine (python 3.12, torch 2.11,
# transformers 5.17; no lmdeploy, no optuna, no network). Adapt the variables below.
#
#   bash bench/gpu/fetch_wheels.sh             # once, on a machine with network: fills .whl/
#   bash bench/gpu/run_h200.sh setup           # on the GPU: install the wheels, build dummy weights
#   bash bench/gpu/run_h200.sh exec CMD ARGS   # CMD with the wheels installed (autotune ... too)
#   bash bench/gpu/run_h200.sh study [BUDGET] [TIMEOUT_S]
#                                              # `autotune run --space default --dummy-weights
#                                              # --budget BUDGET` (9m); resumes $RESUME_DB if set
#   bash bench/gpu/run_h200.sh grid            # the exhaustive LMDeploy grid, engines reused
#   bash bench/gpu/run_h200.sh verify          # relaunch the study's recommendation, compare
#   bash bench/gpu/run_h200.sh issue10-a       # 2 GPUs: grid on GPU 1 beside the study on GPU 0
#   bash bench/gpu/run_h200.sh issue10-b       # the study resumed to its budget, then verify
#   bash bench/gpu/run_h200.sh oom             # trials that cannot fit fail as oom (issue 14)
#   bash bench/gpu/run_h200.sh issue11         # 2 GPUs: the same 6 trials on --gpus 0 and on
#                                              # --gpus 0,1 (wall times), then a tp-2 trial
#   bash bench/gpu/run_h200.sh issue12         # FP8 vs bf16 and prefix cache off vs on, side
#                                              # by side (bench/gpu/issue12.yaml), ~6 min
#   bash bench/gpu/run_h200.sh issue12-fp8     # its bf16 reference and FP8 trials only, ~6 min
#   bash bench/gpu/run_h200.sh issue12-default # the default space (guide's recipe, reference,
#                                              # tuned recommendation) for 7 min, then collect
#   bash bench/gpu/run_h200.sh issue17-a       # issue 17, call 1 of 3 (~5 min): the default
#                                              # study, --budget $ISSUE17_BUDGET (6m30s); its
#                                              # database is kept in /tmp/issue17 for the next
#   bash bench/gpu/run_h200.sh issue17-b       # call 2 (~9 min), issued at once so the machine
#                                              # is still warm (else it reads the database from
#                                              # bench/carry/*.db.gz): the study resumed to
#                                              # $ISSUE17_BUDGET_B (9m), then verify
#   bash bench/gpu/run_h200.sh issue17-c       # call 3 (~6 min): fresh launches of
#                                              # lmdeploy-graphs (grid.py --repeat) until the
#                                              # call's 580 s are spent; then
#                                              # bench/gpu/collect_issue17.py sums it all up
#   bash bench/gpu/run_h200.sh issue17-d       # one call (~10 min): three fresh launches of
#                                              # lmdeploy-graphs with spread answer lengths
#   bash bench/gpu/run_h200.sh issue17-more    # one call (~9 min) at once after issue17-a: the
#                                              # study resumed to $ISSUE17_BUDGET_B (15m)
#   bash bench/gpu/run_h200.sh issue17-e       # one call (~10 min) after the study ran to its
#                                              # budget: verify, then the grid around it
#   bash bench/gpu/run_h200.sh train           # the test model's recipe on a GPU; it trains
#                                              # on 2 CPU cores in about 30 min (issue 28):
#                                              # run it in calls issued back to back (the state
#                                              # stays in /tmp while the machine is warm); the
#                                              # call that finishes leaves the checkpoint in
#                                              # $OUT as 15 MB parts: cat part-* > model.safetensors
#   bash bench/gpu/run_h200.sh issue29-a       # issue 29, call 1 (~9.5 min): setup shown, the
#                                              # default study to $I29_BUDGET (7m) of trial time
#   bash bench/gpu/run_h200.sh issue29-b       # call 2, at once: the study resumed to
#                                              # $I29_BUDGET (15m; 22m, 30m in later calls)
#   bash bench/gpu/run_h200.sh issue29-c       # call 3: verify, then a grid around the
#                                              # recommendation's launch until the call ends
#   bash bench/gpu/run_h200.sh issue42-a       # issue 42, call 1 (~9.5 min): setup shown, a
#                                              # default study of $I42_BUDGET (8m) from scratch
#   bash bench/gpu/run_h200.sh issue42-b       # call 2, at once: the recommendation's launch,
#                                              # 64 in flight x every searched image side
#   bash bench/gpu/run_h200.sh issue42-c       # call 3: verify --tolerance 0.05, then `best`
#   bash bench/gpu/run_h200.sh issue42-more    # a later call: the same study resumed to
#                                              # $I42_BUDGET (30m) of trial time
#   bash bench/gpu/run_h200.sh issue42-verify-grid  # call 2 instead of -b and -c, at once
#                                              # after -a (~9.5 min): verify, then the grid
#                                              # in what is left of the call
#   bash bench/gpu/run_h200.sh issue38         # one call (~6 min), real weights: the reader
#                                              # through LMDeploy judged by the floor, the
#                                              # in-process engine's answers at the same sides,
#                                              # then collect_issue38.py compares them. Carry
#                                              # .whl; move evalsets/ocr-caption/images aside
#                                              # (not model.safetensors) to fit 64 MiB
#   python3 bench/gpu/collect_issue10.py ...   # here: merge the outputs into bench/results/
#
# Results go to $OUT (default bench/out/); copy them into bench/results/ and commit.
#
# The device tool carries at most 64 MiB: the tracked tree (41 MB, 34 MB of it the tiny test
# model's checkpoint) and .whl/ (23 MB) are just over it. The GPU runs read only the tiny
# model's tokenizer files, so move models/tiny-qwen3-vl/model.safetensors aside for the calls
# and back afterwards (the tests need it).
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-study}
OUT=${OUT:-bench/out}
SITE=${AUTOTUNE_SITE:-/tmp/autotune-site}          # wheels install here, not into the image
export AUTOTUNE_DUMMY_DIR=${AUTOTUNE_DUMMY_DIR:-/tmp/autotune-dummy}   # 4.3 GB checkpoint
STUDY=${STUDY:-h200-default}
DB="sqlite:///$OUT/$STUDY.db"
mkdir -p "$OUT"

if [ ! -f "$SITE/.installed" ]; then
  started=$(date +%s)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl || { echo "wheel install failed"; exit 1; }
  touch "$SITE/.installed"
  echo "installed $(ls .whl/*.whl | wc -l) wheels in $(( $(date +%s) - started )) s"
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"        # the `lmdeploy` command the server runner starts
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# Multi-GPU machines of this workplace: NVLink multicast stays off (device/KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
autotune() { python3 -m autotune.cli "$@"; }
# Pin a job to a set of cores where taskset exists (two jobs side by side on one host).
pinned() { local cores=$1; shift; if command -v taskset >/dev/null; then taskset -c "$cores" "$@"; else "$@"; fi; }

setup() {
  # The host CPU matters: LMDeploy's PyTorch engine schedules on it (issue 17: 15% between hosts).
  echo "host: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total,clocks.max.sm \
    --format=csv
  python3 -c "import lmdeploy, optuna; print('lmdeploy', lmdeploy.__version__, 'optuna', optuna.__version__)"
  python3 - <<'EOF' 2>&1 | tail -2
import time
from autotune.checkpoints.dummy import dummy_checkpoint
started = time.perf_counter()
path = dummy_checkpoint("Qwen/Qwen3-VL-2B-Instruct", device="cuda")
print(f"dummy checkpoint ready in {time.perf_counter() - started:.1f} s: {path}")
EOF
}

study() {
  local budget=${1:-9m} timeout=${2:-}
  if [ -n "${RESUME_DB:-}" ] && [ ! -f "$OUT/$STUDY.db" ]; then
    cp "$RESUME_DB" "$OUT/$STUDY.db"
  fi
  autotune run --space default --dummy-weights --budget "$budget" \
    ${timeout:+--timeout "$timeout"} --study "$STUDY" --storage "$DB" 2>&1 | tee -a "$OUT/study.log"
  autotune best --study "$STUDY" --storage "$DB" >"$OUT/best.txt" 2>&1
  autotune best --study "$STUDY" --storage "$DB" --json >"$OUT/best.json" 2>&1
  autotune export --study "$STUDY" --storage "$DB" --json >"$OUT/export.json" 2>&1
  cat "$OUT/best.txt"
}

grid() {
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" \
    --deadline-s "${GRID_DEADLINE_S:-480}" \
    --launch '{"backend": "lmdeploy", "dtype": "bfloat16", "compile_mode": "default", "kv_cache_fraction": 0.3}' \
    --launch '{"backend": "lmdeploy", "dtype": "bfloat16", "compile_mode": "none", "kv_cache_fraction": 0.3}' \
    --request '{"batch_size": [1, 16, 64], "image_max_side": [null, 768]}' 2>&1 | tee "$OUT/grid.log"
}

verify() {
  # A fresh launch of the recommended command, measured again: throughput must agree within
  # 5% (--tolerance 0.05: worse by more fails; the JSON keeps the exact difference).
  autotune verify --study "$STUDY" --storage "$DB" --json --tolerance 0.05 \
    >"$OUT/verify.json" 2>"$OUT/verify.log"
  echo "verify exit status $?"
  python3 -c "import json; r = json.load(open('$OUT/verify.json')); print('verify passed:', r['passed'], r['failure']); [print(' ', c['metric'], c['recorded'], c['measured'], c['passed']) for c in r['checks']]"
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

oom() {
  # Full-HD images, so a batch of 256 in transformers cannot fit.
  python3 bench/gpu/bench_evalset.py /tmp/bench-evalset >/dev/null
  autotune run --space bench/gpu/oom.yaml --dummy-weights --evalset /tmp/bench-evalset \
    --study h200-oom --storage "sqlite:///$OUT/h200-oom.db" 2>&1 | tee "$OUT/oom.log"
  nvidia-smi --query-gpu=index,memory.used --format=csv | tee -a "$OUT/oom.log"
  autotune best --study h200-oom --storage "sqlite:///$OUT/h200-oom.db" --json >"$OUT/oom-best.json"
}

issue11() {
  # Fresh studies each time: the comparison needs both runs to measure all six trials.
  rm -f "$OUT"/issue11-*.journal*
  local t0 t1 t2
  t0=$(date +%s)
  autotune run --space bench/gpu/issue11.yaml --dummy-weights --gpus 0 --study issue11-1gpu \
    --storage "$OUT/issue11-1gpu.journal" 2>&1 | tee "$OUT/issue11-1gpu.log" | tail -3
  t1=$(date +%s)
  autotune run --space bench/gpu/issue11.yaml --dummy-weights --gpus 0,1 --study issue11-2gpu \
    --storage "$OUT/issue11-2gpu.journal" 2>&1 | tee "$OUT/issue11-2gpu.log" | tail -3
  t2=$(date +%s)
  echo "{\"one_gpu_s\": $((t1 - t0)), \"two_gpus_s\": $((t2 - t1))}" >"$OUT/issue11-walls.json"
  autotune run --space bench/gpu/issue11-tp.yaml --dummy-weights --gpus 0,1 --study issue11-tp \
    --storage "$OUT/issue11-tp.journal" 2>&1 | tee "$OUT/issue11-tp.log" | tail -3
  python3 bench/gpu/collect_issue11.py "$OUT" | tee "$OUT/issue11-summary.json" | head -20
}

issue12() {
  # The FP8 dummy checkpoint is built on first use (a few minutes on the CPU side of the host).
  autotune run --space bench/gpu/issue12.yaml --dummy-weights --study issue12 \
    --storage "sqlite:///$OUT/issue12.db" 2>&1 | tee "$OUT/issue12.log" | tail -12
  python3 bench/gpu/collect_issue12.py "$OUT" >/dev/null && cat "$OUT/issue12.json" | head -60
}

# The FP8 half of issue 12 again (bench/gpu/issue12-fp8.yaml): the bf16 reference and both FP8
# candidates, whose 5 s requests left 3 batch means and no interval at the 40 s window cap
# before the cap waited for an interval (autotune.measure.convergence).
issue12_fp8() {
  autotune run --space bench/gpu/issue12-fp8.yaml --dummy-weights --study issue12-fp8 \
    --storage "sqlite:///$OUT/issue12-fp8.db" 2>&1 | tee "$OUT/issue12-fp8.log" | grep "^\[\|^time"
}

issue12_default() {
  autotune run --space default --dummy-weights --budget "${ISSUE12_BUDGET:-7m}" \
    --study issue12-default --storage "sqlite:///$OUT/issue12-default.db" 2>&1 \
    | tee "$OUT/issue12-default.log" | tail -5
  autotune best --study issue12-default --storage "sqlite:///$OUT/issue12-default.db" \
    >"$OUT/issue12-default-best.txt" 2>&1
  cat "$OUT/issue12-default-best.txt"
  python3 bench/gpu/collect_issue12.py "$OUT" >/dev/null
}

# Issue 17: a study, a fresh relaunch of its recommendation, and the same configuration
# (LMDeploy, graphs, bf16, KV 0.3, concurrency 64, full-size images) in fresh launches.
ISSUE17_KEEP=/tmp/issue17
ISSUE17_STUDY=h200-issue17
REPEAT_LAUNCH='{"backend": "lmdeploy", "dtype": "bfloat16", "compile_mode": "default", "kv_cache_fraction": 0.3}'

issue17_a() {
  STUDY=$ISSUE17_STUDY DB="sqlite:///$OUT/$ISSUE17_STUDY.db" study "${ISSUE17_BUDGET:-6m30s}" >/dev/null
  mkdir -p "$ISSUE17_KEEP" && cp "$OUT/$ISSUE17_STUDY.db" "$ISSUE17_KEEP/"
  tail -4 "$OUT/study.log"; cat "$OUT/best.txt"
}

issue17_restore() {  # the study database of the call before: /tmp on a warm machine, else carried
  if [ -f "$ISSUE17_KEEP/$ISSUE17_STUDY.db" ]; then cp "$ISSUE17_KEEP/$ISSUE17_STUDY.db" "$OUT/"
  elif [ -f "bench/carry/$ISSUE17_STUDY.db.gz" ]; then  # gzipped: the wheels leave little room
    gunzip -c "bench/carry/$ISSUE17_STUDY.db.gz" >"$OUT/$ISSUE17_STUDY.db"
  else echo "no study database: run issue17-a first"; exit 1; fi
}

issue17_b() {
  issue17_restore
  STUDY=$ISSUE17_STUDY DB="sqlite:///$OUT/$ISSUE17_STUDY.db" study "${ISSUE17_BUDGET_B:-9m}" >/dev/null
  STUDY=$ISSUE17_STUDY DB="sqlite:///$OUT/$ISSUE17_STUDY.db" verify
  cp "$OUT/$ISSUE17_STUDY.db" "$OUT/verify.json" "$ISSUE17_KEEP/"
  grep -v "^[│┃┏┡└]" "$OUT/study.log" | tail -8
}

issue17_c() {
  local started=$SECONDS
  issue17_restore
  cp "$ISSUE17_KEEP/verify.json" "$OUT/" 2>/dev/null || cp bench/carry/verify.json "$OUT/"
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name repeat \
    --repeat "${ISSUE17_REPEATS:-2}" --launch "$REPEAT_LAUNCH" --request '{"batch_size": [64]}' \
    --deadline-s $(( ${ISSUE17_CALL_S:-580} - (SECONDS - started) )) --min-launch-s 170 \
    2>&1 | tee "$OUT/repeat.log" | grep -v "^  "
  python3 bench/gpu/collect_issue17.py --study "$OUT/$ISSUE17_STUDY.db" \
    --verify "$OUT/verify.json" --repeat "$OUT/repeat.json" \
    --json "$OUT/issue17.json" --markdown "$OUT/issue17.md" | head -30
}

issue17_d() {
  # Fresh launches of the same configuration with the default space's spread answer lengths
  # (workload.output_tokens_spread): do they agree within 3% where equal lengths did not?
  local started=$SECONDS
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name repeat-spread \
    --repeat "${ISSUE17_REPEATS:-3}" --launch "$REPEAT_LAUNCH" --request '{"batch_size": [64]}' \
    --deadline-s $(( ${ISSUE17_CALL_S:-585} - (SECONDS - started) )) --min-launch-s 110 \
    2>&1 | tee "$OUT/repeat-spread.log" | grep -v "^  "
  python3 bench/gpu/collect_issue17.py --repeat "$OUT/repeat-spread.json" \
    --json "$OUT/issue17-spread.json" --markdown "$OUT/issue17-spread.md" | head -30
}

issue17_more() {
  # The study of issue17-a resumed to $ISSUE17_BUDGET_B of trial time in one more call, kept
  # on the warm machine (and returned in $OUT) for the next call.
  issue17_restore
  STUDY=$ISSUE17_STUDY DB="sqlite:///$OUT/$ISSUE17_STUDY.db" \
    study "${ISSUE17_BUDGET_B:-15m}" "${ISSUE17_CALL_S:-540}" >/dev/null
  cp "$OUT/$ISSUE17_STUDY.db" "$ISSUE17_KEEP/"
  grep -v "^[│┃┏┡└]" "$OUT/study.log" | tail -12
}

issue17_e() {
  # The last call of a study resumed in calls (each trial now measures to +-3%, 3-4 minutes):
  # verify its recommendation, then the grid around it (graphs, concurrency 64, three image
  # sizes) in what is left of the call.
  local started=$SECONDS
  issue17_restore
  STUDY=$ISSUE17_STUDY DB="sqlite:///$OUT/$ISSUE17_STUDY.db" verify
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --min-launch-s 100 \
    --deadline-s $(( ${ISSUE17_CALL_S:-585} - (SECONDS - started) )) --launch "$REPEAT_LAUNCH" \
    --request '{"batch_size": [64], "image_max_side": [null, 768, 512]}' 2>&1 \
    | tee "$OUT/grid.log" | grep -v "^  "
}

# Issue 29: the default study resumed over calls issued back to back (the database stays in
# /tmp/issue29 while the machine is warm, else it is read from bench/carry/h200-i29.db.gz),
# then its recommendation relaunched and a grid around it on the same machine. Each study call
# is cut with SIGINT (a clean stop: the running trial is recorded as interrupted) before the
# device tool's 600 s limit.
I29_KEEP=/tmp/issue29
I29_STUDY=h200-i29
I29_DB="sqlite:///$OUT/$I29_STUDY.db"
I29_GRID_REQUEST=${I29_GRID_REQUEST:-'{"batch_size": [64, 32], "image_max_side": [512, 768, 1024, null]}'}

i29_restore() {
  if [ -f "$I29_KEEP/$I29_STUDY.db" ]; then cp "$I29_KEEP/$I29_STUDY.db" "$OUT/"
  elif [ -f "bench/carry/$I29_STUDY.db.gz" ]; then
    gunzip -c "bench/carry/$I29_STUDY.db.gz" >"$OUT/$I29_STUDY.db"
  fi
}

i29_study() {  # resume (or start) the study to BUDGET of trial time within this call
  local budget=$1 started=$2
  i29_restore
  local left=$(( ${I29_CALL_S:-580} - (SECONDS - started) ))
  timeout -s INT -k 20 "$left" python3 -m autotune.cli run --space default --dummy-weights \
    --budget "$budget" --study "$I29_STUDY" --storage "$I29_DB" 2>&1 | tee -a "$OUT/study.log" \
    | grep -v "^[│┃┏┡└ ]"
  echo "study exit status ${PIPESTATUS[0]}"
  mkdir -p "$I29_KEEP" && cp "$OUT/$I29_STUDY.db" "$I29_KEEP/"
  autotune best --study "$I29_STUDY" --storage "$I29_DB" --json >"$OUT/best.json" 2>&1
  autotune best --study "$I29_STUDY" --storage "$I29_DB" 2>&1 | tee "$OUT/best.txt" | head -40
}

i29_grid() {  # verify, then the recommendation's launch over concurrency x image side
  local started=$SECONDS launch
  i29_restore
  STUDY=$I29_STUDY DB=$I29_DB verify
  cp "$OUT/verify.json" "$I29_KEEP/" 2>/dev/null
  autotune best --study "$I29_STUDY" --storage "$I29_DB" --json >"$OUT/best.json" 2>&1
  launch=$(python3 -c "import json; c = json.load(open('$OUT/best.json'))['recommended']['config']; print(json.dumps({k: c[k] for k in ('backend', 'dtype', 'compile_mode', 'kv_cache_fraction')}))")
  echo "grid launch: $launch"
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name grid \
    --min-launch-s 100 --deadline-s $(( ${I29_CALL_S:-580} - (SECONDS - started) )) \
    --launch "$launch" --request "$I29_GRID_REQUEST" \
    2>&1 | tee "$OUT/grid.log" | grep -v "^  "
}

# Issue 42: a default study of $I42_BUDGET (8m) of trial time from scratch in call 1; call 2,
# at once: the recommendation's launch at 64 in flight over every image side the space
# searches (one fresh launch, grid.py); call 3: verify --tolerance 0.05. Same machine, same
# study database (kept in /tmp/issue42, returned in $OUT each call). Reuses the issue-29 calls.
I42_GRID_REQUEST='{"batch_size": [64], "image_max_side": [512, 768, 1024, null]}'
i42_use() { I29_KEEP=/tmp/issue42; I29_STUDY=h200-i42; I29_DB="sqlite:///$OUT/h200-i42.db"; }

i42_grid() {  # the recommendation's launch over every searched image side at 64 in flight
  local started=$SECONDS launch
  i29_restore
  autotune best --study "$I29_STUDY" --storage "$I29_DB" --json >"$OUT/best.json" 2>&1
  launch=$(python3 -c "import json; c = json.load(open('$OUT/best.json'))['recommended']['config']; print(json.dumps({k: c[k] for k in ('backend', 'dtype', 'compile_mode', 'kv_cache_fraction')}))")
  echo "grid launch: $launch"
  python3 bench/gpu/grid.py --space default --dummy-weights --out "$OUT" --name grid \
    --min-launch-s 100 --deadline-s $(( ${I42_CALL_S:-580} - (SECONDS - started) )) \
    --launch "$launch" --request "$I42_GRID_REQUEST" 2>&1 | tee "$OUT/grid.log" | grep -v "^  "
  cp "$OUT/grid.json" "$I29_KEEP/" 2>/dev/null
}

i42_verify() {
  i29_restore
  cp "$I29_KEEP/grid.json" "$OUT/" 2>/dev/null
  STUDY=$I29_STUDY DB=$I29_DB verify
  autotune best --study "$I29_STUDY" --storage "$I29_DB" 2>&1 | tee "$OUT/best.txt" | grep -v "^[│┃┏┡└ ]"
}

issue38() {
  # No dummy checkpoint: the trained tiny reader answers. The study (reference in process, the
  # rest through `lmdeploy serve api_server`), then the in-process engine at each searched side
  # on the same GPU, so LMDeploy's answers are compared with it item by item, side by side.
  local side override
  timeout 300 python3 -m autotune.cli run --space bench/gpu/smoke-lmdeploy.yaml --trials 5 \
    --storage "sqlite:///$OUT/issue38.db" --study issue38 2>&1 | tee "$OUT/study.log"
  mkdir -p "$OUT/inprocess"
  for side in full 32 48 64; do
    override=()
    [ "$side" = full ] || override=(--param "image_max_side=$side")
    timeout 90 python3 -m autotune.cli eval --space bench/gpu/smoke-lmdeploy.yaml --json ${override[@]+"${override[@]}"} \
      >"$OUT/inprocess/eval-$side.json" 2>>"$OUT/study.log" || echo "eval at side $side failed"
  done
  python3 bench/gpu/collect_issue38.py --storage "sqlite:///$OUT/issue38.db" --study issue38 \
    --out "$OUT" --inprocess "$OUT/inprocess"
}

case "$MODE" in
  setup) setup ;;
  # Any command in this environment (the wheels installed, PYTHONPATH set, `autotune` defined),
  # without the dummy checkpoint: issue 38 runs the trained tiny reader.
  exec) shift; "$@" ;;
  issue12) setup >/dev/null; issue12 ;;
  issue12-default) setup >/dev/null; issue12_default ;;
  issue12-fp8) setup; issue12_fp8 ;;
  train) train ;;
  issue17-a) setup; issue17_a ;;
  issue17-b) setup >/dev/null; issue17_b ;;
  issue17-c) setup >/dev/null; issue17_c ;;
  issue17-d) setup; issue17_d ;;
  issue17-more) setup >/dev/null; issue17_more ;;
  issue17-e) setup >/dev/null; issue17_e ;;
  issue29-a) i29_started=$SECONDS; setup; i29_study "${I29_BUDGET:-7m}" "$i29_started" ;;
  issue29-b) i29_started=$SECONDS; setup >/dev/null; i29_study "${I29_BUDGET:-15m}" "$i29_started" ;;
  issue29-c) setup >/dev/null; i29_grid ;;
  issue42-a) i42_started=$SECONDS; i42_use; setup; I29_CALL_S=${I42_CALL_S:-570} i29_study "${I42_BUDGET:-8m}" "$i42_started" ;;
  issue42-more)  # a later call: the same study resumed to $I42_BUDGET (30m) of trial time
    i42_started=$SECONDS; i42_use; setup >/dev/null
    I29_CALL_S=${I42_CALL_S:-575} i29_study "${I42_BUDGET:-30m}" "$i42_started" ;;
  issue42-b) i42_use; setup >/dev/null; i42_grid ;;
  issue42-c) i42_use; setup >/dev/null; i42_verify ;;
  issue42-verify-grid)
    i42_use; setup >/dev/null; i42_started=$SECONDS; i42_verify
    I42_CALL_S=$(( ${I42_CALL_S:-575} - (SECONDS - i42_started) )) i42_grid ;;
  issue38) issue38 ;;
  oom) setup >/dev/null; oom ;;
  issue11) setup; issue11 ;;
  study) setup >/dev/null; shift; study "$@" ;;
  grid) setup >/dev/null; grid ;;
  verify) setup >/dev/null; verify ;;
  issue10-a)
    setup
    # Half the cores each, so the two engines and their clients do not compete for CPU.
    (CUDA_VISIBLE_DEVICES=1 pinned 16-31 bash "$0" grid >/dev/null 2>&1) &
    CUDA_VISIBLE_DEVICES=0 pinned 0-15 bash "$0" study 9m "${STUDY_TIMEOUT_S:-380}" \
      >/dev/null 2>&1
    wait
    tail -5 "$OUT/grid.log"; tail -25 "$OUT/study.log"
    ;;
  issue10-b)
    setup
    CUDA_VISIBLE_DEVICES=0 study 9m "${STUDY_TIMEOUT_S:-}" >/dev/null
    CUDA_VISIBLE_DEVICES=0 verify
    tail -15 "$OUT/study.log"; cat "$OUT/best.txt"
    ;;
  *)
    echo "usage: $0 setup|study [BUDGET] [TIMEOUT_S]|grid|verify|issue10-a|issue10-b|oom|issue11|issue12|issue12-fp8|issue12-default|issue17-a|issue17-b|issue17-c|issue17-d|issue17-more|issue17-e|train" >&2
    exit 2
    ;;
esac
