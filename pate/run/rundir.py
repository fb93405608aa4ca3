"""The run directory: every file a run writes, the JSON summaries, and the open run (:class:`Run`).
Producers (:mod:`pate.run.stages`) and consumers (the analysis, the report, the CLI) name files
through this module only; what each file holds: docs/pipeline.md ("The run directory")."""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import pathlib
import secrets
from typing import TYPE_CHECKING, Any

from pate.analysis.errors import CorruptFileError
from pate.core import keys as run_keys
from pate.core.io import atomic_write_json, ensure_writable_dir, read_json
from pate.teachers.errors import ConfigError

if TYPE_CHECKING:
    from pate.run.config import RunConfig

STAGES = ("partition", "teachers", "votes", "aggregate", "student", "analysis", "report")
PREREQUISITES = {stage: STAGES[i - 1] if i else None for i, stage in enumerate(STAGES)}
#: The stages that compute with torch and record threads and GPU memory (the others set torch's
#: threads only if it is loaded already: `pate analyze` and `pate report` stay torch-free).
TORCH_STAGES = ("teachers", "votes", "aggregate", "student")
#: The ``pate`` subcommand that runs each stage.
COMMANDS = {
    "partition": "partition",
    "teachers": "train-teachers",
    "votes": "vote",
    "aggregate": "aggregate",
    "student": "train-student",
    "analysis": "analyze",
    "report": "report",
}

#: The owner-only folder (0700) of everything a run must not publish; the rest of the top is
#: publishable or a setting (``config.json``, ``run.json``); ``pate export`` bundles it.
PRIVATE_DIR = run_keys.PRIVATE_DIR
_PRIVATE = f"{PRIVATE_DIR}/"

CONFIG = "config.json"
STATE = "run.json"
KEYS = run_keys.KEYS_FILE
PARTITION = _PRIVATE + "partition.npz"
TEACHERS = _PRIVATE + "teachers"
TEACHER_PREDICTIONS = _PRIVATE + "teachers/predictions.npz"
TEACHER_METRICS = _PRIVATE + "teachers/metrics.json"
VOTES = _PRIVATE + "votes.npy"
KNN_EMBEDDINGS = _PRIVATE + "knn_embeddings.npz"
#: the charged mechanism's outputs and their post-processing: publishable
LABELS = "labels.npy"
LABEL_SCORES = "label_scores.npy"
ANSWERED = "answered.npy"
AGGREGATE = _PRIVATE + "aggregate.json"
PENDING = _PRIVATE + "aggregate.pending.npz"
#: the released student (publishable)
STUDENT_WEIGHTS = "student.pt"
#: its table encoder, fitted on public rows (JSON; pate.student.raw_rows.ENCODER_FILE)
STUDENT_ENCODER = "student_encoder.json"
STUDENT_CHECKPOINTS = "student"
STUDENT_METRICS = _PRIVATE + "student_metrics.json"
ANALYSIS = _PRIVATE + "analysis.json"
STAGE_DIR = _PRIVATE + "stages"
#: the publishable report (its public part only) and its publishable plots
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
#: the internal report (every figure, for the operator) and its plots
REPORT_INTERNAL_MD = _PRIVATE + "report_internal.md"
REPORT_INTERNAL_JSON = _PRIVATE + "report_internal.json"
PRIVATE_PLOTS_DIR = _PRIVATE + "plots"
#: The format of a run directory (``run.json``'s ``format``); any other is refused.
FORMAT = 3

#: Keys of ``aggregate.json``.
AGGREGATE_KEYS = frozenset(
    "mechanism params budget_eps delta budget_basis conversion queries_offered queries_asked "
    "queries_answered stop_reason eps_data_independent eps_data_dependent run_id dataset "
    "ledger events release release_plan noise_seeded reserved_queries rounds".split()
)
#: Keys of ``student_metrics.json``.
STUDENT_METRICS_KEYS = frozenset(
    "accuracy per_class_accuracy confusion_matrix num_examples method model num_labelled "
    "num_public settings train_seconds".split()
)
#: Keys of ``run.json``.
STATE_KEYS = frozenset(
    {"format", "run_id", "created", "stream_seed", "ledger", "config_comparable"}
)


def preprocessing_lines(run_dir) -> list[str]:
    """The table encoder's description (``student_encoder.json``, fitted on public rows only),
    in plain lines for the report; [] for a run on arrays or before its student stage."""
    path = pathlib.Path(run_dir) / STUDENT_ENCODER
    if not path.is_file():
        return []
    lines = read_json(path, what="the student's table encoder").get("describe")
    return [str(line) for line in lines] if isinstance(lines, list) else []


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def new_run_id(name: str) -> str:
    """A fresh, unique run id: the ledger charges each run id once."""
    return f"{name}-{secrets.token_hex(6)}"


class RunCopyError(ConfigError):
    """The run directory is a copy of the one its run started in (:meth:`Run.check_not_a_copy`)."""


def directory_identity(run_dir) -> dict:
    """``{"path", "device", "inode"}`` of a run directory (:meth:`Run.check_not_a_copy`)."""
    run_dir = pathlib.Path(run_dir)
    st = run_dir.stat()
    return {"path": str(run_dir.resolve()), "device": int(st.st_dev), "inode": int(st.st_ino)}


#: The config tables that may change on resume until the stage that reads them has run (a
#: student refused by preflight, or whose training failed, is corrected after the charge).
OPEN_UNTIL = {"student": "student"}


def open_tables(run: Run) -> tuple[str, ...]:
    """The tables of :data:`OPEN_UNTIL` whose stage ``run`` has not run yet."""
    return tuple(table for table, stage in OPEN_UNTIL.items() if not run.done(stage))


def comparable(config: dict, *, ignore: tuple[str, ...] = ()) -> dict:
    """The parts of a config that must not change on resume: all but how and where it runs
    (``[run]`` device, run_dir, threads, feature_cache; ``[cluster]``), the lifetime budget (the
    ledger's: a run stopped by its budget resumes once ``pate budget set`` raised it) and the
    tables of ``ignore`` (:func:`open_tables`)."""
    out = copy.deepcopy(config)
    for key in ("device", "run_dir", "threads", "feature_cache"):  # how and where, not what
        out.get("run", {}).pop(key, None)
    out.get("privacy", {}).pop("budget_eps", None)
    out.pop("cluster", None)
    for table in ignore:  # open_tables(run): may still change
        out.pop(table, None)
    return out


def read_summary(path: pathlib.Path, keys: frozenset[str]) -> dict:
    """A JSON summary of the run directory, checked to hold ``keys`` (names the file if not)."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise CorruptFileError(
            f"{path} must hold a JSON object; the run directory was modified or "
            "belongs to another version of pate-learn: start a new run",
            path=path,
        )
    missing = sorted(keys - set(doc))
    if missing:
        raise CorruptFileError(
            f"{path} lacks {', '.join(missing)}; it was written by another "
            "version of pate-learn or modified: start a new run",
            path=path,
        )
    return doc


@dataclasses.dataclass
class RunContext:
    """What an open run holds in memory beside its files, never saved."""

    threads_source: str = "config"  # of [run] threads: "config", "flag" or "keyword"
    teacher_model: Any = None  # a model given as a Python object, or a factory's estimator
    student_model: Any = None
    fitted_student: Any = None  # what pate.fit returns
    identity: Any = None  # the private split's identity, hashed once per open run
    dataset_id: str | None = None  # the ledger's keyed id of the records (run.json keeps it)
    recorded_budget_eps: float | None = None  # the budget the run last ran under
    budget_noted: float | None = None  # the budget already logged in this process


class Run:
    """An open run directory: its validated ``config`` and ``state`` (``run.json``)."""

    def __init__(
        self, run_dir: pathlib.Path, config: RunConfig, state: dict, *, progress: bool = True
    ) -> None:
        self.run_dir = pathlib.Path(run_dir)
        self.config = config
        self.state = state
        self.progress = bool(progress)
        self._data = None
        self._keys: dict[str, bytes] = {}
        self.context = RunContext()

    @classmethod
    def create(cls, config: RunConfig, *, progress: bool = True, run_dir=None) -> Run:
        """A new run in ``run_dir`` (default: the config's), which must be new or empty; the
        ledger's absolute path is resolved once, so every later stage charges the same one."""
        run_dir = pathlib.Path(run_dir or config.run.directory())
        if (run_dir / STATE).exists():
            raise ConfigError(
                f"run directory {run_dir} already holds a run; pass --resume to "
                "continue it, or choose another --run-dir / [run] name"
            )
        # empty, or holding only the keys a run's checks drew before it started (:meth:`key`)
        only_keys = {PRIVATE_DIR, KEYS}
        if run_dir.exists() and (
            not run_dir.is_dir()
            or any(p.relative_to(run_dir).as_posix() not in only_keys for p in run_dir.rglob("*"))
        ):
            raise ConfigError(
                f"run directory {run_dir} exists and is not an empty directory; "
                "choose another --run-dir / [run] name"
            )
        ledger, section = config.privacy.ledger_path(), config.run
        state = {
            "format": FORMAT,
            "run_id": new_run_id(section.name),
            "created": now_utc(),
            # the non-noise streams (teachers' initialisation, student) from the user's seed,
            # else from one fresh OS-entropy seed kept here (an interrupted run resumes the same)
            "stream_seed": secrets.randbits(63) if section.seed is None else section.seed,
            "ledger": None if ledger is None else str(ledger),
            "config_comparable": comparable(config.to_dict()),
        }
        return cls(run_dir, config, state, progress=progress)

    def start(self) -> None:
        """Write ``config.json`` and ``run.json`` (once; a started run is left as it is)."""
        if (self.run_dir / STATE).exists():
            return
        ensure_writable_dir(self.run_dir, flag="--run-dir")
        run_keys.make_private_dir(self.run_dir / PRIVATE_DIR)
        if self._keys:  # drawn before the run started (the data's split): kept from now on
            run_keys.write_keys(self.path(KEYS), self._keys)
        # this directory instance: a copy of it must not draw or charge under this run id
        self.state = dict(self.state, directory=directory_identity(self.run_dir))
        if self.context.dataset_id is not None:  # the ledger's id of the records it starts on
            self.state["dataset_id"] = self.context.dataset_id
        atomic_write_json(self.run_dir / CONFIG, self.config.to_dict())
        atomic_write_json(self.run_dir / STATE, self.state)

    def check_not_a_copy(self) -> None:
        """``RunCopyError`` in a copy of the directory the run was started in (another device
        or inode), before anything is drawn or charged: two copies drawing under one run id
        would be two releases charged as one. A ``mv`` on the same filesystem, or the same path
        and inode under a renumbered device, is accepted; a run not started yet is not checked."""
        recorded = self.state.get("directory")
        if not isinstance(recorded, dict):
            return
        here = directory_identity(self.run_dir)
        # the same inode on the same device or path (device numbers can change on a remount)
        if recorded.get("inode") == here["inode"] and (
            recorded.get("device") == here["device"] or recorded.get("path") == here["path"]
        ):
            return
        raise RunCopyError(
            f"{self.run_dir} is a copy of run {self.run_id} (started in {recorded.get('path')}, "
            f"device {recorded.get('device')} inode {recorded.get('inode')}; this directory is "
            f"device {here['device']} inode {here['inode']}): a copy cannot draw or charge "
            "answers under that run's id; start a new run from it with fork_run (its partition, "
            "teachers and votes, a new run id) or use a new run directory"
        )

    @classmethod
    def open(cls, run_dir, *, progress: bool = True) -> Run:
        """Reopen a started run from its ``config.json`` and ``run.json``."""
        from pate.run.config import build

        run_dir = pathlib.Path(run_dir)
        if not (run_dir / STATE).is_file():
            raise FileNotFoundError(
                f"{run_dir} holds no run (no {STATE}); start one with "
                f"`pate run --config FILE --run-dir {run_dir}` or a stage "
                f"command with --config FILE"
            )
        found = read_summary(run_dir / STATE, frozenset()).get("format")
        if found != FORMAT:  # before its other files are read: they may be laid out otherwise
            raise ConfigError(
                f"{run_dir} has run format {found!r}, made by another version of pate-learn "
                f"(this one reads run format {FORMAT} only); start a new run"
            )
        state = read_summary(run_dir / STATE, STATE_KEYS)
        config = build(read_json(run_dir / CONFIG), where=str(run_dir / CONFIG))
        run = cls(run_dir, config, state, progress=progress)
        run.context.recorded_budget_eps = config.privacy.budget_eps
        return run

    def update_config(self, config: RunConfig) -> None:
        """Replace the config of a started run (a stage command's flags for stages not run
        yet); every finished stage must be unaffected, which the caller checked."""
        self.config = config
        self.state = dict(self.state, config_comparable=comparable(config.to_dict()))
        atomic_write_json(self.run_dir / CONFIG, config.to_dict())
        atomic_write_json(self.run_dir / STATE, self.state)

    @property
    def run_id(self) -> str:
        return self.state["run_id"]

    def path(self, name: str) -> pathlib.Path:
        return self.run_dir / name

    @property
    def started(self) -> bool:
        return (self.run_dir / STATE).exists()

    def key(self, name: str) -> bytes:
        """The run's secret key ``name`` (:mod:`pate.core.keys`): derived from ``[run] seed``
        when given, else OS entropy drawn when first asked for, kept in ``private/keys.json``."""
        seed = self.config.run.seed
        if seed is not None:
            return run_keys.seeded_key(seed, name)
        if name not in self._keys:
            self._keys.update(run_keys.read_keys(self.path(KEYS)))
        if name not in self._keys:
            self._keys[name] = run_keys.fresh_key()
            if self.started:
                run_keys.write_keys(self.path(KEYS), self._keys)
        return self._keys[name]

    def done(self, stage: str) -> bool:
        return (self.run_dir / STAGE_DIR / f"{stage}.json").exists()

    def mark(self, stage: str, info: dict) -> dict:
        """Record ``stage`` as done (``private/stages/<stage>.json``), after making everything
        its stage wrote under ``private/`` owner-only (:func:`pate.core.keys.seal`)."""
        run_keys.make_private_dir(self.run_dir / STAGE_DIR)
        run_keys.seal(self.run_dir / PRIVATE_DIR)
        info = dict(info, finished=now_utc())
        atomic_write_json(self.run_dir / STAGE_DIR / f"{stage}.json", info)
        return info

    def stage_info(self, stage: str) -> dict:
        return read_json(self.run_dir / STAGE_DIR / f"{stage}.json")

    def provide_data(self, data) -> None:
        """Give the run its data in memory (``[data] name = "memory:<name>"``, from pate.fit),
        which must carry the name the run was started with."""
        started_on = self.config.data.name
        if data.name != started_on:
            raise ConfigError(
                f"{self.run_dir} was started on the data {started_on!r}, "
                f"not on these records ({data.name}); use a new run directory"
            )
        self._data = data

    @property
    def data(self):
        """The dataset of ``[data]`` (loaded once; torch-free loaders for tabular data)."""
        if self._data is None:
            name = self.config.data.name
            if name.startswith("memory:"):
                raise ConfigError(
                    f"{self.run_dir}: this run's data was given in memory (pate.fit); "
                    "continue it from Python with the same data (pate.fit(..., "
                    "run_dir=..., resume=True))"
                )
            self._data = self.config.load_data(run_dir=self.run_dir, keep_split_key=True)
        return self._data

    def streams(self):
        """The seeded streams of the partition, the teachers and the student."""
        from pate.core.rng import make_streams

        return make_streams(self.state["stream_seed"])

    def noise_streams(self):
        """The aggregator's and the release's noise: OS entropy unless the user seeded it."""
        from pate.core.rng import make_streams

        seed = self.config.aggregator.noise_seed
        return make_streams(seed, secure=seed is None)

    @property
    def ledger_path(self) -> pathlib.Path | None:
        return None if self.state["ledger"] is None else pathlib.Path(self.state["ledger"])

    def python_object(self, key: str, setting):
        """The Python object behind a ``python:...`` config value, the scikit-learn estimator a
        ``package.module:factory`` returns, or ``setting`` itself (a torch factory stays a name)."""
        from pate.teachers.models import factory_estimator, is_factory_spec

        given = getattr(self.context, key)
        if is_factory_spec(setting):
            if given is None:
                given = factory_estimator(
                    setting, input_shape=self.data.input_shape, num_classes=self.data.num_classes
                )
                if given is None:
                    return setting
                setattr(self.context, key, given)
            return given
        if not (isinstance(setting, str) and setting.startswith("python:")):
            return setting
        if given is None:
            raise ConfigError(
                f"{self.run_dir}: the {key.replace('_', ' ')} {setting[7:]} was given "
                "as a Python object (pate.fit); continue the run from Python with the "
                "same object"
            )
        return given

    def ledger(self):
        """A new connection to the run's ledger (None when the ledger is off); close it."""
        if self.ledger_path is None:
            return None
        from pate.ledger import Ledger

        return Ledger(self.ledger_path)
