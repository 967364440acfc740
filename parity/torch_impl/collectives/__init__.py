"""One collective's meaning: the eager path (``eager``), its traced twin
(``traced``), one block through one process group (``blocks``), the whole
array in one all_gather (``gather``) and donation (``donation``)."""
