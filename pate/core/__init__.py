"""The pate core layer: the PATE steps on arrays, below the teachers and the student.

Random streams (:mod:`pate.core.rng`), atomic files (:mod:`pate.core.io`), CPU threads
(:mod:`pate.core.threads`), the shards of the private data (:mod:`pate.core.partition`), the
votes (:mod:`pate.core.votes`, :mod:`pate.core.knn`, :mod:`pate.core.mean_release`) and the noisy
aggregators (:mod:`pate.core.aggregators`). The mechanisms' registry (:mod:`pate.mechanisms`) and
the privacy-budget ledger (:mod:`pate.ledger`) belong to this layer too, each in its own folder.
A module here imports from this layer and from :mod:`pate.analysis` only (the import-linter
contract of ``pyproject.toml``; docs/architecture.md).
"""
