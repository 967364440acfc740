"""parity's layouts on DTensor: meshes (``meshes``), specs <-> placements
(``placements``) and DTensor specs of tensors (``tensors``)."""
