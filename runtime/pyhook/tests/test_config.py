import logging

import pytest

from kvcanary import config
from kvcanary.config import Settings, SettingError, parse_addr


def test_defaults_when_unset():
    s = Settings.from_env({})
    assert s == Settings()
    assert s.addr is None and not s.enabled
    assert s.instruments == frozenset({"checksum", "canary", "graphdiff"})
    assert s.canary_policy == "live" and s.canary_every == 64  # README "Cost model"
    assert s.graphdiff_every == 256 and s.graphdiff_layers == ()
    assert s.graphdiff_logits == "topk:20" and s.logits_mode == "topk" and s.logits_k == 20
    assert s.checksum_pages is True and s.queue == 4096 and s.log == "warning"
    assert not s.instrument("checksum")  # no address: every instrument off


def test_every_variable_parsed():
    env = {
        "KVCANARY_ADDR": "unix:///tmp/x.sock",
        "KVCANARY_RUN": "r-7",
        "KVCANARY_INSTRUMENTS": " Checksum , canary ",
        "KVCANARY_CANARY_POLICY": "SWEEP:08",
        "KVCANARY_CANARY_EVERY": "4",
        "KVCANARY_GRAPHDIFF_EVERY": "64",
        "KVCANARY_GRAPHDIFF_LAYERS": "5, 1,5",
        "KVCANARY_GRAPHDIFF_LOGITS": "full",
        "KVCANARY_CHECKSUM_PAGES": "0",
        "KVCANARY_QUEUE": "128",
        "KVCANARY_LOG": "DEBUG",
        "KVCANARY_TLS_CERT": " /etc/kv/c.pem ",
        "KVCANARY_TLS_KEY": "/etc/kv/k.pem",
        "KVCANARY_TLS_CA": "/etc/kv/ca.pem",
    }
    s = Settings.from_env(env)
    assert s.addr == "unix:///tmp/x.sock" and s.enabled
    assert s.run == "r-7"
    assert s.instruments == frozenset({"checksum", "canary"})
    assert s.instrument("checksum") and not s.instrument("graphdiff")
    assert s.canary_policy == "sweep:8" and s.canary_sweep == 8
    assert s.canary_every == 4 and s.graphdiff_every == 64
    assert s.graphdiff_layers == (1, 5)
    assert s.graphdiff_layer(5) and not s.graphdiff_layer(2)
    assert s.graphdiff_logits == "full" and s.logits_mode == "full" and s.logits_k == 0
    assert s.checksum_pages is False and s.queue == 128 and s.log == "debug"
    assert (s.tls_cert, s.tls_key, s.tls_ca) == ("/etc/kv/c.pem", "/etc/kv/k.pem", "/etc/kv/ca.pem")
    # every variable of the table is covered by this test
    assert set(env) == set(config.VARIABLES)


def test_layers_all_and_logits_none():
    s = Settings.from_env({"KVCANARY_GRAPHDIFF_LAYERS": "all", "KVCANARY_GRAPHDIFF_LOGITS": "none"})
    assert s.graphdiff_layers == "all" and s.graphdiff_layer(60)
    assert s.logits_mode == "none"


def test_empty_instruments_enables_none():
    s = Settings.from_env({"KVCANARY_ADDR": "tcp://127.0.0.1:9", "KVCANARY_INSTRUMENTS": ""})
    assert s.instruments == frozenset()
    assert not s.instrument("canary")


BAD = [
    ("KVCANARY_ADDR", "http://x", "addr"),
    ("KVCANARY_ADDR", "unix://relative.sock", "addr"),
    ("KVCANARY_ADDR", "tcp://127.0.0.1:0", "addr"),
    ("KVCANARY_ADDR", "tcp://:9000", "addr"),
    ("KVCANARY_CANARY_POLICY", "some", "canary_policy"),
    ("KVCANARY_CANARY_POLICY", "sweep:0", "canary_policy"),
    ("KVCANARY_CANARY_EVERY", "0", "canary_every"),
    ("KVCANARY_CANARY_EVERY", "-3", "canary_every"),
    ("KVCANARY_GRAPHDIFF_EVERY", "often", "graphdiff_every"),
    ("KVCANARY_GRAPHDIFF_LAYERS", "1,x", "graphdiff_layers"),
    ("KVCANARY_GRAPHDIFF_LOGITS", "topk:0", "graphdiff_logits"),
    ("KVCANARY_GRAPHDIFF_LOGITS", "half", "graphdiff_logits"),
    ("KVCANARY_CHECKSUM_PAGES", "maybe", "checksum_pages"),
    ("KVCANARY_QUEUE", "0", "queue"),
    ("KVCANARY_QUEUE", "1e9", "queue"),
    ("KVCANARY_LOG", "loud", "log"),
]


@pytest.mark.parametrize("var,value,field", BAD)
def test_bad_value_warns_once_and_falls_back(var, value, field, caplog):
    with caplog.at_level(logging.WARNING, logger="kvcanary"):
        s = Settings.from_env({var: value})
    assert getattr(s, field) == getattr(Settings(), field)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    msg = warnings[0].getMessage()
    assert var in msg and repr(value) in msg and "default" in msg


def test_unknown_instrument_is_ignored_not_all_enabled(caplog):
    with caplog.at_level(logging.WARNING, logger="kvcanary"):
        s = Settings.from_env({"KVCANARY_INSTRUMENTS": "checksum,canry"})
    assert s.instruments == frozenset({"checksum"})
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "KVCANARY_INSTRUMENTS" in msgs[0] and "'canry'" in msgs[0]


def test_parser_raising_anything_never_escapes(monkeypatch, caplog):
    def boom(_):
        raise RuntimeError("unexpected")
    monkeypatch.setitem(config._VARS, "KVCANARY_QUEUE", ("queue", boom))
    with caplog.at_level(logging.WARNING, logger="kvcanary"):
        s = Settings.from_env({"KVCANARY_QUEUE": "5"})
    assert s.queue == 4096
    assert "KVCANARY_QUEUE" in caplog.records[0].getMessage()


@pytest.mark.parametrize("s,want", [
    ("unix:///run/k.sock", ("unix", "/run/k.sock", "", 0, True)),
    ("tcp://127.0.0.1:7000", ("tcp", "", "127.0.0.1", 7000, True)),
    ("tcp://localhost:7000", ("tcp", "", "localhost", 7000, True)),
    ("tcp://[::1]:7000", ("tcp", "", "::1", 7000, True)),
    ("tcp://10.0.0.2:7000", ("tcp", "", "10.0.0.2", 7000, False)),
])
def test_parse_addr(s, want):
    a = parse_addr(s)
    assert (a.scheme, a.path, a.host, a.port, a.loopback) == want
    assert str(a) == s


@pytest.mark.parametrize("s", ["", "unix://", "tcp://127.0.0.1", "tcp://127.0.0.1:99999",
                               "tcp://[::1]7000", "tcp://::1:7000", "udp://127.0.0.1:1"])
def test_parse_addr_rejects(s):
    with pytest.raises(SettingError) as e:
        parse_addr(s)
    assert repr(s) in str(e.value)


def test_apply_logging():
    s = Settings.from_env({"KVCANARY_LOG": "error"})
    lg = logging.getLogger("kvcanary")
    old = lg.level
    try:
        s.apply_logging()
        assert lg.level == logging.ERROR
    finally:
        lg.setLevel(old)
