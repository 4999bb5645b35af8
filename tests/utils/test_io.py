"""parse_http_response against a real HTTP server (subprocess) through aiohttp."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from atroposlib.utils.io import parse_http_response
from tests.helpers.http_stub import run_stub


@pytest.fixture(scope="module")
def stub_url():
    with run_stub() as url:
        yield url


async def test_returns_json_body(stub_url):
    async with aiohttp.ClientSession() as session, session.get(f"{stub_url}/ok") as resp:
        assert await parse_http_response(resp) == {"ok": True, "items": [1, 2]}


async def test_bad_status_logs_status_and_body_then_reraises(stub_url, caplog):
    log = logging.getLogger("io-test")
    async with aiohttp.ClientSession() as session, session.get(f"{stub_url}/error") as resp:
        with (
            caplog.at_level(logging.ERROR, logger="io-test"),
            pytest.raises(aiohttp.ClientResponseError) as err,
        ):
            await parse_http_response(resp, log)
    assert err.value.status == 500
    record = caplog.records[-1]
    assert record.name == "io-test"
    assert "Status: 500" in record.getMessage() and "server exploded" in record.getMessage()


async def test_non_json_body_is_logged_and_reraised(stub_url, caplog):
    async with aiohttp.ClientSession() as session, session.get(f"{stub_url}/notjson") as resp:
        with caplog.at_level(logging.ERROR), pytest.raises(aiohttp.ContentTypeError):
            await parse_http_response(resp)
    assert "plain words" in caplog.text


async def test_sync_response_objects_are_supported(stub_url):
    import requests

    resp = requests.get(f"{stub_url}/ok", timeout=5)
    assert await parse_http_response(resp) == {"ok": True, "items": [1, 2]}
    resp = requests.get(f"{stub_url}/error", timeout=5)
    with pytest.raises(requests.HTTPError):
        await parse_http_response(resp)
