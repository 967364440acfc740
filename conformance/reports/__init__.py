"""Reports and comparisons: the report header, writer and loader
(``report``), the compiled column's header and counts (``compiled``),
verdicts (``compare``), semantics diffs (``diff``), the HTML report
(``html``, ``templates/``) and the terminal summary (``summary``). Stands on
``catalogue`` and ``records``; runs nothing."""
