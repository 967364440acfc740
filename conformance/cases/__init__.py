"""Cases: the ``Case`` type, case files, and the default catalogue's cases.

| module         | what it holds |
|----------------|---------------|
| ``case``       | ``Case`` and ``Input`` (frozen), their JSON form, ``select`` |
| ``case_file``  | reading a case file: the JSON Schema check, each op's signature, ``CaseFileError`` naming the field |
| ``generation`` | the default catalogue's cases (``default_cases``), on ``MESHES`` |
| ``signatures`` | each op's case-file signature and the JSON Schema, from the catalogue |
| ``shape_check``| do a case's shapes fit its op (JAX ``eval_shape``) |

The names below are the package's interface; import them from here.
"""

from __future__ import annotations

from conformance.cases.case import Case, Input, Spec, layout_json, select, spec_text
from conformance.cases.case_file import (DEFAULT_AXIS_NAMES, CaseFileError, check_signature,
                                         load_case_file, parse_case, parse_cases, parse_layout,
                                         validate_schema)
from conformance.cases.generation import MESHES, all_specs, default_cases, generate_op_cases

__all__ = [
    "DEFAULT_AXIS_NAMES", "MESHES", "Case", "CaseFileError", "Input", "Spec", "all_specs",
    "check_signature", "default_cases", "generate_op_cases", "layout_json", "load_case_file",
    "parse_case", "parse_cases", "parse_layout", "select", "spec_text", "validate_schema",
]
