"""The runs layer: how a config becomes a run id and a record dir, the records themselves, resume state, lookup
of finished runs, config validation, and the runs CLI (``python -m oscrepro.runs``). It sits below both training
(:mod:`oscrepro.train`) and the table engine (:mod:`oscrepro.tables`) and imports neither."""
