"""The run configuration of ``pate run``: a TOML file read once into a typed, frozen
:class:`RunConfig` and validated up front. Its tables and keys, the noise, the ledger and the
modules of this package: docs/config.md."""

from pate.run.config.errors import SettingError
from pate.run.config.keys import Interval, Options
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
from pate.run.config.tables import (
    SOFT_TARGET_TEMPERATURE,
    TABLE_TYPES,
    AggregatorTable,
    DataTable,
    KnnTable,
    PartitionTable,
    PrivacyTable,
    RunTable,
    StudentTable,
    TeachersTable,
    keys_of,
    keyword,
)
from pate.teachers.errors import ConfigError

__all__ = [
    "CONFIGS_FOLDER",
    "CONFIGS_PACKAGE",
    "SOFT_TARGET_TEMPERATURE",
    "SPLIT_KEY_PATH",
    "TABLE_TYPES",
    "AggregatorTable",
    "ConfigError",
    "DataTable",
    "Interval",
    "KnnTable",
    "Options",
    "PartitionTable",
    "PrivacyTable",
    "RunConfig",
    "RunTable",
    "SettingError",
    "StudentTable",
    "TeachersTable",
    "assignment",
    "budget_command",
    "build",
    "evaluation_split_key",
    "facts_of",
    "keys_of",
    "keyword",
    "load",
    "packaged_configs",
    "plan",
    "python_wording",
    "read_toml",
    "resolve_config",
]
