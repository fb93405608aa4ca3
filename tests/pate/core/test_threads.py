"""pate.core.threads: the thread count from affinity / cgroup quota / environment / explicit setting,
its precedence, passive waiting, and the [run] threads / --threads / threads= settings (issue
#33). No timing here: benchmarks/threads.py measures."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from pate.core import threads
from pate.run import rundir
from pate.teachers.errors import ConfigError


@pytest.fixture
def restore_threads():
    """Tests that apply a thread count give the process its torch and BLAS threads back."""
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    limits = threadpool_limits(limits=None)  # records the current limits; restore_original_limits
    yield
    torch.set_num_threads(before)
    limits.restore_original_limits()


def _cgroup_v2(tmp_path, cpu_max: dict[str, str], path="/a/b"):
    """A fake /sys/fs/cgroup (v2) with ``cpu.max`` files at the given folders."""
    root = tmp_path / "cgroup"
    for folder, text in cpu_max.items():
        (root / folder.strip("/")).mkdir(parents=True, exist_ok=True)
        (root / folder.strip("/") / "cpu.max").write_text(text + "\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text(f"0::{path}\n")
    return dict(cgroup_root=root, proc_cgroup=proc)


def _cgroup_v1(tmp_path, quota: str, period: str, *, mount="cpu,cpuacct", path="/job"):
    root = tmp_path / "cgroup"
    folder = root / mount / path.strip("/")
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text(quota + "\n")
    (folder / "cpu.cfs_period_us").write_text(period + "\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text(f"4:memory:/x\n3:{mount}:{path}\n1:name=systemd:/\n")
    return dict(cgroup_root=root, proc_cgroup=proc)


# ------------------------------------------------------------------------------ usable CPUs


def test_no_cgroup_quota_means_the_affinity_mask(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "max 100000", "/": "max 100000"})
    assert threads.cgroup_cpus(**paths) is None
    assert threads.usable_cpus(affinity=6, **paths) == (6, "affinity", "sched_getaffinity: 6 CPUs")


def test_cgroup_v2_quota_is_rounded_up_and_lowers_the_affinity(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "150000 100000"})
    cpus, where = threads.cgroup_cpus(**paths)
    assert cpus == 1.5 and where.endswith("a/b/cpu.max 150000 100000")
    count, source, detail = threads.usable_cpus(affinity=8, **paths)
    assert (count, source) == (2, "cgroup") and "1.5 CPUs" in detail and "affinity 8" in detail


def test_cgroup_quota_of_an_ancestor_limits_too(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "400000 100000", "/a": "100000 100000"})
    assert threads.usable_cpus(affinity=8, **paths)[:2] == (1, "cgroup")


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "800000 100000"})
    assert threads.usable_cpus(affinity=2, **paths)[:2] == (2, "affinity")


def test_a_tiny_quota_still_gives_one_thread(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "10000 100000"})
    assert threads.usable_cpus(affinity=4, **paths)[:2] == (1, "cgroup")


@pytest.mark.parametrize("mount", ["cpu,cpuacct", "cpu"])
def test_cgroup_v1_cfs_quota(tmp_path, mount):
    paths = _cgroup_v1(tmp_path, "300000", "100000", mount=mount)
    assert threads.cgroup_cpus(**paths)[0] == 3.0
    assert threads.usable_cpus(affinity=16, **paths)[:2] == (3, "cgroup")


def test_cgroup_v1_without_a_quota(tmp_path):
    paths = _cgroup_v1(tmp_path, "-1", "100000")
    assert threads.cgroup_cpus(**paths) is None


def test_unreadable_or_garbled_cgroup_files_mean_no_quota(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "lots 100000"})
    assert threads.cgroup_cpus(**paths) is None
    missing = dict(cgroup_root=tmp_path / "none", proc_cgroup=tmp_path / "none" / "cgroup")
    assert threads.cgroup_cpus(**missing) is None
    assert threads.usable_cpus(affinity=3, **missing)[:2] == (3, "affinity")


def test_the_affinity_is_read_from_sched_getaffinity(monkeypatch, tmp_path):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    missing = dict(cgroup_root=tmp_path / "none", proc_cgroup=tmp_path / "none" / "cgroup")
    assert threads.usable_cpus(**missing)[:2] == (3, "affinity")


# ------------------------------------------------------------------------------ precedence


def _no_cgroup(tmp_path):
    return dict(cgroup_root=tmp_path / "none", proc_cgroup=tmp_path / "none" / "cgroup")


def test_explicit_beats_environment_beats_automatic(tmp_path):
    paths = _no_cgroup(tmp_path)
    env = {"OMP_NUM_THREADS": "3"}
    flag = threads.choose(explicit=5, explicit_source="flag", environ=env, affinity=8, **paths)
    assert (flag.count, flag.source, flag.cpus, flag.detail) == (5, "flag", 8, "--threads 5")
    from_env = threads.choose(environ=env, affinity=8, **paths)
    assert (from_env.count, from_env.source, from_env.detail) == (3, "env", "OMP_NUM_THREADS=3")
    auto = threads.choose(environ={}, affinity=8, **paths)
    assert (auto.count, auto.source) == (8, "affinity")


def test_a_lower_torch_count_of_the_caller_is_kept(tmp_path):
    paths = _no_cgroup(tmp_path)
    kept = threads.choose(environ={}, torch_threads=1, affinity=4, **paths)
    assert (kept.count, kept.source, kept.cpus) == (1, "torch", 4)
    assert "torch.get_num_threads() 1 before pate set it" in kept.detail
    high = threads.choose(environ={}, torch_threads=8, affinity=4, **paths)  # above: lowered
    assert (high.count, high.source) == (4, "affinity")
    env = threads.choose(environ={"OMP_NUM_THREADS": "3"}, torch_threads=1, affinity=4, **paths)
    assert (env.count, env.source) == (3, "env")
    flag = threads.choose(
        explicit=2, explicit_source="flag", environ={}, torch_threads=1, affinity=4, **paths
    )
    assert (flag.count, flag.source) == (2, "flag")


def test_the_automatic_count_is_lowered_by_other_processes_running(tmp_path, monkeypatch):
    """Where the usable CPUs are the machine's, the threads of other processes that are running
    take their CPUs: one busy neighbour of two CPUs leaves one thread, more leave at least one;
    a count the user set, or CPUs that are not the whole machine, are not lowered."""
    paths = _no_cgroup(tmp_path)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    asked = []

    def others(value):
        def measure():
            asked.append(value)
            return value

        return measure

    idle = threads.choose(environ={}, affinity=2, others=others(0.2), **paths)
    assert (idle.count, idle.source) == (2, "affinity")
    one = threads.choose(environ={}, affinity=2, others=others(1.0), **paths)
    assert (one.count, one.source, one.cpus) == (1, "busy", 2)
    assert "1.0 threads of other processes running on average" in one.detail
    many = threads.choose(environ={}, affinity=2, others=others(4.3), **paths)
    assert (many.count, many.source, many.others) == (1, "busy", 4.3)
    assert (one.others, idle.others) == (1.0, None)  # what cpu_budget reads
    unknown = threads.choose(environ={}, affinity=2, others=others(None), **paths)
    assert (unknown.count, unknown.source) == (2, "affinity")
    asked.clear()
    flag = threads.choose(
        explicit=2, explicit_source="flag", environ={}, affinity=2, others=others(4)
    )
    env = threads.choose(environ={"OMP_NUM_THREADS": "2"}, affinity=2, others=others(4), **paths)
    assert (flag.count, env.count, asked) == (2, 2, [])  # the user's count: not even measured
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 16)
    big = threads.choose(environ={}, affinity=16, others=others(3.4), **paths)
    assert (big.count, big.source) == (13, "busy")
    part = threads.choose(environ={}, affinity=2, others=others(4), **paths)  # 2 CPUs of 16: not
    assert (part.count, part.source) == (2, "affinity")  # lowered by a machine-wide count


def test_other_runnable_reads_the_run_queue_less_this_process(tmp_path):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("1.20 0.90 0.70 5/412 12345\n")
    tasks = tmp_path / "task"
    for tid, state in ((10, "R"), (11, "S"), (12, "R")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(f"{tid} (pt_main thread) {state} 1 2 3\n")
    got = threads.other_runnable(samples=3, interval_s=0.0, loadavg=loadavg, own_tasks=tasks)
    assert got == 3.0  # 5 runnable on the machine, 2 of them this process's
    loadavg.write_text("garbage\n")
    assert (
        threads.other_runnable(samples=2, interval_s=0.0, loadavg=loadavg, own_tasks=tasks) is None
    )
    measured = threads.other_runnable(samples=2, interval_s=0.001)  # this machine: a number >= 0
    assert measured is None or measured >= 0


def test_caller_torch_threads_ignores_pates_own_count(monkeypatch, restore_threads):
    import torch

    monkeypatch.setattr(threads, "_torch_set", None)
    torch.set_num_threads(1)
    assert threads.caller_torch_threads() == 1  # never set by pate: the caller's
    threads.apply(threads.ThreadChoice(1, "flag", 2, "--threads 1"))
    assert threads.caller_torch_threads() is None  # pate's own
    torch.set_num_threads(2)
    assert threads.caller_torch_threads() == 2  # changed by the caller since


def test_cgroup_is_named_as_the_source_when_it_decides(tmp_path):
    paths = _cgroup_v2(tmp_path, {"/a/b": "200000 100000"})
    choice = threads.choose(environ={}, affinity=8, **paths)
    assert (choice.count, choice.source, choice.cpus) == (2, "cgroup", 2)
    assert (
        threads.choose(environ={"OMP_NUM_THREADS": "6"}, affinity=8, **paths).count == 6
    )  # user's


@pytest.mark.parametrize(
    "source, name", [("flag", "--threads"), ("config", "[run] threads"), ("keyword", "threads=")]
)
def test_an_explicit_setting_names_its_source(tmp_path, source, name):
    choice = threads.choose(
        explicit=1, explicit_source=source, environ={}, affinity=2, **_no_cgroup(tmp_path)
    )
    assert choice.source == source and choice.detail == f"{name} 1"
    with pytest.raises(ValueError, match=re.escape(name) + r" must be an integer >= 1 .* got 0"):
        threads.choose(
            explicit=0, explicit_source=source, environ={}, affinity=2, **_no_cgroup(tmp_path)
        )


def test_nested_omp_num_threads_takes_its_first_level(tmp_path):
    choice = threads.choose(environ={"OMP_NUM_THREADS": "4,2"}, affinity=8, **_no_cgroup(tmp_path))
    assert (choice.count, choice.source) == (4, "env")


@pytest.mark.parametrize("bad", ["zero", "0", "-2", "1.5"])
def test_a_bad_omp_num_threads_is_ignored_with_a_warning(tmp_path, caplog, bad):
    with caplog.at_level("WARNING", logger="pate"):
        choice = threads.choose(
            environ={"OMP_NUM_THREADS": bad}, affinity=2, **_no_cgroup(tmp_path)
        )
    assert (choice.count, choice.source) == (2, "affinity")
    assert f"OMP_NUM_THREADS={bad!r}" in caplog.text


@pytest.mark.parametrize(
    "value, error",
    [
        (0, ValueError),
        (-1, ValueError),
        (True, TypeError),
        ("2", TypeError),
        (1.5, TypeError),
        (None, TypeError),
    ],
)
def test_check_threads_names_the_setting_and_value(value, error):
    with pytest.raises(error, match=rf"threads= must be an integer >= 1 .*got {value!r}"):
        threads.check_threads(value, "threads=")


# ------------------------------------------------------------------------------ waiting


def test_passive_waiting_is_set_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr(threads, "openmp_loaded", lambda: False)
    env = {}
    assert threads.prepare_environment(env) == "passive"
    assert env == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0", "KMP_BLOCKTIME": "0"}
    user = {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "1000"}
    assert threads.prepare_environment(user) == (
        "OMP_WAIT_POLICY=active (the user's GOMP_SPINCOUNT=1000, OMP_WAIT_POLICY=active kept)"
    )
    assert user == {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "1000"}
    spin = {"GOMP_SPINCOUNT": "30000"}  # a spin count of the user's, no policy: the rest added
    assert threads.prepare_environment(spin) == "passive (the user's GOMP_SPINCOUNT=30000 kept)"
    assert spin == {"GOMP_SPINCOUNT": "30000", "OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def test_a_users_active_policy_gets_no_spin_count_that_would_undo_it(monkeypatch):
    # GNU OpenMP reads GOMP_SPINCOUNT over OMP_WAIT_POLICY: GOMP_SPINCOUNT=0 beside the user's
    # ACTIVE would make their threads sleep after all
    monkeypatch.setattr(threads, "openmp_loaded", lambda: False)
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert threads.prepare_environment(env) == (
        "OMP_WAIT_POLICY=ACTIVE (the user's OMP_WAIT_POLICY=ACTIVE kept)"
    )
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_too_late_once_openmp_is_loaded(monkeypatch):
    monkeypatch.setattr(threads, "openmp_loaded", lambda: True)
    env = {"KMP_BLOCKTIME": "5"}
    assert threads.prepare_environment(env) == (
        "unchanged: OpenMP was already loaded (environment: KMP_BLOCKTIME=5)"
    )
    assert env == {"KMP_BLOCKTIME": "5"}


def test_a_wait_policy_from_the_environment_is_reported_as_such(monkeypatch):
    monkeypatch.setattr(threads, "openmp_loaded", lambda: True)
    env = {"OMP_WAIT_POLICY": "PASSIVE"}
    assert threads.prepare_environment(env) == "OMP_WAIT_POLICY=PASSIVE (from the environment)"
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_openmp_is_seen_once_torch_is_loaded():
    pytest.importorskip("torch")
    import torch  # noqa: F401  (loads libgomp)

    assert threads.openmp_loaded()


# ------------------------------------------------------------------------------ applying it


def test_apply_sets_torch_and_blas_threads(restore_threads):
    import torch
    from threadpoolctl import threadpool_info

    done = threads.apply(threads.ThreadChoice(1, "flag", 2, "--threads 1"))
    assert done["torch"] == torch.get_num_threads() == 1
    assert all(pool["num_threads"] == 1 for pool in threadpool_info())


def test_configure_records_the_choice_and_logs_it(restore_threads, monkeypatch, caplog):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(threads, "_last", None)
    monkeypatch.setattr(threads, "_torch_set", None)
    with caplog.at_level("INFO", logger="pate"):
        record = threads.configure()
    assert record["count"] == 1 and record["source"] == "env"
    assert set(record) == {
        "count",
        "source",
        "cpus",
        "detail",
        "others",
        "wait_policy",
        "load_average",
    }
    assert torch.get_num_threads() == 1
    assert "threads: 1 (env: OMP_NUM_THREADS=1" in caplog.text
    json.dumps(record)  # it goes into a JSON summary


# ------------------------------------------------------------------------------ the settings


def _digits_raw(**run) -> dict:
    import tomllib

    raw = tomllib.loads(
        (pathlib.Path(__file__).resolve().parents[3] / "configs" / "digits.toml").read_text()
    )
    raw["run"].update(run)
    return raw


@pytest.mark.parametrize(
    "value, message",
    [
        (0, r"\[run\] threads must be an integer >= 1 \(the number of CPU threads\), got 0"),
        (-3, r"\[run\] threads must be an integer >= 1 \(the number of CPU threads\), got -3"),
        ("two", r"\[run\] threads must be an integer, got 'two'"),
        (True, r"\[run\] threads must be an integer, got True"),
    ],
)
def test_config_refuses_a_bad_thread_count(value, message):
    from pate.run.config import build

    with pytest.raises(ConfigError, match=message):
        build(_digits_raw(threads=value), where="t.toml", ledger=False)


def test_config_keeps_a_good_thread_count_and_resume_ignores_it():
    from pate.run import rundir
    from pate.run.config import build

    config = build(_digits_raw(threads=2), where="t.toml", ledger=False)
    assert config.run.threads == 2
    plain = build(_digits_raw(), where="t.toml", ledger=False)
    assert "threads" not in plain.to_dict()["run"]
    assert rundir.comparable(config.to_dict()) == rundir.comparable(
        plain.to_dict()
    )  # another thread count may resume it


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_the_threads_flag_refuses_a_bad_value(tmp_path, capsys, value):
    from pate.cli import main

    for argv in (
        ["run", "--config", "digits"],
        ["partition", "--run-dir", str(tmp_path / "r"), "--config", "digits"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--threads", value])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "argument --threads: must be an integer >= 1" in err and repr(value) in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value, error", [(0, ValueError), (True, TypeError), (2.0, TypeError)])
def test_fit_and_plan_refuse_a_bad_threads_keyword_before_any_work(tmp_path, value, error):
    import pate

    for call in (pate.fit, pate.plan):
        with pytest.raises(error, match=rf"threads= must be an integer >= 1 .*got {value!r}"):
            call("digits", run_dir=tmp_path / "r", threads=value, target_eps=2.0)
    assert not (tmp_path / "r").exists()


def test_the_threads_keyword_goes_into_the_run_config(tmp_path):
    import inspect

    from pate import api

    keywords = inspect.signature(api.fit).bind(
        "digits", run_dir=tmp_path / "r", threads=1, target_eps=2.0, ledger=False
    )
    keywords.apply_defaults()
    config = api._configured(keywords.arguments)[0]
    assert config.run.threads == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "how, expected",
    [
        ("flag", {"count": 1, "source": "flag", "detail": "--threads 1"}),
        ("config", {"count": 1, "source": "config", "detail": "[run] threads 1"}),
        ("env", {"count": 1, "source": "env", "detail": "OMP_NUM_THREADS=1"}),
    ],
)
def test_the_stage_summary_records_the_threads_and_their_source(
    tmp_path, small_digits, monkeypatch, restore_threads, how, expected
):
    from pate.cli import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    config = small_digits(
        tmp_path, replace=(("seed = 0", "seed = 0\nthreads = 1"),) if how == "config" else ()
    )
    run_dir = tmp_path / "run"
    argv = ["partition", "--config", str(config), "--run-dir", str(run_dir), "--no-ledger"]
    assert main(argv + (["--threads", "1"] if how == "flag" else [])) == 0
    record = json.loads((run_dir / rundir.STAGE_DIR / "partition.json").read_text())["threads"]
    assert {k: record[k] for k in expected} == expected
    assert record["cpus"] >= 1 and isinstance(record["wait_policy"], str)
    saved = json.loads((run_dir / "config.json").read_text())["run"]
    assert saved.get("threads") == (None if how == "env" else 1)


@pytest.mark.parametrize(
    "entry",
    [
        "from pate.cli import main; main(['init-config', '--list'])",
        "import pate; pate.plan('digits', target_eps=2.0, ledger=False, threads=1)",
    ],
)
def test_the_cli_and_the_api_set_passive_waiting_before_torch_loads(entry, tmp_path):
    import os
    import subprocess
    import sys

    repo = pathlib.Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k not in threads.PASSIVE_WAIT}
    env["PYTHONPATH"] = str(repo) + os.pathsep + env.get("PYTHONPATH", "")
    code = (
        f"import os, sys\n{entry}\n"
        "import torch\n"  # loads libgomp, which reads the variables now
        "from pate.core import threads\n"
        # "passive": set while no OpenMP was loaded (else "... (from the environment)")
        "print('RESULT', threads.openmp_loaded(), threads.prepare_environment(), "
        "*(os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT', 'KMP_BLOCKTIME')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert result == ["RESULT True passive PASSIVE 0 0"], done.stdout


def test_the_cpu_budget_is_pates_count_or_the_cpus_where_neighbours_lowered_it(
    monkeypatch, restore_threads
):
    import torch

    torch.set_num_threads(1)
    monkeypatch.setattr(threads, "_torch_set", 1)
    record = {"count": 1, "source": "affinity", "cpus": 2}
    monkeypatch.setattr(threads, "_last", record)
    assert threads.cpu_budget() == 1
    # lowered because other processes' threads fill the CPUs: processes may take every CPU
    monkeypatch.setattr(threads, "_last", {**record, "source": "busy", "others": 4.1})
    assert threads.cpu_budget() == 2
    # ... but not where a core is left free (one thread takes it)
    monkeypatch.setattr(threads, "_last", {**record, "source": "busy", "others": 1.0})
    assert threads.cpu_budget() == 1
    # the caller changed torch's count after pate set it: the caller's count
    monkeypatch.setattr(threads, "_torch_set", 3)
    assert threads.cpu_budget() == 1
    monkeypatch.setattr(threads, "_last", None)
    torch.set_num_threads(2)
    assert threads.cpu_budget() == 2
