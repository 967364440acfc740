"""``layout_map_for``: Megatron-style tensor parallelism read off a Keras
model's layers.

Each variable gets a role from the layer that owns it, the layer's einsum
equation (``EinsumDense``) or kernel orientation (``Dense``), and the
model's hidden width (the token embedding's output dim):

| role              | variables                                   | layout                        |
|-------------------|---------------------------------------------|-------------------------------|
| ``embedding``     | token embedding ``(vocab, hidden)``         | vocab on model, hidden on batch|
| ``output_head``   | untied head ``(hidden, vocab)``             | hidden on batch, vocab on model|
| ``column``        | kernels that read the hidden width: q/k/v,  | first output dim (heads,      |
|                   | MLP up/gate (``(hidden, out...)``)          | intermediate) on model, hidden|
|                   |                                             | on batch                      |
| ``row``           | kernels that write it: attention output,    | first input dim on model,     |
|                   | MLP down                                    | hidden on batch               |
| ``expert``        | mixture-of-experts weights ``(E, ...)``     | experts on model (when E      |
|                   |                                             | divides it), hidden on batch; |
|                   |                                             | else column/row inside experts|
| ``vector``        | norms, biases, scalars, rank <= 1, a kernel | replicated                    |
|                   | to or from one value ``(hidden, 1)``        |                               |
| ``other``         | any other rank >= 2 weight                  | largest divisible dim on model|

The ``batch`` axis on the hidden dim is keras-hub's convention (each
shipped ``get_layout_map`` does it): the weights are also split over the
data-parallel devices (FSDP-like). A dim an axis does not divide never gets
it: the layout falls to the next valid dim (a grouped-query key/value
kernel whose heads do not divide the model axis shards its head dim, else
its hidden dim, else stays replicated on that axis), and the variable's
rule says so in ``note``.

``convention="keras_hub"`` places rank-3 column kernels as keras-hub's
shipped maps do, positionally ``(model, batch, None)``: for Gemma's
``(heads, hidden, head_dim)`` kernels that is the Megatron layout, for the
Llama-style ``(hidden, heads, head_dim)`` kernels (Llama, Qwen, QwenMoe,
Qwen3-MoE) it puts the hidden dim on the model axis (keras-hub#2815 calls
this a swapped axis). With it the derived map equals those five shipped maps
on every variable they lay out.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from parity.errors import LayoutError

ROLES = ("embedding", "output_head", "position_embedding", "column", "row", "expert",
         "vector", "other")
CONVENTIONS = ("megatron", "keras_hub")

# Layer names that break a tie when a kernel both reads and writes the
# hidden width (hidden == intermediate, or square attention projections).
_ROW_NAMES = re.compile(
    r"(attention_output|output_dense|out_proj|o_proj|down_proj|4h_to_h|ffw_linear|"
    r"feedforward_output|mlp_output|output_layer|dense_v|c_proj|fc2|proj_out|^wo$|^output$)"
)
_COLUMN_NAMES = re.compile(
    r"(query|key|value|q_proj|k_proj|v_proj|qkv|in_proj|up_proj|gate_proj|gate|"
    r"intermediate|h_to_4h|ffw_gating|fc1|dense_k|receptance|^wi)"
)


@dataclasses.dataclass(frozen=True)
class VariableRule:
    """One variable's derived layout: its ``path``, ``shape``, ``dtype``,
    ``role`` (one of ``ROLES``), ``axes`` (one mesh axis name or ``None``
    per dim) and ``note`` (why the layout is not the role's first choice;
    empty when it is)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    axes: tuple[str | None, ...]
    note: str = ""

    @property
    def sharded(self) -> bool:
        return any(a is not None for a in self.axes)


@dataclasses.dataclass(frozen=True)
class Derivation:
    """Every variable's rule and the layout map keys that express them.

    ``keys`` holds ``(key, axes)`` pairs: one regex per group of variables
    that differ only in layer-name suffixes (``transformer_layer(?:_\\d+)?/...``) and
    share a layout, else the variable's escaped path. Replicated variables
    get no key (Keras replicates what no key matches).
    """

    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    batch_axis: str | None
    model_axis: str
    convention: str
    hidden: int | None
    rules: tuple[VariableRule, ...]
    keys: tuple[tuple[str, tuple[str | None, ...]], ...]

    def rule(self, path: str) -> VariableRule:
        """The rule of the variable at ``path``; ``KeyError`` when none."""
        for r in self.rules:
            if r.path == path:
                return r
        raise KeyError(path)

    @property
    def notes(self) -> tuple[str, ...]:
        """One line per variable laid out another way than its role's first
        choice (e.g. grouped-query key/value heads)."""
        return tuple(f"{r.path} {r.shape}: {r.note}" for r in self.rules if r.note)

    def layout_map(self, mesh: Any) -> Any:
        """The ``keras.distribution.LayoutMap`` over ``mesh`` with ``keys``."""
        import keras

        layout_map = keras.distribution.LayoutMap(mesh)
        for key, axes in self.keys:
            layout_map[key] = axes
        return layout_map


def _mesh_sizes(mesh: Any) -> dict[str, int]:
    shape = getattr(mesh, "shape", None)
    names = getattr(mesh, "axis_names", None)
    if shape is None or names is None:
        raise LayoutError(
            f"layout_map_for: mesh must be a keras.distribution.DeviceMesh (shape and "
            f"axis_names); got {mesh!r}.",
            what="mesh", value=mesh,
        )
    return dict(zip(tuple(names), (int(s) for s in shape)))


def _owners(model: Any) -> dict[int, Any]:
    """Each variable's owning layer (the layer that created it)."""
    owner: dict[int, Any] = {}
    layers = list(model._flatten_layers(include_self=True, recursive=True))
    for layer in layers:
        for v in list(layer._trainable_variables) + list(layer._non_trainable_variables):
            owner[id(v)] = layer
    return owner


def _is_embedding_layer(layer: Any) -> bool:
    import keras

    return isinstance(layer, keras.layers.Embedding)


def _hidden_width(model: Any, owners: dict[int, Any]) -> int | None:
    """The residual width: the output dim of the largest token embedding."""
    best = None
    for v in model.weights:
        layer = owners.get(id(v))
        if (layer is not None and _is_embedding_layer(layer) and len(v.shape) == 2
                and v.path.endswith("embeddings") and not v.path.endswith("reverse_embeddings")):
            if best is None or v.shape[0] > best[0]:
                best = (int(v.shape[0]), int(v.shape[1]))
    return None if best is None else best[1]


def _kernel_sides(layer: Any, rank: int) -> tuple[list[int], list[int]] | None:
    """``(input axes, output axes)`` of a Dense or EinsumDense kernel of
    ``rank`` dims; ``None`` for another layer."""
    import keras

    if isinstance(layer, keras.layers.EinsumDense):
        inputs, _, output = layer.equation.partition("->")
        _, kernel = inputs.split(",")
        kernel = kernel.strip()
        if len(kernel) != rank:
            return None
        ins = [i for i, c in enumerate(kernel) if c not in output]
        outs = [i for i, c in enumerate(kernel) if c in output]
        return ins, outs
    if isinstance(layer, keras.layers.Dense) and rank == 2:
        return [0], [1]
    return None


class _Placer:
    """Assigns mesh axes to dims, never one that does not divide."""

    def __init__(self, sizes: dict[str, int], model_axis: str, batch_axis: str | None):
        self.sizes, self.model, self.batch = sizes, model_axis, batch_axis

    def divides(self, axis: str | None, n: int) -> bool:
        return axis is not None and n % self.sizes[axis] == 0

    def place(self, shape: tuple[int, ...], model_dims: list[int],
              batch_dims: list[int]) -> tuple[tuple[str | None, ...], int | None]:
        """``model`` on the first dim of ``model_dims`` it divides, ``batch``
        on the first other dim of ``batch_dims`` it divides; returns the axes
        and the index in ``model_dims`` that got ``model`` (``None``: none)."""
        axes: list[str | None] = [None] * len(shape)
        chosen = None
        for i, d in enumerate(model_dims):
            if self.divides(self.model, shape[d]):
                axes[d] = self.model
                chosen = i
                break
        if self.batch is not None and self.batch != self.model:
            for d in batch_dims:
                if axes[d] is None and self.divides(self.batch, shape[d]):
                    axes[d] = self.batch
                    break
        return tuple(axes), chosen


def _fallback_note(chosen: int | None, first: str, dims_named: list[str], axis: str,
                   size: int) -> str:
    if chosen == 0:
        return ""
    if chosen is None:
        return (f"{first} not divisible by {axis!r} ({size}) nor any other dim: "
                f"replicated on {axis!r}")
    return (f"{first} not divisible by {axis!r} ({size}): {dims_named[chosen]} "
            f"sharded on {axis!r} instead")


def _rule(v: Any, layer: Any, hidden: int | None, placer: _Placer,
          convention: str) -> VariableRule:
    shape = tuple(int(s) for s in v.shape)
    path, dtype = v.path, str(v.dtype)
    rank = len(shape)
    name = path.rsplit("/", 1)[-1]
    layer_name = getattr(layer, "name", "") or ""
    msize = placer.sizes[placer.model]

    def make(role, axes, note=""):
        return VariableRule(path, shape, dtype, role, tuple(axes), note)

    n_experts = getattr(layer, "num_experts", None)
    if rank <= 1 or (name.endswith("bias") and not isinstance(n_experts, int)):
        return make("vector", (None,) * rank)
    if layer is not None and _is_embedding_layer(layer) and rank == 2:
        if name == "reverse_embeddings":
            axes, chosen = placer.place(shape, [1, 0], [0, 1])
            return make("output_head", axes, _fallback_note(
                chosen, f"vocab {shape[1]}", ["vocab", "hidden"], placer.model, msize))
        axes, chosen = placer.place(shape, [0, 1], [1, 0])
        return make("embedding", axes, _fallback_note(
            chosen, f"vocab {shape[0]}", ["vocab", "hidden"], placer.model, msize))
    if layer is not None and type(layer).__name__ == "PositionEmbedding" and rank == 2:
        axes, chosen = placer.place(shape, [1], [])
        return make("position_embedding", axes, _fallback_note(
            chosen, f"hidden {shape[1]}", ["hidden"], placer.model, msize))
    if isinstance(n_experts, int) and rank >= 2 and shape[0] == n_experts:
        hidden_dims = [d for d in range(1, rank) if shape[d] == hidden]
        if placer.divides(placer.model, shape[0]):
            axes, _ = placer.place(shape, [0], hidden_dims)
            return make("expert", axes)
        # Experts do not divide the model axis: Megatron inside each expert.
        inner = [d for d in range(1, rank) if d not in hidden_dims] or list(range(1, rank))
        axes, chosen = placer.place(shape, inner, hidden_dims)
        note = (f"{shape[0]} experts not divisible by {placer.model!r} ({msize}): "
                + ("inner dim sharded instead" if chosen is not None else "replicated"))
        return make("expert", axes, note)
    sides = _kernel_sides(layer, rank) if layer is not None else None
    if sides is not None and name == "kernel":
        ins, outs = sides
        n_in = math.prod(shape[d] for d in ins)
        n_out = math.prod(shape[d] for d in outs)
        if n_in == 1 or n_out == 1:  # a gate to one value: a vector
            return make("vector", (None,) * rank)
        reads, writes = n_in == hidden, n_out == hidden
        if reads == writes:
            if _ROW_NAMES.search(layer_name):
                reads, writes = False, True
            elif _COLUMN_NAMES.search(layer_name):
                reads, writes = True, False
        if reads and not writes:
            if convention == "keras_hub" and rank == 3 and placer.divides(placer.model, shape[0]) \
                    and placer.divides(placer.batch, shape[1]):
                return make("column", (placer.model, placer.batch, None))
            axes, chosen = placer.place(shape, outs + ins, ins)
            named = [f"dim {d} ({shape[d]})" for d in outs + ins]
            return make("column", axes, _fallback_note(
                chosen, f"output dim {outs[0]} ({shape[outs[0]]})", named, placer.model, msize))
        if writes and not reads:
            axes, chosen = placer.place(shape, ins + outs, outs)
            named = [f"dim {d} ({shape[d]})" for d in ins + outs]
            return make("row", axes, _fallback_note(
                chosen, f"input dim {ins[0]} ({shape[ins[0]]})", named, placer.model, msize))
    # Anything else of rank >= 2: the largest dims first.
    order = sorted(range(rank), key=lambda d: -shape[d])
    axes, chosen = placer.place(shape, order, order)
    return make("other", axes, "" if chosen is not None else
                f"no dim divisible by {placer.model!r} ({msize}): replicated")


def _index_pattern(path: str) -> str:
    """The regex of ``path`` with each layer's numeric suffix optional and
    any (``transformer_layer_3`` -> ``transformer_layer(?:_\\d+)?``): it
    matches every layer of a stack, and the same model built again, whose
    auto-numbered layer names (``moe_block_4``) differ."""
    *layers, name = path.split("/")
    parts = [re.escape(re.sub(r"_\d+$", "", c)) + r"(?:_\d+)?" for c in layers]
    return "/".join(parts + [re.escape(name)])


def _keys(rules: tuple[VariableRule, ...]) -> tuple[tuple[str, tuple], ...]:
    """Regex keys for the sharded rules, verified with Keras's lookup (an
    exact key first, else the one key that fully matches)."""
    sharded = [r for r in rules if r.sharded]
    groups: dict[str, list[VariableRule]] = {}
    for r in sharded:
        groups.setdefault(_index_pattern(r.path), []).append(r)
    keys: dict[str, tuple] = {}
    for pattern, members in groups.items():
        if len({m.axes for m in members}) == 1:
            keys[pattern] = members[0].axes
        else:
            for m in members:
                keys.setdefault(re.escape(m.path), m.axes)
    compiled = {k: re.compile(k) for k in keys}
    want = {r.path: r.axes for r in rules}
    for path, axes in want.items():
        hits = [k for k in keys if k == path] or [k for k, p in compiled.items()
                                                  if p.fullmatch(path)]
        got = keys[hits[0]] if len(hits) == 1 else None
        if len(hits) > 1 or got != (axes if any(a is not None for a in axes) else None):
            # A key matched a variable it was not made for: exact keys.
            return tuple((re.escape(r.path), r.axes) for r in sharded)
    return tuple(keys.items())


def derive(model: Any, mesh: Any, *, batch_axis: str | None = "batch",
           model_axis: str = "model", convention: str = "megatron") -> Derivation:
    """Every variable's layout for ``model`` on ``mesh`` (see the module
    docstring for the rules), as a ``Derivation``.

    ``model`` is any Keras model whose variables exist: built (weights
    allocated) or from ``abstract_model`` (no weights). ``batch_axis=None``
    uses the model axis only.

    Raises ``LayoutError`` when ``mesh`` is not a DeviceMesh, ``model_axis``
    or ``batch_axis`` is not one of its axes, or ``convention`` is unknown;
    ``TypeError`` when ``model`` has no ``weights``.
    """
    sizes = _mesh_sizes(mesh)
    for label, axis in (("model_axis", model_axis), ("batch_axis", batch_axis)):
        if axis is not None and (not isinstance(axis, str) or axis not in sizes):
            raise LayoutError(
                f"layout_map_for: {label}={axis!r} is not an axis of the mesh "
                f"{tuple(sizes)}. Fix: pass {label}= one of {tuple(sizes)}"
                + (" or None." if label == "batch_axis" else "."),
                what=label, value=axis,
            )
    if not isinstance(convention, str) or convention not in CONVENTIONS:
        raise LayoutError(
            f"layout_map_for: convention={convention!r} is not one of {CONVENTIONS}.",
            what="convention", value=convention,
        )
    if not hasattr(model, "weights"):
        raise TypeError(f"layout_map_for: model must be a Keras model; got {model!r}.")
    owners = _owners(model)
    hidden = _hidden_width(model, owners)
    placer = _Placer(sizes, model_axis, batch_axis)
    rules, seen = [], set()
    for v in model.weights:
        if v.path in seen:  # one path, one layout (SmolLM3 repeats o_proj/kernel)
            continue
        seen.add(v.path)
        rules.append(_rule(v, owners.get(id(v)), hidden, placer, convention))
    rules_t = tuple(rules)
    return Derivation(
        mesh_shape=tuple(sizes.values()), axis_names=tuple(sizes), batch_axis=batch_axis,
        model_axis=model_axis, convention=convention, hidden=hidden, rules=rules_t,
        keys=_keys(rules_t),
    )


def layout_map_for(model: Any, mesh: Any, *, batch_axis: str | None = "batch",
                   model_axis: str = "model", convention: str = "megatron") -> Any:
    """A ``keras.distribution.LayoutMap`` over ``mesh`` that shards ``model``
    Megatron-style (``derive``'s rules): pass it to
    ``keras.distribution.ModelParallel``.

    ```python
    layout_map = layout_map_for(causal_lm, mesh)
    distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    ```

    The map is a plain Keras ``LayoutMap``: the same on the JAX backend and
    on torch with parity; its ``parity_derivation`` attribute holds the
    ``Derivation`` (every variable's role, layout and note). Raises as
    ``derive`` does.
    """
    derivation = derive(model, mesh, batch_axis=batch_axis, model_axis=model_axis,
                        convention=convention)
    layout_map = derivation.layout_map(mesh)
    # ``report`` reads the rules' notes (fallback layouts) from here.
    layout_map.parity_derivation = derivation
    return layout_map
