"""``LayoutMap``: variable paths to layouts, Keras semantics.

Lookup: the exact key first, then every key as a regular expression with
``re.fullmatch``; more than one match raises ``LayoutError``; none gives
``None``. ``/`` and ``.`` separate path parts interchangeably, so the key
``dense/kernel`` matches the path ``dense.kernel`` and the reverse.
"""

from __future__ import annotations

import collections.abc
import re
from collections.abc import Iterator

from parity import ambient
from parity.errors import LayoutError
from parity.layout import TensorLayout
from parity.mesh import DeviceMesh
from parity.partition_spec import PartitionSpec


def _dotted(path: str) -> str:
    return path.replace("/", ".")


def _pattern(key: str) -> re.Pattern[str]:
    # A '/' in a key also matches '.', so both path styles are accepted.
    try:
        return re.compile(key.replace("/", "[/.]"))
    except re.error as err:
        raise LayoutError(f"LayoutMap key {key!r} is not a valid regex: {err}", what="key", value=key) from None


class LayoutMap(collections.abc.MutableMapping):
    """Maps variable paths (or regexes over them) to ``TensorLayout``.

    ```python
    layout_map = parity.LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    layout_map["dense/bias"] = ("model",)
    layout_map["dense_1.kernel"]  # TensorLayout((None, 'model'), mesh)
    layout_map["embed.*"] = parity.P("model", None)  # on the ambient mesh, else the map's
    ```

    A ``parity.P`` value is a layout of its entries, one per dim (as a
    tuple's: a map's value names every dim of the variable), on the
    ambient mesh (``set_mesh``), else the map's mesh.

    Raises ``LayoutError`` when a key is set twice, a value is not a layout,
    tuple or ``P``, a ``P`` has no mesh to resolve on (no ambient mesh and
    none given to the map), lands on an ambient mesh other than the map's,
    or is unreduced, or a path matches more than one key.
    """

    def __init__(self, device_mesh: DeviceMesh | None = None) -> None:
        self._layout_map: dict[str, TensorLayout] = {}
        self._patterns: dict[str, re.Pattern[str]] = {}
        self._device_mesh = device_mesh

    @property
    def device_mesh(self) -> DeviceMesh | None:
        return self._device_mesh

    def __getitem__(self, key: str) -> TensorLayout | None:
        if not isinstance(key, str):
            raise LayoutError(f"LayoutMap paths are strings; got {key!r}.", what="key", value=key)
        if key in self._layout_map:
            return self._layout_map[key]
        for k in self._layout_map:
            if _dotted(k) == _dotted(key):
                return self._layout_map[k]
        matches = [k for k, p in self._patterns.items() if p.fullmatch(key)]
        if len(matches) > 1:
            raise LayoutError(
                f"Path '{key}' matches multiple layout specification keys: "
                f"{matches}. Please make sure each tensor/variable path only "
                "matches at most one layout specification key in the LayoutMap.",
                what="key", value=key,
            )
        return self._layout_map[matches[0]] if matches else None

    def __setitem__(self, key: str, layout: object) -> None:
        if not isinstance(key, str):
            raise LayoutError(
                f"LayoutMap keys are variable paths or regexes (str); got {key!r}.",
                what="key", value=key,
            )
        if key in self._layout_map:
            raise LayoutError(
                f"{key} already exist in the LayoutMap with value "
                f"{self._layout_map[key]}. Please make sure to not use duplicated "
                "keys.",
                what="key", value=key,
            )
        if isinstance(layout, PartitionSpec):
            what = f"LayoutMap[{key!r}]"
            with ambient.set_mesh(ambient.mesh_for_spec(layout, self._device_mesh, what)):
                layout = ambient.resolve(layout, len(layout), what)
        if isinstance(layout, (tuple, list)):
            layout = TensorLayout(tuple(layout))
        if not isinstance(layout, TensorLayout):
            raise LayoutError(
                f"{layout!r} should be a TensorLayout, a tuple of axis entries or a "
                "parity.P.", what="layout", value=layout,
            )
        if layout.device_mesh is None and self._device_mesh is not None:
            layout = layout.with_mesh(self._device_mesh)
        self._patterns[key] = _pattern(key)
        self._layout_map[key] = layout

    def __delitem__(self, key: str) -> None:
        del self._patterns[key]
        del self._layout_map[key]

    def __len__(self) -> int:
        return len(self._layout_map)

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout_map)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        found = self[key]
        return default if found is None else found
