"""The CI and GPU scripts fail when what they run fails.

``scripts/ci_versions.sh`` waits on each background run by its pid (a bare
``wait`` returns 0 whatever the jobs returned); ``scripts/gpu_check.sh``
runs every step and exits 1 if any failed (it used to end with ``ls`` and
pipe pytest into ``tee`` without checking either). Both are run here with
stand-in commands, in well under a second each: no venv, GPU or network.
ci_versions.sh installs the newest torch with pip's configuration lifted (a
machine-wide constraint may cap torch below it) and tests the oldest and the
newest supported torch."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


# The torch versions CI tests: the oldest supported (.venv, scripts/test.sh)
# and the newest release (scripts/ci_versions.sh).
OLDEST, NEWEST = "2.13.0", "2.15.0"
NEWEST_VENV = ".venv-torch215"


def _function(name: str) -> str:
    """The bash function ``name`` of ci_versions.sh, as written there."""
    text = (SCRIPTS / "ci_versions.sh").read_text()
    found = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.S | re.M)
    assert found, f"ci_versions.sh defines {name}"
    return found.group(0)


def _wait_each() -> str:
    """The ``wait_each`` function of ci_versions.sh, as written there."""
    return _function("wait_each")


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


# A stand-in python3: ``-m venv DIR`` makes DIR/bin/python, a stand-in that
# logs each pip call with the PIP_CONFIG_FILE it saw, records the torch a
# ``pip install torch==V`` installs, and answers ``-c`` (the version query)
# with the recorded torch (nothing: no torch installed).
_FAKE_VENV_PYTHON = r"""
root=$(cd "$(dirname "$0")/.." && pwd)
case "$1" in
  -c) [ -f "$root/torch-version" ] && cat "$root/torch-version" ;;
  -m) echo "PIP_CONFIG_FILE=${PIP_CONFIG_FILE-unset} $*" >> "$root/pip.log"
      for arg in "$@"; do
        case "$arg" in torch==*) echo "${arg#torch==}" > "$root/torch-version" ;; esac
      done ;;
esac
exit 0
"""


def _setup_torch_venv(tmp_path: Path, have: str | None) -> tuple[subprocess.CompletedProcess, str]:
    """Run ci_versions.sh's ``setup_torch_venv`` for the newest torch on a
    stand-in venv that has torch ``have`` (None: no venv yet), under a pip
    configuration that caps torch; returns the run and the pip calls."""
    bin_dir, venv = tmp_path / "bin", tmp_path / NEWEST_VENV
    bin_dir.mkdir()
    _fake(bin_dir / "python3", f"""
[ "$1 $2" = "-m venv" ] || exit 9
mkdir -p "$3/bin"
cat > "$3/bin/python" <<'EOF'
#!/usr/bin/env bash{_FAKE_VENV_PYTHON}EOF
chmod +x "$3/bin/python"
""")
    if have is not None:
        subprocess.run(["bash", str(bin_dir / "python3"), "-m", "venv", str(venv)], check=True)
        (venv / "torch-version").write_text(have + "\n")
    capped = tmp_path / "pip.conf"
    capped.write_text("[global]\nconstraint = torch<=2.14.1\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PIP_CONFIG_FILE": str(capped)}
    script = f"set -euo pipefail\n{_function('setup_torch_venv')}setup_torch_venv {NEWEST_VENV} {NEWEST}\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=30)
    log = venv / "pip.log"
    return out, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("have", [None, "2.14.1"])
def test_ci_versions_installs_the_newest_torch_past_a_pip_cap(tmp_path, have):
    out, pip_calls = _setup_torch_venv(tmp_path, have)
    assert out.returncode == 0, out.stderr
    installs = [c for c in pip_calls.splitlines() if f"torch=={NEWEST}" in c]
    # torch and parity's extras in one install, with no pip configuration
    # read (the machine's cap would refuse torch, or downgrade it later).
    assert len(installs) == 1, pip_calls
    assert installs[0].startswith("PIP_CONFIG_FILE=/dev/null "), installs[0]
    assert "-e .[jax,keras,test]" in installs[0], installs[0]
    assert f"torch {NEWEST} in {NEWEST_VENV}" in out.stdout


def test_ci_versions_fails_when_the_install_leaves_another_torch(tmp_path):
    # pip "succeeds" but the venv keeps 2.14.1 (a cap pip honoured anyway).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    venv = tmp_path / NEWEST_VENV
    (venv / "bin").mkdir(parents=True)
    _fake(venv / "bin" / "python", '[ "$1" = -c ] && echo 2.14.1\nexit 0\n')
    _fake(bin_dir / "python3", "exit 0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    script = f"set -euo pipefail\n{_function('setup_torch_venv')}setup_torch_venv {NEWEST_VENV} {NEWEST}\n"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=30)
    assert out.returncode == 1
    assert f"{NEWEST_VENV} has torch 2.14.1 after installing torch=={NEWEST}" in out.stderr


def test_ci_versions_keeps_a_venv_that_has_the_newest_torch(tmp_path):
    out, pip_calls = _setup_torch_venv(tmp_path, NEWEST)
    assert out.returncode == 0, out.stderr
    assert pip_calls == "", "no install when the venv has the torch already"


def test_ci_versions_tests_the_oldest_and_the_newest_torch():
    text = (SCRIPTS / "ci_versions.sh").read_text()
    assert re.search(rf"^setup_torch_venv {re.escape(NEWEST_VENV)} {re.escape(NEWEST)}$", text, re.M)
    assert f"{NEWEST_VENV}/bin/python -m pytest" in text  # the fast suite on the newest
    runs = re.findall(r"^(\S+)/bin/parity run --backend torch ", text, re.M)
    assert runs == [".venv", NEWEST_VENV], runs  # the parity column on both
    assert re.search(r'compare "\$OUT/torch213\.json" "\$OUT/torch215\.json" '
                     r'--reference "\$OUT/jax012\.json"', text)
    assert "2.14" not in "".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    assert f"{NEWEST_VENV}/" in (ROOT / ".gitignore").read_text().splitlines()
    tested = (ROOT / "pyproject.toml").read_text().split("\nclassifiers", 1)[0]
    assert f"torch {OLDEST}" in tested and NEWEST in tested and "2.14" not in tested


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
