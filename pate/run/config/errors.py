"""The error of a config setting (:class:`SettingError`), and the texts several checks share."""

from __future__ import annotations

from typing import Any

from pate.teachers.errors import ConfigError


class SettingError(ConfigError):
    """A config setting is wrong: ``table``, ``key`` and ``value`` name it; the message says
    what is wrong and what to do, naming settings as TOML keys (``[privacy] delta``). The front
    ends word it for their callers (:func:`pate.run.config.messages.python_wording`)."""

    def __init__(self, table: str, key: str | None, value: Any, message: str) -> None:
        super().__init__(message)
        self.table, self.key, self.value = table, key, value


#: Why ``[data] records`` is needed and what to give.
RECORDS_NEEDED = (
    "[data] records is needed for your own data: declare an approximate number of private "
    "records (a public fact: the plan, the report and the released student are sized from it, "
    "so that nothing published depends on the exact count; within a factor 2 of the true count)"
)
