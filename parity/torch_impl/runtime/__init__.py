"""Where the backend runs: devices and ranks (``devices``), the mode it runs
in (``state``), lost-rank detection (``watchdog``, ``fault_diagnosis``) and
every torch-version difference (``torch_compat``)."""
