"""Not a module: the top folder of a parity checkout.

Python imports this file only when the folder holding the checkout is the
current folder (or on ``sys.path``) and the checkout's folder is named
``parity``: ``import parity`` then finds this folder before the installed
package. Without this file Python would make the folder a namespace package
that silently shadows parity (``AttributeError: module 'parity' has no
attribute 'use_backend'``, with an editable install, whose finder runs after
the path scan). With it, the import fails and says what happened.
"""

import os as _os

_root = _os.path.dirname(_os.path.abspath(__file__))
if __name__ == "parity" and _os.path.isfile(_os.path.join(_root, "parity", "__init__.py")):
    raise ImportError(
        f"`import parity` found {_root}, the top folder of a parity checkout, instead "
        f"of the parity package (which is {_os.path.join(_root, 'parity')}): Python "
        f"searched the current folder ({_os.path.dirname(_root)}) first, and the checkout "
        "is named 'parity'. Fix: run from another folder (or from inside the checkout), "
        "or rename the checkout folder.",
        name="parity",
        path=__file__,
    )
