"""pyproject.toml says who made the package, what it runs on and with which
framework versions (issue 22: the metadata had no authors or classifiers)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                        .read_text())["project"]


def test_authors_keywords_and_classifiers_are_given():
    assert PROJECT["authors"] and all(a.get("name") for a in PROJECT["authors"])
    assert PROJECT["keywords"]
    assert any(c.startswith("Development Status ::") for c in PROJECT["classifiers"])


def test_the_python_classifiers_lie_within_requires_python():
    floor = tuple(int(x) for x in re.fullmatch(r">=(\d+)\.(\d+)",
                                               PROJECT["requires-python"]).groups())
    versions = [tuple(int(x) for x in c.rsplit(" ", 1)[1].split("."))
                for c in PROJECT["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert versions and all(v >= floor for v in versions)


def test_every_framework_extra_names_a_version_floor():
    extras = PROJECT["optional-dependencies"]
    for framework in ("torch", "jax", "keras"):
        assert any(re.fullmatch(rf"{framework}>=[\d.]+", req) for req in extras[framework]), \
            extras[framework]


def test_the_license_is_declared_and_shipped():
    assert PROJECT["license"] == "Apache-2.0"
    root = Path(__file__).resolve().parents[1]
    assert all((root / name).is_file() for name in PROJECT["license-files"])
    assert "Apache License" in (root / "LICENSE").read_text()


def test_project_urls_are_absolute_or_their_absence_is_explained():
    # A Project-URL is an absolute URL; the repository has no public address
    # yet, so pyproject.toml says why it names none rather than inventing one.
    urls = PROJECT.get("urls")
    if urls:
        for label, url in urls.items():
            parts = urlparse(url)
            assert parts.scheme == "https" and parts.netloc, (label, url)
    else:
        text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
        assert "# No [project.urls]:" in text
