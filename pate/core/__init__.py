"""The pate core layer: the PATE steps on arrays, below the teachers and the student (its modules:
docs/architecture.md). A module here imports from this layer and from :mod:`pate.analysis` only.
"""
