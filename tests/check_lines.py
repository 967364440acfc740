"""The ``CHECK <name> ok`` / ``CHECK <name> FAIL <json traceback>`` lines the
Keras check scripts print (``tests/keras_support/*_checks.py``), read into one
outcome per check, and the assertion each parametrized test makes."""

from __future__ import annotations

import json


def check_outcomes(stdout: str) -> dict[str, tuple[str, str]]:
    """``name -> (status, message)``; a check that ran twice fails if
    either run failed."""
    results: dict[str, tuple[str, str]] = {}
    for line in stdout.splitlines():
        if line.startswith("CHECK "):
            _, name, status, *rest = line.split(" ", 3)
            message = json.loads(rest[0]) if rest else ""
            results.setdefault(name, (status, message))
            if status != "ok":
                results[name] = (status, message)
    return results


def assert_check_passed(results: dict[str, tuple[str, str]], name: str) -> None:
    assert name in results, f"{name} did not run"
    status, message = results[name]
    assert status == "ok", message
