"""What every other folder of the suite passes around, typed: a report's
records (``entries``: ``CaseEntry``, ``ArrayRecord``, ``ErrorRecord``,
``Comparison``...) and input values (``values``: drawn from the case id,
encoded exactly). Imports nothing of the suite."""
