"""Tests for bbb_gluon.training.config: TrainConfig's groups, the settings a method
chooses where a configuration leaves them out, and the committed runs' records."""

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest

from bbb_gluon import TrainConfig
from bbb_gluon.methods import METHODS
from bbb_gluon.training.config import METHOD_DEFAULT, OPTIMIZERS, split_record

ROOT = Path(__file__).resolve().parents[2]
RUN_RECORDS = sorted(p for p in ROOT.glob("results/**/config.json")
                     if "train" in json.loads(p.read_text()))


def documented_parameters():
    """The names TrainConfig's docstring documents, in its order ("a, b : ..." lines)."""
    doc = inspect.getdoc(TrainConfig)
    section = doc.split("Parameters\n----------\n", 1)[1]
    names = []
    for line in section.splitlines():
        match = re.match(r"^([a-z_0-9]+(?:, [a-z_0-9]+)*) : ", line)
        if match:
            names += match.group(1).split(", ")
    return names


def test_the_docstring_documents_every_setting_in_the_fields_order():
    # the groups a reader sees are the order the fields are declared in
    assert documented_parameters() == [f.name for f in dataclasses.fields(TrainConfig)]


def test_the_groups_named_in_the_docstring_start_where_the_fields_do():
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    doc = " ".join(inspect.getdoc(TrainConfig).split())
    for first, last in re.findall(r"\(``(\w+)`` to ``(\w+)``\)", doc):
        assert names.index(first) < names.index(last)
    assert len(re.findall(r"\(``(\w+)`` to ``(\w+)``\)", doc)) == 3


def test_settings_are_keywords_only():
    with pytest.raises(TypeError, match=r"by name, not positional.*TrainConfig\(model='bbb'"):
        TrainConfig("bbb")


@pytest.mark.parametrize("name", sorted(METHODS))
@pytest.mark.parametrize("likelihood", ["softmax", "gaussian"])
def test_a_method_starts_from_its_defaults_and_the_rest_from_defaults(name, likelihood):
    method = METHODS[name]
    config = TrainConfig(model=name, likelihood=likelihood)
    own = method.regression_defaults if likelihood == "gaussian" else method.defaults
    base = TrainConfig.defaults()
    for field in dataclasses.fields(TrainConfig):
        value = getattr(config, field.name)
        assert value is not METHOD_DEFAULT
        if field.name in own:
            assert value == own[field.name], field.name
        elif field.name not in ("model", "likelihood", "complexity_warmup",
                                "complexity_ramp"):
            assert value == base[field.name], field.name


def test_a_setting_given_is_kept_even_where_it_equals_the_fallback():
    # 1e-3 is the fallback lr; given, it is the user's choice, not IVON's 0.1
    assert TrainConfig(model="ivon", lr=1e-3).lr == 1e-3
    assert TrainConfig(model="ivon").lr == 0.1
    # a changed copy keeps every setting it had: the method's defaults are not re-applied
    moved = dataclasses.replace(TrainConfig(model="ivon"), lr=0.2)
    assert (moved.lr, moved.mu_init) == (0.2, "copy")


def test_a_regression_warms_up_for_a_fifth_of_its_epochs_unless_told():
    assert TrainConfig(likelihood="gaussian", epochs=50).complexity_warmup == 10
    assert TrainConfig(likelihood="gaussian", epochs=50).complexity_ramp == 10
    assert TrainConfig(likelihood="gaussian", epochs=50, complexity_ramp=3).complexity_ramp == 3


def test_defaults_are_a_plain_bbb_classifiers():
    made = TrainConfig()
    assert TrainConfig.defaults() == {f.name: getattr(made, f.name)
                                      for f in dataclasses.fields(TrainConfig)}


def test_a_method_with_a_default_no_method_may_choose_is_refused_when_used(monkeypatch):
    monkeypatch.setattr(type(METHODS["plain"]), "defaults", {"batch_size": 64})
    with pytest.raises(TypeError, match=r"\['batch_size'\].*lets no method choose"):
        TrainConfig(model="plain")


def test_optimizers_are_the_command_lines_choices():
    from bbb_gluon.cli.parser import build_parser

    train = build_parser("train").train_parser
    action = next(a for a in train._actions if a.dest == "optimizer")
    assert tuple(action.choices) == OPTIMIZERS


@pytest.mark.parametrize("path", RUN_RECORDS, ids=lambda p: p.parent.name)
def test_every_committed_runs_record_loads_and_round_trips(path):
    record, _ = split_record(json.loads(path.read_text())["train"])
    config = TrainConfig.from_dict(record)
    again = config.to_dict()
    for name, value in record.items():
        stored = json.loads(json.dumps(again[name]))
        assert stored == value, (path, name)
