#!/usr/bin/env bash
# GPU checks on a CUDA machine (run from the repository root with torch, jax,
# pytest installed): the gpu-marked tests, the default catalogue on
# --device cuda (parity and raw DTensor) against the JAX reference on CPU,
# and the cuda benchmark family. Writes everything under ${OUT:-gpu-out}/.
# Every step runs (a failure does not hide the later steps' results); the
# script exits 1 if any step failed: the gpu tests, a conformance run, the
# parity-vs-JAX comparison (exit 1 when the parity column diverges), the
# benchmarks. The raw-DTensor comparison is informational.
set -uo pipefail
status=0
fail() { echo "gpu_check: FAILED: $1" >&2; status=1; }
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/reports"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
nvidia-smi -L || fail "nvidia-smi -L (no GPU driver?)"
$PY -c "import sys, torch, jax; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__, torch.cuda.get_device_name(0))" \
    || fail "versions / torch.cuda.get_device_name(0)"
echo "== gpu tests"
timeout 300 $PY -m pytest -q -m gpu tests/test_gpu.py -rs -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log" \
    || fail "gpu tests (tests/test_gpu.py)"
echo "== conformance on cuda"
start=$(date +%s)
R=$OUT/reports
$PY -m conformance.cli run --backend jax --quiet --out "$R/jax.json" > "$R/jax.log" 2>&1 &
JAX=$!
$PY -m conformance.cli run --backend torch --raw --device cuda --quiet --out "$R/torch-raw-cuda.json" > "$R/raw.log" 2>&1 &
RAW=$!
timeout 420 $PY -m conformance.cli run --backend torch --device cuda --quiet --out "$R/torch-cuda.json" 2>&1 \
    | tee "$R/torch.log" || fail "parity run on cuda"
wait "$JAX" || fail "JAX reference run (see $R/jax.log)"
wait "$RAW" || fail "raw DTensor run on cuda (see $R/raw.log)"
echo "conformance wall: $(( $(date +%s) - start )) s"
$PY -m conformance.cli compare "$R/jax.json" "$R/torch-cuda.json" --json "$R/parity-vs-jax.json" --md "$R/parity-vs-jax.md" \
    || fail "parity on cuda vs JAX (see $R/parity-vs-jax.md)"
$PY -m conformance.cli compare "$R/jax.json" "$R/torch-raw-cuda.json" --json "$R/raw-vs-jax.json" --md "$R/raw-vs-jax.md" \
    || echo "   raw DTensor diverges from JAX (informational)"
tail -n 3 "$R"/*.log || true
echo "== cuda benchmarks"
timeout 240 $PY -m benchmarks --only cuda --out "$OUT/bench-cuda.json" 2>&1 | tee "$OUT/bench-cuda.log" \
    || fail "cuda benchmarks"
(cd "$OUT" && tar czf reports.tgz reports && rm -rf reports) || fail "packing $OUT/reports"
ls -la "$OUT"
if [ "$status" -ne 0 ]; then echo "gpu_check: some steps failed (above)" >&2; fi
exit "$status"
