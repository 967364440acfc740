"""shard_map bodies run by ``shard_map_worker.py`` on 4 gloo ranks and by
``tests/test_shard_map_ranks.py`` in JAX: ``name -> (body(lax, b),
out_specs entries)``, on a (2, 2) ``("data", "model")`` mesh with the input
laid out as ``P("data", "model")``. No framework is imported here."""

import numpy as np

X = (np.arange(64.0, dtype=np.float32).reshape(8, 8) - 30.0) / 8
IN = ("data", "model")

CASES = {
    "psum": (lambda lax, b: lax.psum(b * b, "model"), ("data", None)),
    "pmean": (lambda lax, b: lax.pmean(b, ("data", "model")), ()),
    "all_gather": (lambda lax, b: lax.all_gather(b, "model", axis=1, tiled=True), IN),
    "psum_scatter": (lambda lax, b: lax.psum_scatter(b, "model", scatter_dimension=0,
                                                     tiled=True), IN),
    "ppermute": (lambda lax, b: lax.ppermute(b * b, "data", [(0, 1)]), IN),
    "all_to_all": (lambda lax, b: lax.all_to_all(b, "model", 0, 1, tiled=True), IN),
    "axis_index": (lambda lax, b: b * lax.axis_index("model") + lax.axis_index("data"), IN),
}
# the cases also run with the mapped function under torch.compile
COMPILED = ("psum", "all_gather", "ppermute", "all_to_all")
