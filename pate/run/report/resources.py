"""What a run computed on, read from its stages' summaries (:func:`read_resources`) and worded
for its report (one ``*_text`` each): where the teachers trained, the CPU threads, the peak GPU
memory, the student's precision. None of it changes what is computed."""

from __future__ import annotations

import json
from pathlib import Path

from pate.run import rundir


def _summary(run_dir: Path, stage: str) -> dict:
    """``stages/<stage>.json``; {} when absent or unreadable."""
    try:
        info = json.loads((Path(run_dir) / rundir.STAGE_DIR / f"{stage}.json").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def read_resources(run_dir: Path) -> dict:
    """The report's keys on what the run computed on, those its stages recorded: ``execution``
    (where the teachers trained, docs/cluster.md), ``threads``, ``gpu_memory`` and
    ``student_precision`` (float32, or bfloat16 autocast: ``[student] amp``)."""
    execution = _summary(run_dir, "teachers").get("execution")
    precision = _summary(run_dir, "student").get("precision")
    found = {
        "execution": execution if isinstance(execution, dict) else None,
        "threads": _threads(run_dir),
        "gpu_memory": _gpu_memory(run_dir),
        "student_precision": precision if isinstance(precision, str) else None,
    }
    return {key: value for key, value in found.items() if value is not None}


def _threads(run_dir: Path) -> dict | None:
    """``{stage: threads}`` as each computing stage recorded them (:mod:`pate.core.threads`,
    with ``processes`` where it trained in several); None when none did."""
    out = {}
    for stage in rundir.TORCH_STAGES:
        info = _summary(run_dir, stage)
        threads = info.get("threads")
        if isinstance(threads, dict) and isinstance(threads.get("count"), int):
            processes = info.get("processes")
            if isinstance(processes, int) and processes > 1:
                threads = dict(threads, processes=processes)
            out[stage] = threads
    return out or None


def _gpu_memory(run_dir: Path) -> dict | None:
    """``{stage: [per device: index, name, peak_allocated_bytes, peak_reserved_bytes]}`` of
    each stage that used a CUDA device; None when none did."""
    out = {}
    for stage in rundir.TORCH_STAGES:
        peaks = _summary(run_dir, stage).get("gpu_memory")
        if isinstance(peaks, list) and peaks and all(isinstance(p, dict) for p in peaks):
            out[stage] = peaks
    return out or None


def execution_text(report: dict) -> str | None:
    """Where the teachers trained: the backend and its resources (``execution``, from the teachers
    stage's summary; else the config's ``[cluster]`` table; None when neither is known)."""
    ex = report.get("execution")
    cluster = (report.get("config") or {}).get("cluster") or {}
    if not isinstance(ex, dict):
        if not cluster:
            return None
        ex = {"backend": cluster.get("backend", "local")}
    same = (
        "The backend does not change what the teachers predict, hence neither the votes nor "
        "any privacy figure."
    )
    if ex.get("backend") == "ray":
        total = ex.get("cluster") or {}
        return (
            f"**Where the teachers trained:** on Ray (address {ex.get('address', '?')}; a "
            f"cluster of {total.get('CPU', 0):g} CPUs and {total.get('GPU', 0):g} GPUs on "
            f"{total.get('nodes', '?')} node(s); {ex.get('cpus_per_task', '?')} CPU(s) and "
            f"{ex.get('gpus_per_task', 0):g} GPU(s) per task, {ex.get('teachers_per_task', '?')} "
            f"teachers per task, {ex.get('num_chunks', '?')} chunks, up to "
            f"{ex.get('max_retries', '?')} retries of a chunk whose worker was lost). {same}"
        )
    threads = ex.get("torch_threads")
    detail = f" with {threads} torch thread(s)" if threads is not None else ""
    return f'**Where the teachers trained:** locally (backend "local"){detail}. {same}'


def threads_text(report: dict) -> str | None:
    """The CPU threads each computing stage ran with and why (``threads``, from the stages'
    summaries; None when not recorded)."""
    threads = report.get("threads")
    if not isinstance(threads, dict) or not threads:
        return None
    parts = []
    for stage, t in threads.items():
        wait = t.get("wait_policy")
        why = f"{t.get('source', '?')}: {t.get('detail', '')}".rstrip(": ")
        parts.append(
            f"{stage} {t['count']} ({why}"
            + (f"; OpenMP waiting {wait})" if wait else ")")
            + (
                f" in {t['processes']} processes that share each step"
                if isinstance(t.get("processes"), int)
                else ""
            )
        )
    return (
        "**CPU threads:** " + ", ".join(parts) + ". They change the speed, not what is "
        "computed (set them with `--threads` or `[run] threads`; docs/threads.md)."
    )


def gpu_memory_text(report: dict) -> str | None:
    """The peak GPU memory of each stage that used a GPU (``gpu_memory``; None when none did)."""
    gpu = report.get("gpu_memory")
    if not isinstance(gpu, dict) or not gpu:
        return None
    parts = []
    for stage, peaks in gpu.items():
        for p in peaks:
            parts.append(
                f"{stage} {p.get('peak_reserved_bytes', 0) / 2**30:.2f} GiB reserved, "
                f"{p.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB in tensors "
                f"(cuda:{p.get('index', '?')}, {p.get('name', '?')})"
            )
    return (
        "**Peak GPU memory:** " + "; ".join(parts) + " (torch's allocator; the CUDA context "
        "comes on top)."
    )


def precision_text(report: dict) -> str | None:
    """The student's training precision where it was not float32 (None otherwise)."""
    precision = report.get("student_precision")
    if not isinstance(precision, str) or precision == "float32":
        return None
    return (
        f"**Student precision:** its training passes ran in {precision} (`[student] amp`, on "
        "where the device computes bfloat16 natively); its weights, optimiser and predictions "
        "are float32. It changes the speed and the rounding, not the privacy analysis."
    )
