"""What a registry's answer means: only 'schema not found' (40403) is an unknown schema id;
every failure names the registry without its credentials and says what to check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_landing.avro_landing.registry_answers import (
    answer_error,
    is_schema_not_found,
    not_avro_reason,
    redact_url,
    unreachable_error,
)

SECRET_CHARS = st.characters(whitelist_categories=("Lu", "Ll", "Nd"), max_codepoint=127)


def test_only_40403_is_schema_not_found():
    assert is_schema_not_found(404, 40403)
    for status, code in [(404, 40401), (404, 40402), (404, None), (404, -1), (500, 40403), (200, 40403), (None, None)]:
        assert not is_schema_not_found(status, code), (status, code)


@given(st.integers(100, 599), st.one_of(st.none(), st.integers(-1, 99999)))
def test_nothing_else_is_schema_not_found(status, code):
    assert is_schema_not_found(status, code) == (status == 404 and code == 40403)


@given(user=st.text(SECRET_CHARS, min_size=1, max_size=12), password=st.text(SECRET_CHARS, min_size=10, max_size=30),
       port=st.integers(1, 65535), status=st.sampled_from([401, 403, 404, 500, 502, 503]))
def test_failures_never_show_the_password(user, password, port, status):
    url = f"https://{user}:{password}@registry.example:{port}/apis/ccompat/v7"
    for err in (answer_error(url, 7, status, 50001, f"echo {url} {password}"),
                unreachable_error(url, 7, OSError(f"connect to {url} failed"))):
        msg = str(err)
        assert password not in msg
        assert f"https://registry.example:{port}/apis/ccompat/v7" in msg
        assert "schema id 7" in msg and "Nothing of this hour was published" in msg


def test_redact_url_keeps_everything_but_credentials():
    assert redact_url("http://localhost:18081/apis/ccompat/v7") == "http://localhost:18081/apis/ccompat/v7"
    assert redact_url("https://u:p@h.example:8443/x?y=1") == "https://h.example:8443/x?y=1"
    assert redact_url("http://u:p@a:1,http://v:q@b:2/p") == "http://a:1,http://b:2/p"
    assert redact_url("http://u:p@[::1]:8081/") == "http://[::1]:8081/"


@pytest.mark.parametrize("status, code, hint", [
    (404, 40401, "not the registry's 'schema not found' (error code 40403)"),
    (404, None, "Confluent-compatible API root"),
    (401, 40101, "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"),
    (500, 50001, "the registry is failing"),
    (503, None, "the registry is failing"),
])
def test_each_answer_says_what_to_check(status, code, hint):
    msg = str(answer_error("http://r:8081", 42, status, code, "boom"))
    assert f"answered HTTP {status}" in msg and "schema id 42" in msg and hint in msg and "boom" in msg


def test_other_schema_types_have_their_own_reason():
    assert not_avro_reason(5, "PROTOBUF") == "schema id 5 is PROTOBUF, not AVRO"
