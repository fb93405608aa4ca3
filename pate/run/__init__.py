"""The orchestration layer: one run of the pipeline, above the teachers and the student.

The config (:mod:`pate.run.config`), the plan made before any record is read
(:mod:`pate.run.planner`), each stage implemented once (:mod:`pate.run.stages`), their sequence
and resume (:mod:`pate.run.pipeline`), the run directory's files (:mod:`pate.run.rundir`), the
numbers of the report (:mod:`pate.run.run_analysis`) and the report itself
(:mod:`pate.run.report`). A module here may import the layers below (student, teachers, pate
core, analysis), never the CLI (the import-linter contract of ``pyproject.toml``;
docs/architecture.md).
"""
