"""The run configuration of ``pate run``: a TOML file read once into a typed, frozen
:class:`RunConfig` and validated up front. Its tables and keys, the noise, the ledger and the
modules of this package: docs/config.md."""

from pate.run.config.errors import SettingError
from pate.run.config.loading import (
    CONFIGS_FOLDER,
    CONFIGS_PACKAGE,
    build,
    load,
    packaged_configs,
    read_toml,
    resolve_config,
)
from pate.run.config.messages import (
    assignment,
    budget_command,
    python_wording,
)
from pate.run.config.planning import facts_of, plan
from pate.run.config.run_config import SPLIT_KEY_PATH, RunConfig, evaluation_split_key
from pate.run.config.tables import DataTable, PrivacyTable, keys_of
from pate.run.config.validation import validate

__all__ = [
    "CONFIGS_FOLDER",
    "CONFIGS_PACKAGE",
    "SPLIT_KEY_PATH",
    "DataTable",
    "PrivacyTable",
    "RunConfig",
    "SettingError",
    "assignment",
    "budget_command",
    "build",
    "evaluation_split_key",
    "facts_of",
    "keys_of",
    "load",
    "packaged_configs",
    "plan",
    "python_wording",
    "read_toml",
    "resolve_config",
    "validate",
]
