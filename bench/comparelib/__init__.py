"""``compare.py`` in parts: ``worker`` (one measurement in a fresh process), ``runs`` (the parent: plan,
workers, progress, roofline probe, outputs), ``targets`` (the issue's targets and the summary rows) and
``report`` (the markdown tables and the degree-sweep plot)."""
