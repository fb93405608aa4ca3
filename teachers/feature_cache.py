"""An on-disk cache of front-end features: computed once per input data and front-end settings,
memory-mapped by every later run and config that asks for the same features (docs/feature_cache.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import io
import json
import logging
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np

from pate.analysis.errors import InputError, InputTypeError
from pate.analysis.mapped import release_read
from pate.analysis.validation import check_int
from pate.core.errors import RunDirError
from pate.core.io import atomic_write_json, atomic_writer, fsync_dir, naming_write_errors

FORMAT = 1
ENV = "PATE_FEATURE_CACHE"
DIRNAME = ".feature-cache"
CHUNK_ROWS = 1024
_FEATURES, _ENTRY, _TMP = "features.npy", "entry.json", ".tmp-"
_OFF = frozenset({"", "0", "off", "false", "no", "none"})
logger = logging.getLogger("pate.teachers.feature_cache")


def resolve_root(setting, *, runs_root) -> pathlib.Path | None:
    """The cache folder: ``setting`` (``[run] feature_cache``: a path, or False for none) when
    given, else ``$PATE_FEATURE_CACHE`` (``off`` for none), else ``runs_root/.feature-cache``."""
    if setting is False:
        return None
    if setting is not None and setting is not True:
        if not isinstance(setting, (str, os.PathLike)) or not str(setting):
            raise InputTypeError(
                f"feature_cache must be a folder path, true or false, got {setting!r}"
            )
        return pathlib.Path(setting).expanduser()
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in _OFF else pathlib.Path(env).expanduser()
    return pathlib.Path(runs_root) / DIRNAME


def input_digest(x) -> str:
    """sha256 hex of the inputs ``x`` (N, ...) in order, as little-endian float32 with their
    shape: the features are a function of exactly these bytes (positional and label-free,
    unlike the ledger's ``dataset_identity``)."""
    n = len(x)
    h = hashlib.sha256(b"pate-learn feature-cache input v1\0")
    h.update(json.dumps([n, *(int(s) for s in np.shape(x)[1:])]).encode())
    for i in range(0, n, 8 * CHUNK_ROWS):
        h.update(np.ascontiguousarray(x[i : i + 8 * CHUNK_ROWS], dtype="<f4").tobytes())
        release_read(x[i : i + 8 * CHUNK_ROWS])  # a memory-mapped split: not kept resident
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class EntryKey:
    """What an entry holds: ``front_end`` (e.g. ``"scatternet"``) with ``settings`` (e.g.
    ``{"J": 2, "L": 8}``) applied to ``rows`` inputs of ``input_shape`` whose
    :func:`input_digest` is ``digest``; ``output_shape`` the shape of one row's features."""

    front_end: str
    settings: dict
    input_shape: tuple
    output_shape: tuple
    rows: int
    digest: str

    @classmethod
    def of(cls, x, *, front_end: str, settings: dict, output_shape) -> EntryKey:
        return cls(
            front_end=front_end,
            settings=dict(settings),
            input_shape=tuple(int(s) for s in np.shape(x)[1:]),
            output_shape=tuple(int(s) for s in output_shape),
            rows=len(x),
            digest=input_digest(x),
        )

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "front_end": self.front_end,
            "settings": self.settings,
            "input_shape": list(self.input_shape),
            "output_shape": list(self.output_shape),
            "rows": self.rows,
            "input_sha256": self.digest,
        }

    @property
    def name(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclasses.dataclass(frozen=True)
class CachedFeatures:
    """The features of one split: ``array`` (a read-only memory map of the entry, or an
    in-memory array when there is no cache), ``hit`` (True: read from the cache; False:
    computed now; None: no cache) and the ``seconds`` it took (checks included)."""

    array: np.ndarray
    hit: bool | None
    seconds: float
    path: pathlib.Path | None = None

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
        """float32 blocks of ``rows`` rows, in order, read as :meth:`take` reads them (so a pass
        over a split holds one block)."""
        rows = check_int(rows, "rows", minimum=1)
        for i in range(0, len(self), rows):
            yield self.take(np.arange(i, min(i + rows, len(self))))

    def take(self, rows) -> np.ndarray:
        """float32 ``(len(rows), ...)``: the features of the rows ``rows`` (indices, any order,
        repeats allowed), in that order. From an entry every run of consecutive rows is read with
        ``pread`` into a fresh buffer (not through the memory map, whose touched pages would
        count in the process's resident memory until it ends), so only the rows asked for are
        ever in memory; without an entry, rows of the in-memory array."""
        rows = np.asarray(rows)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            raise InputTypeError(
                f"rows must be a 1-D array of row indices, got {rows.dtype} {rows.shape}"
            )
        n = len(self)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise InputError(f"rows must lie in [0, {n}), got {int(rows.min())}..{int(rows.max())}")
        if self.path is None or not rows.size:
            return np.ascontiguousarray(self.array[rows], dtype=np.float32)
        return pread_rows(self.path, self.array.offset, np.dtype("<f4"), self.array.shape[1:], rows)


def pread_rows(path, offset: int, dtype: np.dtype, row_shape: tuple, rows) -> np.ndarray:
    """The rows ``rows`` (indices, any order, repeats allowed) of the C-ordered array of
    ``dtype`` and ``row_shape`` stored at byte ``offset`` of the file ``path``, in that order:
    every run of consecutive (sorted) rows is read with one ``pread`` into a fresh buffer, never
    through a memory map (whose fault-around would make a scattered gather resident: measured in
    docs/feature_cache.md)."""
    rows = np.asarray(rows)
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    order = np.argsort(rows, kind="stable")
    wanted = rows[order]
    out = np.empty((len(rows), *row_shape), dtype=dtype)
    if not len(rows):
        return out
    flat = out.reshape(len(rows), -1)
    breaks = np.flatnonzero(np.diff(wanted) != 1) + 1
    with open(path, "rb") as f:
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, len(wanted)]):
            first, count = int(wanted[lo]), int(wanted[hi - 1]) - int(wanted[lo]) + 1
            buf = os.pread(f.fileno(), count * row_bytes, offset + first * row_bytes)
            if len(buf) != count * row_bytes:
                raise OSError(f"{path}: short read at row {first} (file changed while read)")
            block = np.frombuffer(buf, dtype=dtype).reshape(count, -1)
            flat[order[lo:hi]] = block[wanted[lo:hi] - first]
    return out


def file_digest(path: pathlib.Path) -> str:
    """sha256 hex of the bytes of ``path``, read 4 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


class FeatureCache:
    """The cache in folder ``root`` (docs/feature_cache.md); created (mode 0700) on first
    use. ``summary()``: ``{"root", "hits", "misses", "entries": [{"front_end", "rows", "hit",
    "seconds"}, ...]}`` of this object's lookups."""

    def __init__(self, root) -> None:
        if not isinstance(root, (str, os.PathLike)) or not str(root):
            raise InputTypeError(f"root must be a folder path, got {root!r}")
        self.root = pathlib.Path(root)
        self._log: list[dict] = []

    # ------------------------------------------------------------------ the folder

    def _ensure_root(self) -> pathlib.Path:
        """Create the folder (0700), or check an existing one: ours, and narrowed to 0700."""
        with naming_write_errors(self.root):
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = self.root.stat()
            if not self.root.is_dir():
                raise RunDirError(
                    f"the feature cache {self.root} is not a folder; set [run] "
                    f"feature_cache or ${ENV} to a folder",
                    path=self.root,
                )
            if hasattr(os, "getuid") and st.st_uid != os.getuid():
                raise RunDirError(
                    f"the feature cache {self.root} belongs to another user (uid "
                    f"{st.st_uid}); it holds features of private records: set "
                    f"[run] feature_cache or ${ENV} to a folder of your own",
                    path=self.root,
                )
            if st.st_mode & 0o077:
                logger.warning(
                    "feature cache %s was readable by others (mode %o): set to 0700",
                    self.root,
                    st.st_mode & 0o777,
                )
                os.chmod(self.root, 0o700)
        return self.root

    # ------------------------------------------------------------------ entries

    def _valid(self, folder: pathlib.Path, key: EntryKey) -> str | None:
        """None when ``folder`` holds the entry ``key`` intact, else what is wrong with it."""
        try:
            meta = json.loads((folder / _ENTRY).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return f"no {_ENTRY}"
        except (OSError, ValueError) as exc:
            return f"{_ENTRY} unreadable ({exc})"
        if not isinstance(meta, dict) or meta.get("key") != key.to_dict():
            return "its key is not this entry's (a foreign or older file)"
        path = folder / _FEATURES
        try:
            size = path.stat().st_size
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            return f"{_FEATURES} unreadable ({exc})"
        want = (key.rows, *key.output_shape)
        if arr.shape != want or arr.dtype != np.dtype("<f4") or not arr.flags.c_contiguous:
            return f"{_FEATURES} holds {arr.dtype} {arr.shape}, not float32 {want}"
        if size != meta.get("bytes"):
            return f"{_FEATURES} has {size} bytes, {meta.get('bytes')} were written"
        if not isinstance(meta.get("sha256"), str):
            return f"{_ENTRY} records no sha256 checksum"
        if file_digest(path) != meta["sha256"]:
            return f"{_FEATURES} does not match its checksum (damaged)"
        return None

    def _discard(self, folder: pathlib.Path) -> None:
        """Move a bad entry out of the way (a rename, so a concurrent reader keeps its open
        file), then delete it."""
        aside = self.root / f"{_TMP}stale-{folder.name}-{os.getpid()}-{time.monotonic_ns()}"
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            return
        shutil.rmtree(aside, ignore_errors=True)

    def _write(
        self, key: EntryKey, x, compute: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[pathlib.Path, bool]:
        """Compute the entry into a temporary folder, a chunk at a time; rename it into place.
        Returns (the entry's folder, whether it is the one written here)."""
        root = self._ensure_root()
        target = root / key.name
        with naming_write_errors(root):
            tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"{_TMP}{key.name}-", dir=root))
        try:
            path = tmp / _FEATURES
            shape = (key.rows, *key.output_shape)
            h = hashlib.sha256()  # of the bytes as written, header included
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, {"descr": "<f4", "fortran_order": False, "shape": shape}
            )
            with atomic_writer(path) as f:
                f.write(header.getvalue())
                h.update(header.getvalue())
                for i in range(0, key.rows, CHUNK_ROWS):
                    block = np.ascontiguousarray(
                        compute(np.asarray(x[i : i + CHUNK_ROWS])), dtype="<f4"
                    )
                    release_read(x[i : i + CHUNK_ROWS])  # a memory-mapped split: not kept
                    if block.shape != (min(CHUNK_ROWS, key.rows - i), *key.output_shape):
                        raise RuntimeError(
                            f"the {key.front_end} front-end returned {block.shape} "
                            f"for rows {i}..; this is a bug in pate-learn"
                        )
                    data = block.tobytes()
                    f.write(data)
                    h.update(data)
            meta = {
                "key": key.to_dict(),
                "shape": list(shape),
                "dtype": "<f4",
                "bytes": path.stat().st_size,
                "sha256": h.hexdigest(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            atomic_write_json(tmp / _ENTRY, meta)  # both files fsynced, and their folder
            try:
                os.rename(tmp, target)  # atomic; refuses a non-empty target
            except OSError:
                if not target.exists():
                    raise
                # another run renamed the same entry first: theirs is used (checked by the caller)
                logger.info(
                    "feature cache: entry %s was written by another run meanwhile", key.name
                )
                return target, False
            fsync_dir(root)
            return target, True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def features(
        self, key: EntryKey, x, compute: Callable[[np.ndarray], np.ndarray]
    ) -> CachedFeatures:
        """The features ``key`` of inputs ``x``: the entry when it is there and intact (a hit),
        else ``compute`` (a function of a block of rows of ``x``) applied a chunk at a time and
        written to the cache (a miss). A bad entry is logged, discarded and rebuilt."""
        t0 = time.perf_counter()
        folder = self._ensure_root() / key.name
        hit = False
        if folder.exists():
            problem = self._valid(folder, key)
            if problem is None:
                hit = True
            else:
                logger.warning(
                    "feature cache: entry %s is not used and is rebuilt: %s", folder, problem
                )
                self._discard(folder)
        for attempt in range(0 if hit else 2):
            folder, ours = self._write(key, x, compute)
            problem = None if ours else self._valid(folder, key)  # ours: hashed as written
            if problem is None:
                break
            if attempt:
                raise RuntimeError(
                    f"feature cache {folder}: an entry just written fails its "
                    f"check ({problem}); is another process writing there?"
                )
            self._discard(folder)  # a concurrent writer's entry, damaged: ours again
        seconds = time.perf_counter() - t0
        self._log.append(
            {"front_end": key.front_end, "rows": key.rows, "hit": hit, "seconds": round(seconds, 3)}
        )
        logger.info(
            "feature cache: %s, %d rows, %s (%.1f s)",
            key.front_end,
            key.rows,
            "read from the cache" if hit else "computed and cached",
            seconds,
        )
        features = np.load(folder / _FEATURES, mmap_mode="r", allow_pickle=False)
        return CachedFeatures(features, hit, seconds, folder / _FEATURES)

    def summary(self) -> dict:
        hits = sum(1 for e in self._log if e["hit"])
        return {
            "root": str(self.root),
            "hits": hits,
            "misses": len(self._log) - hits,
            "entries": list(self._log),
        }

    # ------------------------------------------------------------------ listing, clearing

    def entries(self) -> list[dict]:
        """Every entry and leftover temporary folder: ``{"name", "bytes", "front_end", "rows",
        "shape", "created", "state"}``; ``state`` is ``"ok"`` when its ``entry.json`` reads and
        the file has the size written there (checksums are checked at use, not here),
        ``"temporary"`` for a ``.tmp-`` folder (an interrupted or running write), else
        ``"damaged"``."""
        if not self.root.is_dir():
            return []
        out = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
            row = {
                "name": folder.name,
                "bytes": size,
                "front_end": None,
                "rows": None,
                "shape": None,
                "created": None,
                "state": "temporary",
            }
            if not folder.name.startswith(_TMP):
                try:
                    meta = json.loads((folder / _ENTRY).read_text(encoding="utf-8"))
                    key = meta["key"]
                    row.update(
                        front_end=key["front_end"],
                        rows=key["rows"],
                        shape=meta["shape"],
                        created=meta["created"],
                        state="ok"
                        if (folder / _FEATURES).stat().st_size == meta["bytes"]
                        else "damaged",
                    )
                except (OSError, ValueError, KeyError, TypeError):
                    row["state"] = "damaged"
            out.append(row)
        return out

    def clear(self) -> tuple[int, int]:
        """Delete every entry and temporary folder (and the folder itself); returns (folders
        removed, bytes freed). A run writing an entry meanwhile fails with the error of its
        vanished temporary folder: clear the cache when no run is going."""
        rows = self.entries()
        if self.root.is_dir():
            shutil.rmtree(self.root)
        return len(rows), sum(r["bytes"] for r in rows)


_ACTIVE: contextvars.ContextVar[FeatureCache | None] = contextvars.ContextVar(
    "pate_feature_cache", default=None
)


@contextlib.contextmanager
def using(cache: FeatureCache | None):
    """Inside the block, :func:`active` returns ``cache`` (None: no cache)."""
    if cache is not None and not isinstance(cache, FeatureCache):
        raise InputTypeError(f"cache must be a FeatureCache or None, got {type(cache).__name__}")
    token = _ACTIVE.set(cache)
    try:
        yield cache
    finally:
        _ACTIVE.reset(token)


def active() -> FeatureCache | None:
    """The cache of the innermost :func:`using` block (None outside one)."""
    return _ACTIVE.get()
