"""The guard's "Vigil itself" rule (engine/addresses.py): decided by the resolved address and port, FETCH_ALLOW_LOOPBACK
or not; a listening address of 0.0.0.0 or :: stands for every address of this machine on that port. And the settings
that feed it, and the tool steps that only the owner may arm (issue 28)."""

from __future__ import annotations

import pytest

from adapters.settings import Settings, SettingsError
from engine.addresses import Own, own_literal_reason, resolve_guarded
from engine.errors import BlockedURL
from engine.tools import parse_tool, vouched_writes

ITSELF = "is Vigil itself; a monitor can't watch or call Vigil's own API."


def refused(host: str, port: int, own: Own) -> str:
    with pytest.raises(BlockedURL) as info:
        resolve_guarded(host, port, True, own)
    return info.value.message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::ffff:127.0.0.1"])
def test_own_origin_refused_by_its_resolved_address_with_loopback_allowed(host):
    own = Own.of(["http://localhost:8000/"])
    assert ITSELF in refused(host, 8000, own)
    assert resolve_guarded(host, 8001, True, own), "another port of the same machine is not Vigil"


def test_own_origin_refused_by_name_and_default_port():
    own = Own.of(["https://vigil.example.com", "", "http://[::1]:9000"])
    assert own.origins == {("vigil.example.com", 443), ("::1", 9000)}
    assert refused("Vigil.Example.COM", 443, own) == ("The url points to Vigil.Example.COM:443, which " + ITSELF)
    assert ITSELF in refused("::1", 9000, own)
    assert ITSELF in refused("LOCALHOST.", 8000, Own.of(["http://localhost:8000"])), "refused before any lookup"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_wildcard_listening_address_covers_every_local_address_on_its_port(host):
    own = Own.of([], [("0.0.0.0", 8123)])
    assert ITSELF in refused(host, 8123, own)
    assert resolve_guarded(host, 8124, True, own)


def test_specific_listening_address_covers_only_itself():
    own = Own.of([], [("127.0.0.1", 8123)])
    assert ITSELF in refused("127.0.0.1", 8123, own)
    assert resolve_guarded("127.0.0.2", 8123, True, own) == ["127.0.0.2"]


def test_no_own_endpoints_leaves_the_guard_as_it_was():
    assert resolve_guarded("127.0.0.1", 8000, True, Own()) == ["127.0.0.1"]
    assert resolve_guarded("127.0.0.1", 8000, True, None) == ["127.0.0.1"]


def test_own_literal_reason_without_dns():
    own = Own.of(["https://vigil.example.com"], [("::", 8000)])
    assert own_literal_reason("https://vigil.example.com/hook", own).endswith(ITSELF)
    assert own_literal_reason("http://localhost:8000/hook", own).endswith(ITSELF)
    assert own_literal_reason("http://127.0.0.1:8000/hook", own).endswith(ITSELF)
    assert own_literal_reason("http://127.0.0.1:8001/hook", own) is None
    assert own_literal_reason("https://hooks.example.com/", own) is None
    assert own_literal_reason("http://127.0.0.1:8000/hook", None) is None


def test_settings_web_listen_addresses_parse_and_serve_adds_its_own():
    settings = Settings(WEB_LISTEN_ADDRESSES="0.0.0.0:8000, [::]:9000")
    assert settings.listen_addresses == (("0.0.0.0", 8000), ("::", 9000))
    assert settings.listening_on("::1", 7000).listen_addresses[-1] == ("::1", 7000)
    assert Settings().listening_on("127.0.0.1", 8000).WEB_LISTEN_ADDRESSES == "127.0.0.1:8000"


@pytest.mark.parametrize("raw", ["8000", "localhost", "host:port", "0.0.0.0:70000"])
def test_settings_bad_web_listen_addresses_fail_at_start_up(raw, tmp_path):
    with pytest.raises(SettingsError, match="WEB_LISTEN_ADDRESSES"):
        Settings.from_env({"WEB_LISTEN_ADDRESSES": raw, "VIGIL_DATA_DIR": str(tmp_path)})


def test_vouched_writes_are_the_non_get_steps_only_marked_read_only():
    steps = [{"method": "GET", "url": "https://a.example/x"},
             {"method": "POST", "url": "https://a.example/search", "read_only": True, "body": {"q": 1}},
             {"method": "HEAD", "url": "https://a.example/y", "read_only": True}]
    assert vouched_writes(parse_tool("t", {"steps": steps})) == [1]
    assert vouched_writes(parse_tool("t", {"steps": [steps[0], steps[2]]})) == []
