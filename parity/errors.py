"""Error classes shared by every backend, one class per category.

All parity errors are ``ValueError`` subclasses, so code written against
Keras's distribution API (which raises ``ValueError``) keeps working. Each
class names its conformance category in ``category`` and carries the data of
the failure as attributes: a caller decides on the type and reads the
attributes, never the message.

| class                    | category             | carries                       |
|--------------------------|----------------------|-------------------------------|
| ``LayoutError``          | ``invalid-layout``   | ``what``, ``value``           |
| ``MeshMismatchError``    | ``invalid-layout``   | ``first``, ``second`` (meshes)|
| ``IndivisibleError``     | ``indivisible``      | ``dim``, ``size``, ``axes``,  |
|                          |                      | ``shards``                    |
| ``ShardingTypeError``    | ``ambiguous-sharding``| ``op``, ``specs``, ``fix``  |
| ``UnsupportedOpError``   | ``unsupported``      | ``op``, ``placements``,       |
|                          |                      | ``reason``                    |
| ``LostRankError``        | ``other``            | ``rank`` (the lost peer)      |
| ``DonatedArrayError``    | ``other``            | ``what`` (the call it went to)|
| ``KerasInstallError``    | ``other``            | ``keras_version``, ``module`` |
| ``KerasCompileError``    | ``unsupported``      | ``model``, ``step``, ``layer``,|
|                          |                      | ``reason``                    |
| ``ParityError`` (other)  | ``other``            | --                            |
"""

from __future__ import annotations

from typing import Any, ClassVar


class ParityError(ValueError):
    """Base class of every error parity raises on purpose."""

    category: ClassVar[str] = "other"


class LayoutError(ParityError):
    """A layout that cannot apply: unknown or repeated mesh axis, wrong rank,
    an axis or tensor dim out of range. ``what`` names the argument at fault
    (``"axis_names"``, ``"spec"``, ``"key"``...), ``value`` is the value
    refused."""

    category: ClassVar[str] = "invalid-layout"

    def __init__(self, message: str, *, what: str, value: Any) -> None:
        super().__init__(message)
        self.what, self.value = what, value


class ShardingError(ParityError):
    """A valid layout that cannot shard this tensor, or operands that cannot
    meet. Raised as one of its subclasses."""

    category: ClassVar[str] = "invalid-layout"


class IndivisibleError(ShardingError):
    """Tensor dim ``dim`` of size ``size`` does not divide by ``shards``, the
    product of the sizes of mesh axes ``axes`` (JAX refuses uneven shards)."""

    category: ClassVar[str] = "indivisible"

    def __init__(self, message: str, *, dim: int, size: int, axes: tuple[str, ...],
                 shards: int) -> None:
        super().__init__(message)
        self.dim, self.size, self.axes, self.shards = dim, size, tuple(axes), shards


class MeshMismatchError(ShardingError):
    """Operands of one op live on two different meshes, ``first`` and
    ``second``."""

    category: ClassVar[str] = "invalid-layout"

    def __init__(self, message: str, *, first: Any, second: Any) -> None:
        super().__init__(message)
        self.first, self.second = first, second


class UnsupportedOpError(ParityError):
    """``op`` cannot run on operands with ``placements``; ``reason`` says
    why."""

    category: ClassVar[str] = "unsupported"

    def __init__(self, message: str, *, op: str, placements: tuple = (),
                 reason: str = "") -> None:
        super().__init__(message)
        self.op, self.placements, self.reason = op, tuple(placements), reason


class LostRankError(ParityError):
    """A peer ``rank`` of the job died, exited with an error, or stopped
    responding (``None`` when no single rank is to blame)."""

    def __init__(self, message: str, *, rank: int | None) -> None:
        super().__init__(message)
        self.rank = rank


class DonatedArrayError(ParityError):
    """An array given to a collective with ``donate=True`` was used again:
    its buffer now holds the collective's result (JAX's ``donate_argnums``:
    "Array has been deleted"). ``what`` names the call it was donated to."""

    def __init__(self, message: str, *, what: str) -> None:
        super().__init__(message)
        self.what = what


class KerasInstallError(ParityError):
    """``install_keras()`` could not install parity into this Keras: a module
    it patches was not found under any known name (``module``: the names
    tried), or the Keras backend is not torch. Nothing stays patched.
    ``keras_version`` names the Keras that was found."""

    def __init__(self, message: str, *, keras_version: str, module: str | None = None) -> None:
        super().__init__(message)
        self.keras_version = keras_version
        self.module = module


class KerasCompileError(ParityError):
    """``model.compile(jit_compile=True)``: ``torch.compile`` could not
    compile a Keras ``step`` (``"train"``, ``"test"``, ``"predict"``) of
    ``model``; ``layer`` names the layer whose code it failed in (``None``
    when the failure is outside every layer), ``reason`` is torch's."""

    category: ClassVar[str] = "unsupported"

    def __init__(self, message: str, *, model: str, step: str, layer: str | None,
                 reason: str) -> None:
        super().__init__(message)
        self.model, self.step, self.layer, self.reason = model, step, layer, reason


CATEGORIES = ("indivisible", "invalid-layout", "ambiguous-sharding", "unsupported", "other")


# ---------------------------------------------------------------- explicit axes
# Kept in its own block: JAX's explicit-sharding model (parity.AxisType).


class ShardingTypeError(ShardingError):
    """On ``Explicit`` mesh axes, ``op``'s result sharding is not fixed by
    its operands' ``specs`` (one spec tuple per operand, as
    ``parity.layout.Spec``), or a value's type does not match what is
    asked of it: JAX raises ``jax.sharding.ShardingTypeError`` there.
    ``fix`` names the ``reshard`` (or ``out_specs``) that makes the program
    well typed."""

    category: ClassVar[str] = "ambiguous-sharding"

    def __init__(self, message: str, *, op: str, specs: tuple = (), fix: str = "") -> None:
        super().__init__(message)
        self.op, self.specs, self.fix = op, tuple(specs), fix
