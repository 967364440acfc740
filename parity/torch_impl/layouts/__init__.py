"""parity's layouts on DTensor, one conversion each: parity mesh <-> torch
mesh (``meshes``), the spec <-> placements table (``placements``, pure), the
spec of a DTensor and its placements on a mesh, cached (``specs``), and
tensors built onto a layout (``tensors``)."""
