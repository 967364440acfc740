"""Arrays onto layouts and back: ``distribute`` (distribute_*, to_numpy,
local_block) and ``describe`` (describe(x) -> Placement)."""
