#!/usr/bin/env bash
# Run autotune's GPU measurements on an offline H200 machine (python 3.12, torch 2.11,
# transformers 5.17; no lmdeploy, no optuna, no network). Adapt the variables below.
#
#   bash bench/gpu/fetch_wheels.sh           # once, on a machine with network: fills .whl/
#   bash bench/gpu/run_h200.sh bench          # on the GPU: side-by-side table (~6 min)
#   bash bench/gpu/run_h200.sh rows ROW...    # on the GPU: only these transformers rows
#   bash bench/gpu/run_h200.sh study [N]      # on the GPU: a short dummy-weights study (~5 min)
#   python3 bench/gpu/collect_results.py ...  # here: merge the outputs into bench/results/
#
# Results go to $OUT (default bench/out/); copy them into bench/results/ and commit.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-bench}
OUT=${OUT:-bench/out}
SITE=${AUTOTUNE_SITE:-/tmp/autotune-site}          # wheels install here, not into the image
export AUTOTUNE_DUMMY_DIR=${AUTOTUNE_DUMMY_DIR:-/tmp/autotune-dummy}   # 4.3 GB checkpoint
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

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
python3 -c "import lmdeploy.serve.openai.api_server, lmdeploy; print('lmdeploy', lmdeploy.__version__, 'imports')" \
  2>&1 | tail -3

case "$MODE" in
  bench)
    python3 bench/gpu/side_by_side.py --out "$OUT" --deadline-s "${BENCH_DEADLINE_S:-360}" \
      2>&1 | tee "$OUT/bench.log"
    ;;
  install)
    ;;
  rows)
    shift
    python3 bench/gpu/side_by_side.py --out "$OUT" --deadline-s "${BENCH_DEADLINE_S:-360}" \
      --no-server --rows "$@" 2>&1 | tee "$OUT/bench.log"
    ;;
  study)
    TRIALS=${2:-5}
    STUDY=${STUDY:-h200-quick}
    DB="sqlite:///$OUT/$STUDY.db"
    # One full-HD image size for every request: static-cache compile then compiles once per
    # batch size instead of once per image shape (the bundled set has 60+ sizes).
    python3 bench/gpu/bench_evalset.py /tmp/bench-evalset >/dev/null
    python3 -m autotune.cli run --space search_spaces/default-gpu-quick.yaml --dummy-weights \
      --evalset /tmp/bench-evalset --trials "$TRIALS" --timeout "${STUDY_TIMEOUT_S:-180}" \
      --study "$STUDY" --storage "$DB" 2>&1 | tee "$OUT/study.log"
    python3 -m autotune.cli best --study "$STUDY" --storage "$DB" >"$OUT/best.txt" 2>&1
    python3 -m autotune.cli best --study "$STUDY" --storage "$DB" --json >"$OUT/best.json" 2>&1
    python3 -m autotune.cli export --study "$STUDY" --storage "$DB" --format lmdeploy \
      >"$OUT/export-lmdeploy.txt" 2>&1
    python3 -m autotune.cli export --study "$STUDY" --storage "$DB" --format lmdeploy --json \
      >"$OUT/export-lmdeploy.json" 2>&1
    cat "$OUT/best.txt" "$OUT/export-lmdeploy.txt"
    ;;
  *)
    echo "usage: $0 install|bench|rows ROW...|study [TRIALS]" >&2
    exit 2
    ;;
esac
