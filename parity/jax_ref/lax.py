"""The collectives a ``shard_map`` body calls: JAX's own ``jax.lax``
functions, under the names ``parity.torch_impl.lax`` gives them."""

from jax.lax import (  # noqa: F401 - the re-export is this module's purpose
    all_gather,
    all_to_all,
    axis_index,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)

__all__ = ["all_gather", "all_to_all", "axis_index", "pmax", "pmean", "pmin", "ppermute",
           "psum", "psum_scatter"]
