"""The API functions of SPEC (group ``api``: ``distribute_tensor``,
``all_reduce``...), called through each backend module ``B``: the same
expression on both sides. Exact unless they reduce.
"""

from __future__ import annotations

from conformance.catalogue.entry import F32, M2, Op, ShapeSet


def _api() -> list[Op]:
    ops: list[Op] = []

    def api_op(name, expr, args, shape_sets, variants, tol="exact", **kw):
        ops.append(Op(name, "api", expr, expr, args, shape_sets, variants, tol=tol,
                      grad=False, **{"budget": (3, 5, 5), **kw}))

    api_op("distribute_tensor", "B.distribute_tensor(a, target)", (F32,), M2,
           ({"target": "sample"},), budget=(3, 8, 8),
           doc="reshard to kwargs.target (a layout); 'sample' is filled in per case")
    api_op("distribute_data_input", "B.distribute_data_input(a, target)", (F32,),
           (ShapeSet("div", ((8, 16),)),), ({"target": "sample"},), budget=(1, 1, 1),
           doc="host batch -> global batch laid out as kwargs.target")
    api_op("all_reduce", "B.all_reduce(a, op=op, axis_name=axis_name)", (F32,),
           (ShapeSet("div", ((8, 16),)),),
           tuple({"op": o, "axis_name": "sample"} for o in ("sum", "mean", "max", "min")),
           tol="reduction", budget=(1, 2, 2))
    api_op("all_gather", "B.all_gather(a, axis=axis, axis_name=axis_name)", (F32,),
           (ShapeSet("div", ((8, 16),)),),
           ({"axis": 0, "axis_name": "sample"}, {"axis": 1, "axis_name": "sample"}),
           budget=(2, 4, 4))
    api_op("reduce_scatter", "B.reduce_scatter(a, axis=axis, axis_name=axis_name, op=op)",
           (F32,), (ShapeSet("div", ((16, 32),)),),
           ({"axis": 0, "axis_name": "sample", "op": "sum"},
            {"axis": 1, "axis_name": "sample", "op": "max"}),
           tol="reduction", budget=(2, 4, 4))
    api_op("all_gather_variable", "B.all_gather_variable(a)", (F32,), M2, ({},),
           budget=(3, 6, 6))
    return ops


OPS: tuple[Op, ...] = tuple(_api())
