#!/usr/bin/env bash
# Download the wheels the offline GPU machine lacks (LMDeploy 0.18 + its light dependencies,
# Optuna, and autotune's own), for CPython 3.12 on x86-64 Linux, into .whl/ (git-ignored).
# Run on a machine WITH network access, from the repo root; then carry .whl/ to the GPU
# machine and run bench/gpu/run.sh there.
#
# The lmdeploy wheel (106 MB) is repacked without its TurboMind binary
# (lmdeploy/turbomind/_turbomind*.so and lib64/libxgrammar.a, 105 MB of it): Qwen3-VL runs
# on LMDeploy's PyTorch engine only, and `--backend pytorch` never imports TurboMind
# (lmdeploy/cli/serve.py only calls autoget_backend for other backends). What is left is
# about 1.6 MB, so every wheel fits in one 64 MiB transfer.
#
# The machine already has torch 2.11, transformers 5.17, triton 3.6, numpy, pillow, httpx,
# rich, click, psutil, pyyaml, einops, safetensors, aiohttp, uvloop, prometheus-client,
# opencv and nvidia-ml-py; tilelang, ray and the CUDA-12 wheels lmdeploy lists are not needed
# for a single-GPU Qwen3-VL server (seen on the H200, see bench/results/).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-.whl}
mkdir -p "$DEST"

PLATFORMS=(manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64
  manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
  manylinux2014_x86_64 manylinux1_x86_64 any)
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done

PACKAGES=(
  # LMDeploy's PyTorch engine and its OpenAI server
  lmdeploy==0.18.0 fire==0.7.1 termcolor==3.3.0 mmengine-lite==0.10.7 addict==2.4.0
  yapf==0.43.0 platformdirs==4.14.8 shortuuid==1.0.13 pybase64==1.5.1
  partial-json-parser==0.2.1.1.post7 xgrammar==0.2.9 apache-tvm-ffi==0.1.11
  flash-linear-attention==0.6.0 fla-core==0.6.0 pyzmq==27.3.0
  pydantic==2.14.4 pydantic-core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0
  typing-extensions==4.16.0 uvicorn==0.54.0
  # fastapi 0.115 + starlette 0.46: newer fastapi pulls in opentelemetry
  fastapi==0.115.14 starlette==0.46.2
  # openai 2.x: 3.x needs httpx2
  openai==2.45.0 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1
  # autotune itself: Optuna and the accuracy metrics' imports
  optuna==5.0.0 alembic==1.20.1 colorlog==6.12.0 sqlalchemy==2.1.9 mako==1.4.3
  greenlet==3.5.6 jiwer==4.0.0 rapidfuzz==3.14.6 tenacity==9.2.1
)

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platform_args[@]}" -d "$DEST" "${PACKAGES[@]}"

# Repack lmdeploy without TurboMind (and drop those files from RECORD so pip stays happy).
wheel=$(ls "$DEST"/lmdeploy-0.18.0-*.whl)
python3 - "$wheel" <<'EOF'
import sys
import zipfile
from pathlib import Path

path = Path(sys.argv[1])
drop = ("lmdeploy/turbomind/_turbomind", "lmdeploy/turbomind/lib64/")
tmp = path.with_suffix(".tmp")
with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        if info.filename.startswith(drop):
            continue
        data = src.read(info.filename)
        if info.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines()
            data = ("\n".join(l for l in lines if not l.startswith(drop)) + "\n").encode()
        dst.writestr(info, data)
tmp.replace(path)
print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB without TurboMind")
EOF
du -ch "$DEST"/*.whl | tail -1
