"""Input values drawn from the case id, and the exact value encoding of reports.

Both backends draw the same bytes: a numpy ``Generator`` seeded by a SHA-256
of ``"<case id>#<input index>"``. JAX runs with x64 disabled, so cases use
float32, int32 and bool.

Encoding: ``"b64:<dtype>:<shape>:<base64 of little-endian C-order bytes>"``,
shape written ``8x6`` (empty for a scalar), e.g. ``"b64:float32:2x2:AACAPw..."``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

import numpy as np

DTYPES = ("float32", "int32", "bool")


def seed_of(case_id: str, index: int) -> int:
    """The 64-bit seed of input ``index`` of case ``case_id``."""
    digest = hashlib.sha256(f"{case_id}#{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def draw(case_id: str, index: int, shape: Sequence[int], dtype: str, domain: str = "normal") -> np.ndarray:
    """Host values for one input. Raises ``ValueError`` for an unknown domain."""
    rng = np.random.default_rng(seed_of(case_id, index))
    shape = tuple(int(s) for s in shape)
    if domain == "bool" or dtype == "bool":
        return rng.random(shape) < 0.5
    if domain.startswith("index:"):
        high = int(domain.split(":", 1)[1])
        return rng.integers(0, high, size=shape).astype(dtype)
    if dtype.startswith("int"):
        return rng.integers(-8, 8, size=shape).astype(dtype)
    if domain == "normal":
        out = rng.standard_normal(shape)
    elif domain == "positive":
        out = rng.uniform(0.5, 2.0, shape)
    elif domain == "nonzero":
        out = rng.uniform(0.5, 2.0, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    elif domain == "small":
        out = rng.uniform(-2.0, 2.0, shape)
    else:
        raise ValueError(f"unknown value domain {domain!r}")
    return np.asarray(out, dtype=dtype)


def encode(array: np.ndarray) -> str:
    """The exact encoding of ``array`` (see the module docstring)."""
    array = np.asarray(array)
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
    shape = "x".join(str(s) for s in array.shape)
    return f"b64:{array.dtype.name}:{shape}:{base64.b64encode(data.tobytes()).decode()}"


def decode(text: str) -> np.ndarray:
    """Inverse of ``encode``. Raises ``ValueError`` for a malformed string."""
    try:
        tag, dtype, shape, data = text.split(":", 3)
        if tag != "b64":
            raise ValueError(f"unknown tag {tag!r}")
        dims = tuple(int(s) for s in shape.split("x")) if shape else ()
        raw = base64.b64decode(data.encode())
        if dtype == "bfloat16":
            import ml_dtypes

            np_dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            np_dtype = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(raw, dtype=np_dtype).reshape(dims).astype(np_dtype.newbyteorder("="))
    except Exception as err:  # noqa: BLE001 - one clear error for any malformation
        raise ValueError(f"malformed value encoding {text[:60]!r}: {err}") from err


def host_values(case: dict) -> list:
    """Host numpy values of every input (``None`` for scalars)."""
    out = []
    for i, item in enumerate(case["inputs"]):
        if "scalar" in item:
            out.append(None)
        elif item.get("values") is not None:
            out.append(np.asarray(item["values"], dtype=item.get("dtype", "float32")))
        else:
            out.append(draw(case["id"], i, item["shape"], item.get("dtype", "float32"),
                            item.get("domain", "normal")))
    return out
