"""pate-learn installs as one import package, ``pate``, whose names cannot clash with a user's.

The privacy arithmetic, the teachers and the student are ``pate.analysis``, ``pate.teachers``
and ``pate.student`` (in the repository ``pate/analysis`` etc. are symlinks to the top-level
folders ``analysis/``, ``teachers/``, ``student/``; a wheel holds their files under ``pate/``).

* ``test_every_module_imports_under_pate_only``: importing every module of ``pate`` never
  imports a top-level ``analysis``, ``teachers`` or ``student`` (two copies of one module would
  break ``isinstance`` checks, e.g. of ``pate.analysis.errors.PateError``).
* ``test_analysis_imports_no_torch``: ``import pate.analysis`` stays numpy+scipy only.
* ``test_user_modules_named_like_ours_do_not_shadow_pate``: from a folder that holds its own
  ``analysis.py``, ``student.py`` and ``teachers.py``, ``import pate`` and ``python -m pate run
  --config digits`` work.
* ``test_wheel_installs_and_runs_outside_the_repository``: a wheel built from the repository
  holds ``pate`` only (with real files under ``pate/analysis`` etc. and the packaged configs),
  and, installed into a fresh folder, runs ``pate run --config digits`` with no module of the
  repository on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

from pate.run import rundir

REPO = pathlib.Path(__file__).resolve().parents[1]
OURS = ("analysis", "teachers", "student")
# Files a user might keep next to their own script: each one breaks loudly if it is imported.
SHADOWS = {
    f"{name}.py": f"raise ImportError('the user\\'s own {name}.py was imported')\n" for name in OURS
}


def _env(**extra) -> dict[str, str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PATE_DEBUG": "1"}
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


def _run(argv, *, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    done = subprocess.run(
        argv, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{argv[:4]}... exited {done.returncode}\nstdout:\n{done.stdout[-3000:]}\n"
        f"stderr:\n{done.stderr[-3000:]}"
    )
    return done


def _shadowed_folder(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in SHADOWS.items():
        (folder / name).write_text(text)
    return folder


def _repo_env() -> dict[str, str]:
    """The repository importable as the suite runs (editable install, or PYTHONPATH=repo)."""
    return _env(PYTHONPATH=str(REPO))


_IMPORT_ALL = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    import pate
    names = ["pate"]
    for info in pkgutil.walk_packages(pate.__path__, "pate."):
        importlib.import_module(info.name)
        names.append(info.name)
    top = sorted(name for name in sys.modules if name.split(".")[0] in {OURS!r})
    print(json.dumps({{"modules": names, "top_level": top}}))
""")


def test_every_module_imports_under_pate_only(tmp_path):
    code = _IMPORT_ALL.format(OURS=set(OURS))
    done = _run([sys.executable, "-c", code], cwd=tmp_path, env=_repo_env())
    found = json.loads(done.stdout.strip().splitlines()[-1])
    modules = set(found["modules"])
    # The walk reached every subpackage (through the symlinks in a checkout) and their modules.
    for name in (
        "pate.analysis.errors",
        "pate.analysis.rdp",
        "pate.teachers.ensemble",
        "pate.teachers.data",
        "pate.student.train",
        "pate.student.select",
        "pate.cli.commands.run",
        "pate.cli",
        "pate.api",
    ):
        assert name in modules, f"{name} was not found under pate: {sorted(modules)}"
    assert found["top_level"] == [], (
        f"these modules were imported under a top-level name besides pate.*: {found['top_level']}; "
        "import them as pate.analysis / pate.teachers / pate.student"
    )


def test_analysis_imports_no_torch(tmp_path):
    code = (
        "import sys, pate.analysis, pate; "
        "bad = sorted(m for m in ('torch', 'torchvision', 'analysis') if m in sys.modules); "
        "sys.exit(f'imported: {bad}' if bad else 0)"
    )
    _run([sys.executable, "-c", code], cwd=tmp_path, env=_repo_env())


def test_user_modules_named_like_ours_do_not_shadow_pate(tmp_path):
    work = _shadowed_folder(tmp_path / "work")
    env = _repo_env()
    check = (
        "import sys, pate, pate.analysis, pate.teachers.data, pate.student.select\n"
        "from pate.analysis.errors import PateError\n"
        "assert issubclass(pate.ConfigError, PateError)\n"
        "clash = {'analysis', 'teachers', 'student'} & set(sys.modules)\n"
        "assert not clash, sorted(clash)\n"
    )
    _run([sys.executable, "-c", check], cwd=work, env=env)
    # The folder really does shadow top-level names (so the check above means something).
    shadowed = subprocess.run(
        [sys.executable, "-c", "import analysis"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shadowed.returncode != 0 and "the user's own analysis.py" in shadowed.stderr

    run_dir = tmp_path / "run"
    _run(
        [
            sys.executable,
            "-m",
            "pate",
            "run",
            "--config",
            "digits",
            "--run-dir",
            str(run_dir),
            "--no-ledger",
            "--until",
            "partition",
            "--no-progress",
        ],
        cwd=work,
        env=env,
    )
    assert (run_dir / rundir.PARTITION).is_file()
    assert (run_dir / rundir.STAGE_DIR / "partition.json").is_file()


def _build_wheel(out: pathlib.Path) -> pathlib.Path:
    """A wheel of the repository, built from a copy of its sources (nothing written to the repo)."""
    src = out / "src"
    src.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("pate", *OURS):  # pate/analysis etc. stay symlinks, as in a checkout
        shutil.copytree(REPO / name, src / name, symlinks=True, ignore=ignore)
    assert (src / "pate" / "analysis").is_symlink()
    dist = out / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        cwd=out,
        timeout=300,
    )
    (wheel,) = dist.glob("pate_learn-*.whl")
    return wheel


def test_wheel_installs_and_runs_outside_the_repository(tmp_path):
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools in the venv")
    wheel = _build_wheel(tmp_path / "build")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"pate"}, f"the wheel ships top-level {sorted(tops)}, expected pate only"
    for name in (
        "pate/__init__.py",
        "pate/analysis/__init__.py",
        "pate/analysis/errors.py",
        "pate/analysis/rdp.py",
        "pate/teachers/ensemble.py",
        "pate/student/train.py",
        "pate/cli/commands/run.py",
        "pate/configs/digits.toml",
    ):
        assert name in names, f"{name} is not in the wheel"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "pate = pate.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    target = tmp_path / "site"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert (target / "pate" / "analysis" / "rdp.py").is_file()
    assert not (target / "pate" / "analysis").is_symlink()

    # -S: no site-packages processing, so the editable install's path entry (the repository)
    # is not on sys.path; the venv's site-packages (numpy, torch, ...) come after the wheel.
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    env = _env(PYTHONPATH=os.pathsep.join([str(target), *deps]))
    work = _shadowed_folder(tmp_path / "work")
    run_dir = tmp_path / "run"
    code = textwrap.dedent(f"""
        import pathlib, sys
        repo, target = pathlib.Path({str(REPO)!r}), pathlib.Path({str(target)!r})
        assert not any(p and pathlib.Path(p).resolve() == repo for p in sys.path), sys.path
        from pate.cli import main
        sys.argv = ["pate", "run", "--config", "digits", "--run-dir", {str(run_dir)!r},
                    "--no-ledger", "--until", "partition", "--no-progress"]
        rc = main()
        ours = {{name: m.__file__ for name, m in sys.modules.items()
                 if name.split(".")[0] in ("pate", "analysis", "teachers", "student")
                 and getattr(m, "__file__", None)}}
        outside = sorted(name for name, f in ours.items()
                         if not pathlib.Path(f).resolve().is_relative_to(target.resolve()))
        assert not outside, f"loaded from outside the installed wheel: {{outside}}"
        assert "pate.analysis.errors" in ours and "pate.teachers.data" in ours, sorted(ours)
        sys.exit(rc)
    """)
    _run([sys.executable, "-S", "-c", code], cwd=work, env=env)
    assert (run_dir / rundir.PARTITION).is_file()
    assert (run_dir / rundir.STAGE_DIR / "partition.json").is_file()
