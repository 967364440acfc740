"""JAX's sharding-in-types rules over parity specs, with no framework.

A spec is JAX's ``PartitionSpec`` as parity writes it: one tuple of mesh-axis
names per dim, ``()`` for replicated (``parity.layout.Spec``); ``sizes`` maps
each mesh axis name to its size. Every function here is pure: specs, shapes
and sizes in, specs out. The torch backend's rules
(``parity.torch_impl.semantics.rules``) parse a torch call and call these;
``tests/test_sharding_rules.py`` checks them against JAX's own output
shardings (explicit axis types).

* ``basics``: shard counts, fitting a spec to a shape, dedupe, replicating dims;
* ``broadcast``: elementwise ops (``broadcasting_sharding_rule``);
* ``reshape``: split/merge of dims (``_reshape_sharding_rule``);
* ``contraction``: dot_general / einsum (``_dot_general_sharding_rule``);
* ``structure``: reductions, transposes, concatenation, stacking, splitting,
  indexing, sorting and padding;
* ``slicing``: ops whose dims change size and keep their sharding
  (``_get_sharding_for_varying_out_shape``: slices, pads, splits, roll, tile);
* ``gather``: gathers (take, advanced indexing, diagonal).

Where JAX's explicit mode refuses an op as ambiguous, a function still
answers -- the choice JAX's auto mode and Keras make -- and says so
(``chosen``); where JAX has no answer at all (a reshape it cannot express),
it returns ``None``.
"""

from parity.sharding_rules.basics import (
    dedupe,
    fit_to_shape,
    replicate_dims,
    shard_count,
)
from parity.sharding_rules.broadcast import aligned, broadcast, broadcast_shape, select
from parity.sharding_rules.contraction import Contraction, contract, matmul_letters
from parity.sharding_rules.gather import diagonal, take_along, take_refused
from parity.sharding_rules.reshape import reshape_spec
from parity.sharding_rules.slicing import pieces_refused, roll, tile, varying_refused
from parity.sharding_rules.structure import (
    advanced_dims,
    concat,
    index,
    movedim_perm,
    pad_dims,
    permute,
    reduce,
    sort_along,
    split,
    stack,
    swap_perm,
)

__all__ = [
    "Contraction", "advanced_dims", "aligned", "broadcast", "broadcast_shape", "concat",
    "contract", "dedupe", "diagonal", "fit_to_shape", "index", "matmul_letters", "movedim_perm",
    "pad_dims", "permute", "pieces_refused", "reduce", "replicate_dims", "reshape_spec", "roll",
    "select", "shard_count", "sort_along", "split", "stack", "swap_perm", "take_along",
    "take_refused", "tile", "varying_refused",
]
