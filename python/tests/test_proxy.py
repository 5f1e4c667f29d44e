"""airlock.Proxy against real `airlock proxy --admin` daemons (Unix socket and TCP)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Dict, List

import pytest

import airlock
from conftest import DEADLINE, AdminProxy, run


def test_policy_get_and_put_with_etags(unix_proxy: AdminProxy) -> None:
    proxy = airlock.Proxy(unix_proxy.admin or "")
    assert proxy.health()["status"] == "ok"
    current = proxy.policy()
    assert current["policy"]["network"]["allow"] == [{"host": "allowed.test"}]
    assert isinstance(current["etag"], str) and current["etag"]

    stamp = proxy.put_policy(
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n    - host: also.test\n",
        if_match=current["etag"],
    )
    assert stamp["version"] == current["version"] + 1
    assert stamp["etag"] != current["etag"]
    hosts = [rule["host"] for rule in proxy.policy()["policy"]["network"]["allow"]]
    assert hosts == ["allowed.test", "also.test"]

    # The old etag is stale now: nothing changes, the current etag is said.
    with pytest.raises(airlock.PolicyConflict) as conflict:
        proxy.put_policy({"version": 1, "network": {"allow": [{"host": "x.test"}]}}, if_match=current["etag"])
    assert conflict.value.status == 412
    assert conflict.value.etag == stamp["etag"]
    assert proxy.policy()["etag"] == stamp["etag"]

    # A dict goes as JSON.
    again = proxy.put_policy({"version": 1, "network": {"allow": [{"host": "json.test"}]}}, if_match="*")
    assert proxy.policy()["policy"]["network"]["allow"] == [{"host": "json.test"}]
    assert again["version"] == stamp["version"] + 1


def test_an_invalid_policy_lists_every_error(unix_proxy: AdminProxy) -> None:
    proxy = airlock.Proxy(unix_proxy.admin or "")
    before = proxy.policy()
    with pytest.raises(airlock.InvalidPolicy) as caught:
        proxy.put_policy("version: 1\nnetwork:\n  allow:\n    - hots: a.test\n")
    error = caught.value
    assert isinstance(error, airlock.AdminError) and isinstance(error, airlock.AirlockError)
    assert error.status == 400
    assert error.errors and all("location" in e and "message" in e for e in error.errors)
    assert "hots" in str(error)
    assert proxy.policy()["etag"] == before["etag"]
    with pytest.raises(TypeError):
        proxy.put_policy(42)  # type: ignore[arg-type]


def test_denials_and_events(unix_proxy: AdminProxy) -> None:
    proxy = airlock.Proxy(unix_proxy.admin or "")
    assert proxy.denials() == []

    async def scenario() -> List[Dict[str, Any]]:
        received: List[Dict[str, Any]] = []
        events = proxy.events(decision="deny")

        async def listen() -> None:
            async for event in events:
                received.append(event)
                if len(received) == 2:
                    return

        listener = asyncio.ensure_future(listen())
        # The stream is open once the server's first comment arrived; retry the refused
        # request until it is seen (bounded).
        loop = asyncio.get_running_loop()
        for attempt in range(100):
            if listener.done():
                break
            await loop.run_in_executor(None, unix_proxy.refused_request, f"denied{attempt}.test", "/secret")
            await asyncio.sleep(0.1)
        await asyncio.wait_for(listener, DEADLINE)
        return received

    received = run(scenario())
    assert len(received) == 2
    assert all(event["decision"] == "deny" for event in received)
    assert received[0]["host"].startswith("denied") and received[0]["path"] == "/secret"

    denials = proxy.denials(limit=50)
    assert len(denials) >= 2
    assert denials[-1]["reason"] == "host_not_allowed"
    assert len(proxy.denials(limit=1)) == 1
    with pytest.raises(ValueError):
        proxy.denials(limit=-1)


def test_cancelling_events_closes_the_stream(unix_proxy: AdminProxy) -> None:
    proxy = airlock.Proxy(unix_proxy.admin or "")

    async def scenario() -> None:
        async def listen() -> None:
            async for _ in proxy.events():
                pass

        task = asyncio.ensure_future(listen())
        await asyncio.sleep(0.5)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario(), timeout=DEADLINE)
    assert proxy.health()["status"] == "ok"


def test_pending_and_decide_follow_the_contract(unix_proxy: AdminProxy) -> None:
    """`/v1/pending` (asking, the contract of issue 19): a proxy that does not offer it answers 404
    for the route, surfaced as EndpointNotFound; one that does answers a list, and an
    unknown id is NotFound."""
    proxy = airlock.Proxy(unix_proxy.admin or "")
    try:
        pending = proxy.pending()
    except airlock.EndpointNotFound as missing:
        assert missing.status == 404
        assert "does not offer GET /v1/pending" in str(missing)
        offered = False
    else:
        assert pending == []
        offered = True
    with pytest.raises(airlock.NotFound) as caught:
        proxy.decide("no-such-request", "allow", scope="once")
    assert caught.value.status == 404
    if not offered:
        assert isinstance(caught.value, airlock.EndpointNotFound)
    with pytest.raises(ValueError):
        proxy.decide("x", "maybe")
    with pytest.raises(ValueError):
        proxy.decide("x", "allow", scope="forever")


def test_tcp_admin_needs_the_token(tcp_proxy: AdminProxy) -> None:
    address = tcp_proxy.admin or ""
    assert address.startswith("127.0.0.1:")
    proxy = airlock.Proxy(f"http://{address}", token="s3cret-admin-token")
    assert proxy.policy()["policy"]["network"]["allow"] == [{"host": "allowed.test"}]
    assert proxy.denials() == []

    for wrong in (airlock.Proxy(f"http://{address}"), airlock.Proxy(f"http://{address}", token="wrong")):
        with pytest.raises(airlock.Unauthorized) as caught:
            wrong.policy()
        assert caught.value.status == 401
        assert "bearer token" in caught.value.message

        async def listen(client: airlock.Proxy = wrong) -> None:
            async for _ in client.events():
                pass

        with pytest.raises(airlock.Unauthorized):
            run(listen(), timeout=DEADLINE)

    async def one_event() -> Dict[str, Any]:
        events = proxy.events()
        loop = asyncio.get_running_loop()

        async def first() -> Dict[str, Any]:
            async for event in events:
                return event
            raise AssertionError("the stream ended")

        waiting = asyncio.ensure_future(first())
        for attempt in range(100):
            if waiting.done():
                break
            await loop.run_in_executor(None, tcp_proxy.refused_request, f"tcp{attempt}.test")
            await asyncio.sleep(0.1)
        return await asyncio.wait_for(waiting, DEADLINE)

    event = run(one_event())
    assert event["host"].startswith("tcp") and event["decision"] == "deny"


def test_connection_and_address_errors(tmp_path) -> None:
    with pytest.raises(OSError):
        airlock.Proxy(f"unix:{tmp_path}/nothing.sock", timeout=5).policy()
    # A loopback port that nobody listens on.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(OSError):
        airlock.Proxy(f"http://127.0.0.1:{port}", token="t", timeout=5).policy()
    for bad in ("unix:", "https://127.0.0.1:1", "http://127.0.0.1:1/path"):
        with pytest.raises(ValueError):
            airlock.Proxy(bad)


def test_unknown_routes_are_endpoint_not_found(unix_proxy: AdminProxy) -> None:
    proxy = airlock.Proxy(unix_proxy.admin or "")
    with pytest.raises(airlock.EndpointNotFound) as caught:
        proxy._call("GET", "/v1/no-such-thing")
    assert caught.value.body == {"error": "no such route"}
