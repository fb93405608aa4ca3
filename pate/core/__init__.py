"""The pate core layer: the PATE steps on arrays, below the teachers and the student.

Random streams (:mod:`pate.core.rng`), atomic files (:mod:`pate.core.io`), CPU threads
(:mod:`pate.core.threads`), the shards of the private data (:mod:`pate.core.partition`), the
votes (:mod:`pate.core.votes`, :mod:`pate.core.knn`), the class-means release
(:mod:`pate.core.mean_release`) and the rules that label from it (:mod:`pate.core.labelling_rules`,
:mod:`pate.core.quadratic_rule`, :mod:`pate.core.release_check`), the noisy aggregators
(:mod:`pate.core.aggregators`, :mod:`pate.core.online_aggregator`) and the defaults tuned on
benchmarks (:mod:`pate.core.tuned_defaults`). The mechanisms' registry (:mod:`pate.mechanisms`) and
the privacy-budget ledger (:mod:`pate.ledger`) belong to this layer too, each in its own folder.
A module here imports from this layer and from :mod:`pate.analysis` only (the import-linter
contract of ``pyproject.toml``; docs/architecture.md).
"""
