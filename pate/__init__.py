"""pate-learn: Private Aggregation of Teacher Ensembles.

Importing ``pate`` never imports torch: the CLI's analysis commands start fast and an
auditor can use the privacy arithmetic (``analysis``) without it.
"""

from analysis.errors import (BudgetExceededError, ConfigError, DatasetNotFoundError,
                             LedgerError, PartitionError, PateError)

__version__ = "0.1.0"

__all__ = ["BudgetExceededError", "ConfigError", "DatasetNotFoundError", "LedgerError",
           "PartitionError", "PateError", "__version__"]
