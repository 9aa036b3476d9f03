"""Tests for ``bbb_gluon._kernels.machine``: the record of where a run replays bit for bit."""

import json
import sys

import pytest

from bbb_gluon._kernels import machine


def test_the_cpu_record_names_the_model_and_its_simd_flags():
    cpu = machine.cpu()
    assert cpu["model"] and isinstance(cpu["model"], str)
    assert set(cpu["flags"]) <= set(machine.SIMD_FLAGS)
    assert cpu["cores"] >= 1
    assert machine.cpu_text().endswith(f"{cpu['cores']} cores")


def test_the_kernels_are_built_for_this_cpu_unless_asked_to_be_portable(monkeypatch):
    monkeypatch.delenv("BBB_GLUON_PORTABLE_KERNELS", raising=False)
    assert machine.build_flags() == ["-O3", "-march=native", "-ffast-math"]
    assert not machine.portable()
    monkeypatch.setenv("BBB_GLUON_PORTABLE_KERNELS", "1")
    flags = machine.build_flags()
    assert machine.portable()
    assert "-march=native" not in flags and "-ffast-math" not in flags
    assert "-ffp-contract=off" in flags and "-fno-fast-math" in flags
    monkeypatch.setenv("BBB_GLUON_PORTABLE_KERNELS", "yes")
    with pytest.raises(ValueError, match="BBB_GLUON_PORTABLE_KERNELS must be 0 or 1"):
        machine.build_flags()


def test_a_record_holds_the_cpu_the_build_and_the_threads():
    record = machine.describe({"train": 2, "predict": 2}, "fused")
    assert record["cpu"] == machine.cpu()
    assert record["kernels"]["flags"] == machine.build_flags()
    assert record["threads"] == {"train": 2, "predict": 2} and record["engine"] == "fused"
    assert record["python"] == ".".join(map(str, sys.version_info[:3]))
    json.dumps(record)  # it goes into config.json as it is


def test_differences_name_what_changes_the_numbers():
    a = machine.describe({"train": 2, "predict": 2}, "fused")
    assert machine.differences(a, json.loads(json.dumps(a))) == []
    b = json.loads(json.dumps(a))
    b["threads"] = {"train": 1, "predict": 1}
    b["cpu"]["model"] = "Intel Xeon"
    b["cpu"]["cores"] = 16  # the core count alone changes nothing: the threads are recorded
    b["python"] = "3.12.0"  # nor does Python's version (NumPy's and MXNet's do)
    changed = machine.differences(a, b)
    assert len(changed) == 2
    assert changed[0].startswith("cpu.model: recorded") and "'Intel Xeon'" in changed[0]
    assert changed[1].startswith("threads: recorded {'train': 2")
    del b["threads"]  # a part only one record holds is not compared
    assert len(machine.differences(a, b)) == 1


def test_recorded_threads_reads_the_most_of_any_stretch(tmp_path):
    assert machine.recorded_threads(tmp_path) is None  # no config.json
    (tmp_path / "config.json").write_text(json.dumps({"train": {}, "machines": [
        {"threads": {"train": 2, "predict": 2}}, {"threads": {"train": 1, "predict": 1}}]}))
    assert machine.recorded_threads(tmp_path) == 2
    (tmp_path / "config.json").write_text(json.dumps({"train": {}}))  # written before
    assert machine.recorded_threads(tmp_path) is None
    (tmp_path / "config.json").write_text("{not json")
    assert machine.recorded_threads(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"machines": [{"threads": None}]}))
    assert machine.recorded_threads(tmp_path) is None
