#!/usr/bin/env bash
# CI on the versions users have (after scripts/test.sh, which runs the suite on
# torch 2.13.0 -- the oldest supported -- + jax 0.10.2 in .venv):
#  1. .venv-torch215: torch 2.15.0 (the newest release, what users install; a
#     CUDA build that runs on the CPU) -> the fast part of the suite (no
#     multiprocess, no slow tests) and the parity column of the catalogue.
#  2. .venv-jax012: Python 3.12 with the newest JAX (0.12, normative for the
#     rules) -> the JAX reference column, run as parity's worker interpreter.
#  3. Semantics diffs, written to reports/ci-versions/:
#       parity on torch 2.13.0 vs 2.15.0 (both against jax 0.12),
#       the reference jax 0.10.2 vs 0.12.
# (2.14.1 left CI for time; docs/torch-versions.md has what moved from 2.13.0
# to 2.15.0 in both torch columns.)
# Each step prints its wall time. Exit 1 on a failing test or a regression.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=reports/ci-versions
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PARITY_PROGRESS_EVERY_S=60
step() { echo "== $1"; STEP_START=$(date +%s); }
done_step() { echo "   $1: $(( $(date +%s) - STEP_START )) s"; }
# wait_each NAME:PID ...: wait on every job by its pid (a bare `wait` returns
# 0 whatever the jobs returned) and exit 1 naming each one that failed (130:
# interrupted, its report partial).
wait_each() {
    local job rc failed=0
    for job in "$@"; do
        rc=0
        wait "${job#*:}" || rc=$?
        if [ "$rc" -ne 0 ]; then
            echo "ci_versions: ${job%%:*} exited with $rc" >&2
            failed=1
        fi
    done
    [ "$failed" -eq 0 ] || exit 1
}

# setup_torch_venv VENV VERSION: VENV with torch==VERSION and
# parity[jax,keras,test] (kept when it already has that torch).
# PIP_CONFIG_FILE=/dev/null: pip reads no configuration file for these
# installs. A machine's pip.conf may cap torch through a constraint file (this
# project's build machines cap it at 2.14.1, the newest release on their disk:
# /etc/xdg/pip), under which pip refuses torch==VERSION. torch and parity's
# extras go in one install, under the same lift, so the resolver cannot swap
# torch back to a capped one. pip's environment variables (PIP_FIND_LINKS,
# PIP_CERT, ...) still apply.
setup_torch_venv() {
    local venv=$1 version=$2 have=""
    torch_of() {  # the torch release in $venv ("" when none)
        [ -x "$venv/bin/python" ] || return 0
        "$venv/bin/python" -c "import importlib.metadata as m; print(m.version('torch').split('+')[0])" \
            2>/dev/null || true
    }
    have=$(torch_of)
    if [ "$have" != "$version" ]; then
        python3 -m venv "$venv"
        PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q --upgrade pip
        echo "   installing torch==$version and parity[jax,keras,test] into $venv (had: ${have:-none})"
        PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q "torch==$version" -e ".[jax,keras,test]"
        have=$(torch_of)
    fi
    if [ "$have" != "$version" ]; then
        echo "ci_versions: $venv has torch ${have:-none} after installing torch==$version" >&2
        exit 1
    fi
    echo "   torch $have in $venv"
}

step "setup .venv-torch215 (torch 2.15.0 + the test dependencies)"
setup_torch_venv .venv-torch215 2.15.0
done_step "setup torch 2.15.0"

step "setup .venv-jax012 (Python 3.12, newest jax)"
# A working Python 3.12: pyenv's shim for python3.12 exists even where 3.12
# is not the active pyenv version (then it fails), so try the interpreters
# themselves first and keep the first one that runs.
PY312=""
for candidate in "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12 \
                 /usr/local/bin/python3.12 /usr/bin/python3.12 "$(command -v python3.12 || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c "import venv" >/dev/null 2>&1; then
        PY312="$candidate"; break
    fi
done
if [ -z "$PY312" ]; then
    echo "ci_versions: no working python3.12 (tried pyenv's versions/3.12*, /usr/local/bin, /usr/bin, PATH);" \
         "install Python 3.12 to run the newest JAX" >&2
    exit 1
fi
echo "   python3.12: $PY312"
if [ ! -x .venv-jax012/bin/python ]; then
    "$PY312" -m venv .venv-jax012
    echo "   installing jax (newest) numpy into .venv-jax012"
    .venv-jax012/bin/python -m pip install -q jax numpy
fi
.venv-jax012/bin/python -c "import jax; print('   jax', jax.__version__)"
done_step "setup jax 0.12"

step "tests on torch 2.15.0 (not multiprocess, not slow)"
status=0
.venv-torch215/bin/python -m pytest -q -m "not multiprocess and not slow" -p no:cacheprovider \
    -n "${PARITY_TEST_WORKERS:-2}" --dist loadfile \
    || status=1
done_step "tests on torch 2.15.0"

# One case (scaled_dot_product_attention on 2x4 with heads and head dim
# sharded) takes ~50 s alone before DTensor refuses it; with two runs sharing
# the 2 cores it can pass the default 60 s limit on one side only, which the
# diff would call a regression: the version runs get a 300 s limit.
LIMIT=(--timeout 300)
step "JAX reference on jax 0.12 and on jax 0.10.2"
PARITY_JAX_PYTHON=.venv-jax012/bin/python .venv/bin/parity run --backend jax --quiet "${LIMIT[@]}" \
    --out "$OUT/jax012.json" &
JAX012=$!
.venv/bin/parity run --backend jax --quiet "${LIMIT[@]}" --out "$OUT/jax0102.json" &
JAX0102=$!
wait_each "jax-0.12-reference:$JAX012" "jax-0.10.2-reference:$JAX0102"
done_step "reference runs"

step "parity column on torch 2.13.0 and 2.15.0"
.venv/bin/parity run --backend torch --quiet "${LIMIT[@]}" --out "$OUT/torch213.json" &
TORCH213=$!
.venv-torch215/bin/parity run --backend torch --quiet "${LIMIT[@]}" --out "$OUT/torch215.json" &
TORCH215=$!
wait_each "torch-2.13.0-parity:$TORCH213" "torch-2.15.0-parity:$TORCH215"
done_step "candidate runs"

step "semantics diffs"
.venv/bin/parity compare "$OUT/jax0102.json" "$OUT/jax012.json" --md "$OUT/jax-0.10.2-vs-0.12.md" \
    > "$OUT/jax-diff.txt" 2>&1 || true   # informative: the reference moved
tail -n 12 "$OUT/jax-diff.txt"
.venv/bin/parity compare "$OUT/torch213.json" "$OUT/torch215.json" --reference "$OUT/jax012.json" \
    --md "$OUT/torch-2.13-vs-2.15.0.md" --json "$OUT/torch-2.13-vs-2.15.0.json" || status=1
done_step "diffs"
exit $status
