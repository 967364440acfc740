"""Error categories: the exception's type decides; library messages are read
in one place (``conformance.running.errors.foreign_category``), one test each."""

from __future__ import annotations

import pytest

import parity
from conformance.running.errors import FOREIGN_MESSAGES, FOREIGN_TYPES, categorize, error_record


@pytest.mark.parametrize("err, category", [
    (parity.LayoutError("x", what="spec", value=None), "invalid-layout"),
    (parity.IndivisibleError("x", dim=0, size=6, axes=("x",), shards=8), "indivisible"),
    (parity.MeshMismatchError("x", first=None, second=None), "invalid-layout"),
    (parity.UnsupportedOpError("x", op="cat"), "unsupported"),
    (parity.ParityError("x"), "other"),
])
def test_a_parity_error_s_category_is_its_class_s(err, category):
    assert categorize(err) == category


def test_a_parity_error_s_message_does_not_change_its_category():
    # The message reads like another category's; the type wins.
    err = parity.LayoutError("does not divide; ambiguous; not supported", what="spec", value=None)
    assert categorize(err) == "invalid-layout"


def test_jax_s_sharding_type_error_is_ambiguous_sharding():
    class ShardingTypeError(TypeError):  # jax._src.core.ShardingTypeError, by name
        pass

    assert "ShardingTypeError" in FOREIGN_TYPES
    assert categorize(ShardingTypeError("dot_general ... involves an unreduced")) == \
        "ambiguous-sharding"


def test_dtensor_mixed_tensor_and_dtensor_is_unsupported():
    message = ("aten.add.Tensor got mixed torch.Tensor and DTensor, need to convert all "
               "torch.Tensor to DTensor before calling distributed operators!")
    assert categorize(RuntimeError(message)) == "unsupported"


def test_dtensor_in_place_op_needing_a_placement_change_is_unsupported():
    message = ("aten.add_.Scalar: in-place operations that require placement changes are not "
               "supported. The operation would change the placement from (Partial(sum),) to "
               "(Replicate(),), please use the out-of-place op instead.")
    assert categorize(RuntimeError(message)) == "unsupported"


def test_dtensor_uneven_unflatten_is_indivisible():
    message = ("Cannot unflatten unevenly sharded tensor: output dimension 0 (size 2) is not "
               "evenly divisible by mesh dimension 0 (size 8). Please redistribute the tensor "
               "before this operation.")
    assert categorize(RuntimeError(message)) == "indivisible"


# JAX 0.10.2's own messages, as the catalogue's explicit cases record them
# (explicit_with_sharding_constraint, shard_map_psum on a replicated operand).
def test_jax_with_sharding_constraint_assert_on_explicit_axes_is_ambiguous_sharding():
    message = ("`with_sharding_constraint` acts as an assert when all axes of mesh are of type "
               "`Explicit`. The array sharding: P(None, None) did not match the sharding "
               "provided: P('data', None). Please use `jax.sharding.reshard` to shard your "
               "input to the sharding you want.")
    assert categorize(ValueError(message)) == "ambiguous-sharding"


def test_jax_shard_map_argument_not_its_in_specs_is_ambiguous_sharding():
    message = ("in_specs passed to shard_map: P('data', 'model') does not match the specs of "
               "the input: P(None, None) for arg: float32[8,16]. `in_specs` is an optional "
               "argument so you can omit specifying it and shard_map will infer the in_specs "
               "from the arguments.")
    assert categorize(ValueError(message)) == "ambiguous-sharding"


def test_every_known_library_message_has_a_test_here():
    tested = {"got mixed torch\\.Tensor and DTensor",
              "in-place operations that require placement changes are not supported",
              "Cannot unflatten unevenly sharded tensor",
              ("`with_sharding_constraint` acts as an assert when all axes of mesh are "
               "of type `Explicit`"),
              "in_specs passed to shard_map: .* does not match the specs of the input"}
    assert {pattern.pattern for _, pattern, _ in FOREIGN_MESSAGES} == tested


@pytest.mark.parametrize("err", [
    RuntimeError("some dim does not divide evenly"),  # text of another category: not read
    ValueError("matmul input operand 1 must have ndim at least 1, but it has ndim 0"),
    TypeError("matmul(): argument 'other' (position 2) must be Tensor, not float"),
    NameError("name 'axis' is not defined"),
])
def test_any_other_library_exception_is_other(err):
    assert categorize(err) == "other"


def test_error_record_names_category_type_and_message():
    rec = error_record(parity.LayoutError("axis 'z' is not a mesh axis", what="axis", value="z"))
    assert rec == {"category": "invalid-layout", "type": "LayoutError",
                   "message": "axis 'z' is not a mesh axis"}
