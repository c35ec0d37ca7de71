"""The option table: one declaration per knob, one accessor, strict parsing."""

import pytest

from mpiflow import config
from mpiflow.comm import cluster
from mpiflow.errors import InvalidArgumentError

REQUIRED = {
    "MPIFLOW_PS": None,
    "MPIFLOW_PS_POLICY": "block",
    "MPIFLOW_TIMEOUT": 300.0,
    "MPIFLOW_LOG_LEVEL": "INFO",
    "MPIFLOW_POLL_MAX_SLEEP_US": 200,
}


@pytest.mark.parametrize("name,default", REQUIRED.items())
def test_required_options_have_their_documented_defaults(name, default):
    assert config.Config(env={}).get(name) == default
    assert config.option(name).doc


def test_every_option_is_documented_and_its_default_parses_back():
    for option in config.OPTIONS.values():
        assert option.name.startswith("MPIFLOW_") and option.doc
        if option.default is not None:
            assert option.parse(str(option.default)) == option.default


@pytest.mark.parametrize("name,raw,value", [
    ("MPIFLOW_PS", "2", 2),
    ("MPIFLOW_PS", " 0 ", 0),
    ("MPIFLOW_PS_POLICY", "spread", "spread"),
    ("MPIFLOW_PS_POLICY", "SPREAD", "spread"),
    ("MPIFLOW_TIMEOUT", "2.5", 2.5),
    ("MPIFLOW_TIMEOUT", "10", 10.0),
    ("MPIFLOW_TIMEOUT", "inf", float("inf")),
    ("MPIFLOW_LOG_LEVEL", "debug", "DEBUG"),
    ("MPIFLOW_POLL_MAX_SLEEP_US", "50", 50),
])
def test_values_are_parsed_to_the_declared_type(name, raw, value):
    assert config.Config(env={name: raw}).get(name) == value


def test_empty_variable_counts_as_unset():
    cfg = config.Config(env={"MPIFLOW_PS": "", "MPIFLOW_TIMEOUT": "  "})
    assert cfg.get("MPIFLOW_PS") is None
    assert cfg.get("MPIFLOW_TIMEOUT") == 300.0
    assert not cfg.is_set("MPIFLOW_PS")
    assert config.Config(env={"MPIFLOW_PS": "1"}).is_set("MPIFLOW_PS")


@pytest.mark.parametrize("name,raw,expected", [
    ("MPIFLOW_PS", "abc", "an int >= 0"),
    ("MPIFLOW_PS", "1.5", "an int >= 0"),
    ("MPIFLOW_PS", "-1", "an int >= 0"),
    ("MPIFLOW_TIMEOUT", "soon", "a float > 0"),
    ("MPIFLOW_TIMEOUT", "nan", "a float > 0"),
    ("MPIFLOW_TIMEOUT", "0", "a float > 0"),            # every wait would fail at once
    ("MPIFLOW_PEER_TIMEOUT", "0", "a float > 0"),
    ("MPIFLOW_PS_POLICY", "round_robin", "one of 'block', 'spread'"),
    ("MPIFLOW_LOG_LEVEL", "LOUD", "one of 'DEBUG'"),
    ("MPIFLOW_POLL_MAX_SLEEP_US", "1ms", "an int >= 0"),
    # past what every rank's check receives whole
    ("MPIFLOW_CHECK_CARRY_BYTES", "65537", "an int >= 0 and <= 65536"),
])
def test_malformed_value_names_the_variable_and_expected_type(name, raw, expected):
    with pytest.raises(InvalidArgumentError) as info:
        config.Config(env={name: raw}).get(name)
    message = str(info.value)
    assert name in message and expected in message and repr(raw) in message


def test_unknown_option_lists_the_known_ones():
    with pytest.raises(InvalidArgumentError) as info:
        config.Config(env={}).get("MPIFLOW_TIMEOUTS")
    message = str(info.value)
    assert "MPIFLOW_TIMEOUTS" in message
    assert all(name in message for name in REQUIRED)


def test_module_accessor_reads_the_process_environment_live(monkeypatch):
    monkeypatch.setenv("MPIFLOW_PS", "3")
    assert config.get("MPIFLOW_PS") == 3
    monkeypatch.setenv("MPIFLOW_PS", "5")
    assert config.get("MPIFLOW_PS") == 5
    monkeypatch.delenv("MPIFLOW_PS")
    assert config.get("MPIFLOW_PS") is None
    assert config.default().get("MPIFLOW_TIMEOUT") == config.get("MPIFLOW_TIMEOUT")


def test_explicit_env_ignores_the_process_environment(monkeypatch):
    monkeypatch.setenv("MPIFLOW_PS", "3")
    assert config.Config(env={}).get("MPIFLOW_PS") is None


def test_replace_layers_values_without_touching_the_original():
    base = config.Config(env={"MPIFLOW_PS": "1", "MPIFLOW_TIMEOUT": "7"})
    changed = base.replace(MPIFLOW_PS=2, MPIFLOW_PS_POLICY="spread")
    assert (changed.get("MPIFLOW_PS"), changed.get("MPIFLOW_PS_POLICY")) == (2, "spread")
    assert changed.get("MPIFLOW_TIMEOUT") == 7.0
    assert (base.get("MPIFLOW_PS"), base.get("MPIFLOW_PS_POLICY")) == (1, "block")
    assert base.replace(MPIFLOW_PS=None).get("MPIFLOW_PS") is None


def test_replace_checks_names_now_and_values_when_read():
    base = config.Config(env={})
    with pytest.raises(InvalidArgumentError, match="MPIFLOW_NOPE"):
        base.replace(MPIFLOW_NOPE=1)
    bad = base.replace(MPIFLOW_PS="many")
    with pytest.raises(InvalidArgumentError, match="MPIFLOW_PS"):
        bad.get("MPIFLOW_PS")


def test_as_dict_has_every_option():
    assert set(config.Config(env={}).as_dict()) == set(config.OPTIONS)


def test_unknown_variables_reports_typos():
    cfg = config.Config(env={"MPIFLOW_TIMEOUTS": "5", "MPIFLOW_PS": "1", "PATH": "/bin"})
    assert cfg.unknown_variables() == ["MPIFLOW_TIMEOUTS"]


def test_declaring_an_option_twice_is_refused():
    with pytest.raises(Exception, match="MPIFLOW_PS is declared twice"):
        config._declare(config.Option("MPIFLOW_PS", "int", None, doc="again"))
    assert config.OPTIONS["MPIFLOW_PS"].doc != "again"


def test_describe_lists_every_option_with_its_default():
    text = config.describe()
    for name, default in REQUIRED.items():
        assert f"{name} (" in text and f"default {default!r}" in text


def test_policy_choices_match_the_registered_role_policies():
    assert set(config.option("MPIFLOW_PS_POLICY").choices) == set(cluster.POLICIES)


@pytest.mark.parametrize("raw,value", [("1", True), ("on", True), ("No", False), ("0", False)])
def test_boolean_options_accept_the_usual_spellings(raw, value):
    assert config.Config(env={"MPIFLOW_HOST_MEMORY_CACHE": raw}).get(
        "MPIFLOW_HOST_MEMORY_CACHE") is value


def test_boolean_option_rejects_other_text_naming_the_variable():
    with pytest.raises(InvalidArgumentError, match="MPIFLOW_HOST_MEMORY_CACHE.*maybe"):
        config.Config(env={"MPIFLOW_HOST_MEMORY_CACHE": "maybe"}).get(
            "MPIFLOW_HOST_MEMORY_CACHE")


@pytest.mark.parametrize("env", [{"MPIFLOW_PEER_TIMEOUT": "0.1"},
                                 {"MPIFLOW_HEARTBEAT_S": "2", "MPIFLOW_PEER_TIMEOUT": "5"}])
def test_a_peer_timeout_shorter_than_three_heartbeats_is_refused_naming_both(env):
    with pytest.raises(InvalidArgumentError) as info:
        config.heartbeat_settings(config.Config(env=env))
    assert "MPIFLOW_PEER_TIMEOUT" in str(info.value) and "MPIFLOW_HEARTBEAT_S" in str(info.value)


@pytest.mark.parametrize("env,settings", [
    ({}, (1.0, 30.0)),
    ({"MPIFLOW_HEARTBEAT_S": "0.25", "MPIFLOW_PEER_TIMEOUT": "1"}, (0.25, 1.0)),
    ({"MPIFLOW_HEARTBEAT_S": "0", "MPIFLOW_PEER_TIMEOUT": "0.5"}, (0.0, 0.5)),   # no beats
])
def test_liveness_settings_that_agree_pass(env, settings):
    assert config.heartbeat_settings(config.Config(env=env)) == settings
