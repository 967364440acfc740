"""The CI and GPU scripts fail when what they run fails.

``scripts/ci_versions.sh`` waits on each background run by its pid (a bare
``wait`` returns 0 whatever the jobs returned); ``scripts/gpu_check.sh``
runs every step and exits 1 if any failed (it used to end with ``ls`` and
pipe pytest into ``tee`` without checking either). Both are run here with
stand-in commands, in well under a second each: no venv, GPU or network."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _wait_each() -> str:
    """The ``wait_each`` function of ci_versions.sh, as written there."""
    text = (SCRIPTS / "ci_versions.sh").read_text()
    found = re.search(r"^wait_each\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert found, "ci_versions.sh defines wait_each"
    return found.group(0)


@pytest.mark.parametrize("codes, want", [((0, 0), 0), ((0, 1), 1), ((130, 0), 1)])
def test_ci_versions_fails_when_a_background_run_fails(codes, want):
    jobs = "\n".join(f"(sleep 0.{i}; exit {c}) & J{i}=$!" for i, c in enumerate(codes))
    names = " ".join(f'"job{i}:$J{i}"' for i in range(len(codes)))
    script = f"set -euo pipefail\n{_wait_each()}{jobs}\nwait_each {names}\necho all-ok\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == want, out.stderr
    for i, c in enumerate(codes):
        assert (f"job{i} exited with {c}" in out.stderr) == (c != 0), out.stderr
    assert ("all-ok" in out.stdout) == (want == 0)


def test_ci_versions_waits_on_every_background_run_by_pid():
    text = (SCRIPTS / "ci_versions.sh").read_text()
    assert not re.search(r"^\s*wait\s*$", text, re.M), "a bare `wait` returns 0 whatever the jobs did"
    background = len(re.findall(r"&\n\w+=\$!", text))
    waited = sum(len(re.findall(r'"[\w.-]+:\$\w+"', line))
                 for line in text.splitlines() if line.startswith("wait_each "))
    assert background == waited == 4


def _fake(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("failing, want", [
    ("", 0),                      # every step succeeds
    ("pytest", 1),                # the gpu tests fail
    ("compare-parity", 1),        # the parity column diverges on cuda
    ("compare-raw", 0),           # raw DTensor diverges: informational
    ("benchmarks", 1),
])
def test_gpu_check_exits_non_zero_when_a_step_fails(tmp_path, failing, want):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake(bin_dir / "nvidia-smi", "echo 'GPU 0: stand-in'\n")
    # A stand-in interpreter: each step of the script calls it with its own
    # arguments; FAIL names the one step that exits 1.
    _fake(bin_dir / "fakepy", """
case "$*" in
  *"-m pytest"*) step=pytest ;;
  *"compare"*"torch-cuda.json"*) step=compare-parity ;;
  *"compare"*"torch-raw-cuda.json"*) step=compare-raw ;;
  *"-m benchmarks"*) step=benchmarks ;;
  *) step=other ;;
esac
[ "$step" = "$FAIL" ] && exit 1
exit 0
""")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "fakepy"),
           "OUT": str(tmp_path / "out"), "FAIL": failing}
    out = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh")], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=60)
    assert out.returncode == want, out.stdout[-2000:] + out.stderr[-2000:]
    # Every step ran (a failure hides none of the later ones).
    assert "== cuda benchmarks" in out.stdout
