"""The environment files agree, and the installed environment is the pinned one."""

import re
import sys
import tomllib
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _name_and_spec(requirement):
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$", requirement)
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def _pyproject_pins():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(_name_and_spec(r) for r in meta["dependencies"])


def _environment_pins():
    pins, in_pip = {}, False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("- pip:"):
            in_pip = True
            continue
        if in_pip and stripped.startswith("- ") and not stripped.startswith("- -e"):
            name, spec = _name_and_spec(stripped[2:])
            pins[name] = spec
        elif stripped.startswith("- python="):
            pins["python"] = stripped.split("=", 1)[1]
    return pins


def test_environment_yml_matches_pyproject_pins():
    pyproject, conda = _pyproject_pins(), _environment_pins()
    missing = set(pyproject) - set(conda)
    assert not missing, f"missing in environment.yml: {missing}"
    for name, spec in pyproject.items():
        assert conda[name] == spec, f"{name}: pyproject {spec!r}, environment.yml {conda[name]!r}"


def test_python_version_agrees():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert ">=3.11" in requires and "<3.12" in requires
    assert _environment_pins()["python"] == "3.11"


def test_installed_versions_are_the_pinned_ones():
    assert mx.__version__ == "1.9.1"
    major, minor = (int(x) for x in np.__version__.split(".")[:2])
    assert (major, minor) == (1, 23), f"numpy {np.__version__} is outside >=1.23,<1.24"


def test_package_imports_and_exports_its_api():
    import bbb_gluon

    assert bbb_gluon.__version__
    for name in bbb_gluon.__all__:
        assert hasattr(bbb_gluon, name), name


# --------------------------------------------------------------------------- MXNet builds


def test_one_mxnet_build_is_an_extra_and_every_build_pins_1_9_1():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(_name_and_spec(r)[0].startswith("mxnet") for r in meta["dependencies"])
    extras = meta["optional-dependencies"]
    assert extras["cpu"] == ["mxnet==1.9.1"]
    for cuda in ("cu110", "cu111", "cu112", "cu113", "cu114", "cu115", "cu116", "cu117"):
        assert extras[cuda] == [f"mxnet-{cuda}==1.9.1"]
    # make setup and the conda file install the CPU build by default.
    assert "MXNET_BUILD ?= cpu" in (ROOT / "Makefile").read_text()
    assert "-e .[cpu,test,notebooks]" in (ROOT / "environment.yml").read_text()


def test_this_environment_has_exactly_the_cpu_build():
    from bbb_gluon._mxnet_build import installed_builds

    assert installed_builds() == ["mxnet"]


def test_two_mxnet_builds_are_an_import_error_that_says_what_to_do():
    from bbb_gluon._mxnet_build import check

    check(["mxnet"])  # one build: fine
    with pytest.raises(ImportError, match="2 MXNet builds are installed") as info:
        check(["mxnet", "mxnet-cu112"])
    text = str(info.value)
    assert "pip uninstall -y mxnet mxnet-cu112" in text and ".[cpu]" in text


def test_a_missing_mxnet_is_an_import_error_that_says_what_to_install(monkeypatch):
    from bbb_gluon._mxnet_build import check

    monkeypatch.setitem(sys.modules, "mxnet", None)  # import mxnet now fails
    with pytest.raises(ImportError, match=r"needs MXNet 1\.9\.1.*\.\[cpu\].*\.\[cu112\]"):
        check([])


# --------------------------------------------------------------------------- the Makefile's Python


def _make_setup_dry_run(tmp_path, pythons, target="setup"):
    """``make -n <target>`` into a new environment folder with only ``pythons`` on PATH
    (name -> the version its ``--version`` prints): what the Makefile would run."""
    import os
    import shutil
    import subprocess

    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, version in pythons.items():
        fake = bin_dir / name
        fake.write_text(f'#!/bin/sh\necho "Python {version}"\n')
        fake.chmod(0o755)
    # A make of its own, also under `make unit` (no inherited flags, level or PYTHON).
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PATH"] = str(bin_dir)
    return subprocess.run([make, "-n", "--no-print-directory", f"VENV={tmp_path / 'venv'}",
                           target], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("uv", [None, "exit 1", "exit 0"])
def test_pip_installs_the_package_where_uv_is_missing_or_fails(tmp_path, uv):
    import os
    import shutil
    import subprocess

    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "calls"
    # The environment's own programs, faked: each records how it was called.
    for name, body in (("python", ""), ("uv", uv)):
        if body is not None:
            (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{body}\n')
            (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run([make, "--no-print-directory", f"VENV={tmp_path / 'venv'}",
                           str(tmp_path / "venv" / ".core-installed")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    uv_call = f"uv pip install --quiet --python {bin_dir / 'python'} --compile-bytecode -e .[cpu]"
    pip_call = "python -m pip install --quiet -e .[cpu]"
    # pip installs only where uv is missing or failed; then the check and the kernels' build
    assert calls[:-2] == {None: [pip_call], "exit 1": [uv_call, pip_call],
                          "exit 0": [uv_call]}[uv]
    assert calls[-2] == "python -m pip check"


@pytest.mark.parametrize("pythons, chosen", [
    ({"python3": "3.13.5", "python3.11": "3.11.2"}, "python3.11"),  # Debian 13
    ({"python3": "3.11.9"}, "python3"),
    ({"python3": "3.11.9", "python3.11": "3.11.9"}, "python3.11"),
])
def test_the_makefile_builds_the_environment_with_python_3_11(tmp_path, pythons, chosen):
    done = _make_setup_dry_run(tmp_path, pythons)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{chosen} -m venv {tmp_path / 'venv'}"


@pytest.mark.parametrize("pythons", [{}, {"python3": "3.13.5"},
                                     {"python3": "3.12.3", "python3.11": "3.13.0"}])
def test_without_python_3_11_the_makefile_stops_in_one_line_naming_the_ways(tmp_path,
                                                                          pythons):
    done = _make_setup_dry_run(tmp_path, pythons)
    assert done.returncode != 0 and "-m venv" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for way in ("Python 3.11", "conda env create -f environment.yml",
                "apt-get install python3.11", "uv python install 3.11"):
        assert way in lines[0], way


def test_make_demo_installs_only_the_core_and_setup_everything_in_one_call(tmp_path):
    for target, extras in (("demo", "cpu"), ("setup", "cpu,test,notebooks,docs")):
        venv = tmp_path / target / "venv"
        python = venv / "bin/python"
        (tmp_path / target).mkdir()
        done = _make_setup_dry_run(tmp_path / target, {"python3": "3.11.9"}, target)
        installs = [line for line in done.stdout.splitlines() if "pip install" in line]
        assert installs == [
            f"{python} -m pip install --quiet --upgrade pip uv || \\",
            f"  {python} -m pip install --quiet --upgrade pip || {{ rm -rf {venv}; exit 1; }}",
            f'if [ "1" = 1 ] && [ -x {venv}/bin/uv ] && {venv}/bin/uv pip install --quiet '
            f"--python {python} --compile-bytecode -e '.[{extras}]'; then :; "
            f"else {python} -m pip install --quiet -e '.[{extras}]'; fi"]
        # no setuptools in the environment, before anything is installed into it
        lines = done.stdout.splitlines()
        assert lines.index(f"{python} -m pip uninstall --quiet --yes setuptools || "
                           f"{{ rm -rf {venv}; exit 1; }}") == lines.index(installs[0]) - 1
        # setup: without the parser jsonschema would build at each import (the Makefile)
        slow = f"{python} -m pip uninstall --quiet --yes rfc3987-syntax"
        assert (slow in lines) == (target == "setup")
        if slow in lines:
            assert lines.index(slow) == lines.index(f"{python} -m pip check") - 1
    makefile = (ROOT / "Makefile").read_text()
    assert "\ndemo: $(VENV)/.core-installed\n" in makefile
    assert "\ndocs: setup\n" in makefile
