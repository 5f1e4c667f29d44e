"""The admin API of ``airlock proxy --admin`` (docs/operations.md), over a Unix socket or
TCP with a bearer token. Standard library only: ``http.client`` for the calls, asyncio
streams for the event stream."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import urllib.parse
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple, Union

from ._errors import (
    AdminError,
    EndpointNotFound,
    InvalidPolicy,
    NotFound,
    PolicyConflict,
    ProtocolError,
    Unauthorized,
)

__all__ = ["Proxy"]

# Bounds on what the event stream accepts from the server.
_HEADER_LIMIT = 64 * 1024
_HEADER_COUNT = 100
_EVENT_LIMIT = 4 * 1024 * 1024
# The server's answer to a path it does not know.
_NO_SUCH_ROUTE = "no such route"


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Proxy:
    """A client of one airlock proxy's admin API.

    ``admin`` is ``"unix:PATH"`` (the socket of ``--admin unix:PATH``) or ``"http://HOST:PORT"``
    (``--admin HOST:PORT``, which needs ``token``: the content of ``--admin-token-file``).
    ``timeout`` bounds every call (connect and each read), in seconds.

    Errors are :class:`~airlock.AdminError` subclasses carrying the server's message:
    :class:`~airlock.Unauthorized` (401), :class:`~airlock.InvalidPolicy` (400),
    :class:`~airlock.PolicyConflict` (412), :class:`~airlock.NotFound` (404) and its
    :class:`~airlock.EndpointNotFound` when the server does not offer the call at all.
    A connection failure is an ``OSError``.
    """

    def __init__(self, admin: str, token: Optional[str] = None, *, timeout: float = 30.0) -> None:
        self.admin = admin
        self.token = token.strip() if token is not None else None
        self.timeout = timeout
        if admin.startswith("unix:"):
            path = admin[len("unix:") :]
            if not path:
                raise ValueError("unix: needs a socket path")
            self._unix: Optional[str] = path
            self._host = "localhost"
            self._port = 0
        else:
            url = admin if "://" in admin else "http://" + admin
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/"):
                raise ValueError(f"admin must be 'unix:PATH' or 'http://HOST:PORT', not {admin!r}")
            self._unix = None
            self._host = parsed.hostname
            self._port = parsed.port or 80

    def __repr__(self) -> str:
        return f"Proxy({self.admin!r})"

    # Calls.

    def health(self) -> Dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", "policy_version": N}``."""
        return _object(self._call("GET", "/healthz"))

    def policy(self) -> Dict[str, Any]:
        """``GET /v1/policy``: ``{"version": N, "etag": "...", "policy": {...}}``."""
        return _object(self._call("GET", "/v1/policy"))

    def put_policy(self, policy: Union[str, Dict[str, Any]], if_match: Optional[str] = None) -> Dict[str, Any]:
        """``PUT /v1/policy``: replaces the policy; a ``str`` is sent as YAML, a ``dict`` as
        JSON. With ``if_match`` (an etag from :meth:`policy`, or ``"*"``) the change is made
        only if that policy is still in force (:class:`~airlock.PolicyConflict` otherwise).
        Returns ``{"version": N, "etag": "..."}``; an invalid policy raises
        :class:`~airlock.InvalidPolicy` with every error (nothing changed)."""
        if isinstance(policy, str):
            body, content_type = policy.encode("utf-8"), "application/yaml"
        elif isinstance(policy, dict):
            body, content_type = json.dumps(policy).encode("utf-8"), "application/json"
        else:
            raise TypeError("policy must be YAML text (str) or a dict")
        headers = {"Content-Type": content_type}
        if if_match is not None:
            headers["If-Match"] = if_match
        return _object(self._call("PUT", "/v1/policy", body=body, headers=headers))

    def denials(self, limit: int = 50) -> List[Dict[str, Any]]:
        """``GET /v1/denials``: the ``limit`` most recent refusals (audit lines), oldest first."""
        if not isinstance(limit, int) or limit < 0:
            raise ValueError("limit must be a non-negative integer")
        answer = _object(self._call("GET", f"/v1/denials?limit={limit}"))
        return list(answer.get("denials", []))

    def pending(self) -> List[Dict[str, Any]]:
        """``GET /v1/pending``: the requests held for an answer (``--mode ask``), each
        ``{"id", "method", "host", "path", "reason", "suggestion", "since"}``."""
        answer = self._call("GET", "/v1/pending", missing="GET /v1/pending (asking, --mode ask)")
        if isinstance(answer, dict) and "pending" in answer:
            answer = answer["pending"]
        return list(answer)

    def decide(self, id: str, decision: str, scope: str = "once") -> Dict[str, Any]:
        """``POST /v1/pending/{id}``: answers a held request. ``decision`` is ``"allow"`` or
        ``"deny"``; ``scope`` is ``"once"``, ``"run"`` (for the rest of this run) or
        ``"save"`` (the rule is appended to the first policy file). A request that is no
        longer pending raises :class:`~airlock.NotFound`."""
        if decision not in ("allow", "deny"):
            raise ValueError("decision must be 'allow' or 'deny'")
        if scope not in ("once", "run", "save"):
            raise ValueError("scope must be 'once', 'run' or 'save'")
        body = json.dumps({"decision": decision, "scope": scope}).encode("utf-8")
        path = "/v1/pending/" + urllib.parse.quote(str(id), safe="")
        return _object(self._call(
            "POST",
            path,
            body=body,
            headers={"Content-Type": "application/json"},
            missing="POST /v1/pending/{id} (asking, --mode ask)",
        ))

    async def events(self, decision: Optional[str] = None, kind: Optional[str] = None) -> AsyncIterator[Dict[str, Any]]:
        """``GET /v1/events``: every audit line from now on, as a dict, as it happens.
        ``decision`` (``"allow"``/``"deny"``) and ``kind`` (``"http"``, ``"tcp"``, ...) filter
        on the server. Ends when the proxy closes the stream; cancel the consuming task (or
        close the generator) to stop listening."""
        query = {key: value for key, value in (("decision", decision), ("kind", kind)) if value is not None}
        target = "/v1/events" + ("?" + urllib.parse.urlencode(query) if query else "")
        reader, writer = await self._open_stream()
        try:
            request = [f"GET {target} HTTP/1.1", f"Host: {self._host_header()}", "Accept: text/event-stream"]
            if self.token is not None:
                request.append(f"Authorization: Bearer {self.token}")
            writer.write(("\r\n".join(request) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            status, headers = await asyncio.wait_for(_read_head(reader), self.timeout)
            if status != 200:
                body = await asyncio.wait_for(_read_body(reader, headers), self.timeout)
                raise _error(status, body, None)
            chunks = _chunks(reader) if "chunked" in headers.get("transfer-encoding", "").lower() else _raw(reader)
            async for event in _sse(chunks):
                yield event
        finally:
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            except (asyncio.TimeoutError, OSError):
                pass

    # Plumbing.

    def _host_header(self) -> str:
        if self._unix is not None:
            return "localhost"
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    def _connection(self) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, self.timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    async def _open_stream(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._unix is not None:
            opening = asyncio.open_unix_connection(self._unix, limit=_EVENT_LIMIT)
        else:
            opening = asyncio.open_connection(self._host, self._port, limit=_EVENT_LIMIT)
        return await asyncio.wait_for(opening, self.timeout)

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        headers: Optional[Dict[str, str]] = None,
        missing: Optional[str] = None,
    ) -> Any:
        all_headers = {"Accept": "application/json", "Host": self._host_header()}
        if self.token is not None:
            all_headers["Authorization"] = f"Bearer {self.token}"
        all_headers.update(headers or {})
        connection = self._connection()
        try:
            try:
                connection.request(method, path, body=body, headers=all_headers)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer an error before reading the body and close; its
                # answer is still there to read (if not, getresponse raises).
                pass
            response = connection.getresponse()
            raw = response.read()
            status = response.status
        finally:
            connection.close()
        decoded = _decode(raw)
        if 200 <= status < 300:
            return decoded if decoded is not None else {}
        raise _error(status, decoded, missing)


def _object(answer: Any) -> Dict[str, Any]:
    if not isinstance(answer, dict):
        raise ProtocolError(f"airlock admin API: expected a JSON object, got {str(answer)[:200]!r}")
    return answer


def _decode(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _error(status: int, body: Any, missing: Optional[str]) -> AdminError:
    message = body.get("error") if isinstance(body, dict) else None
    if not isinstance(message, str) or not message:
        message = body if isinstance(body, str) and body else f"HTTP {status}"
    text = f"airlock admin API: {message} (HTTP {status})"
    if status == 401:
        return Unauthorized(text, status=status, body=body)
    if status == 404:
        if message == _NO_SUCH_ROUTE or (missing is not None and "{id}" not in missing):
            what = missing or "this call"
            return EndpointNotFound(
                f"airlock admin API: this proxy does not offer {what}; it needs an airlock "
                f"with that API (the server said: {message}, HTTP 404)",
                status=status,
                body=body,
            )
        return NotFound(text, status=status, body=body)
    if status == 400 and isinstance(body, dict) and isinstance(body.get("errors"), list):
        errors = body["errors"]
        details = "; ".join(
            f"{e.get('location', '?')}: {e.get('message', '?')}" for e in errors if isinstance(e, dict)
        )
        return InvalidPolicy(f"airlock admin API: invalid: {details} (HTTP 400)", status=status, body=body, errors=errors)
    if status == 412:
        etag = body.get("etag") if isinstance(body, dict) else None
        return PolicyConflict(text, status=status, body=body, etag=etag)
    return AdminError(text, status=status, body=body)


async def _read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[str, str]]:
    status_line = await reader.readline()
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise AdminError(f"airlock admin API: not an HTTP answer: {status_line[:100]!r}", status=0)
    headers: Dict[str, str] = {}
    size = 0
    for _ in range(_HEADER_COUNT):
        line = await reader.readline()
        size += len(line)
        if size > _HEADER_LIMIT:
            break
        if line in (b"\r\n", b"\n", b""):
            return int(parts[1]), headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    raise AdminError("airlock admin API: answer headers too large", status=int(parts[1]))


async def _read_body(reader: asyncio.StreamReader, headers: Dict[str, str]) -> Any:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        data = b"".join([chunk async for chunk in _chunks(reader)])
    elif "content-length" in headers:
        data = await reader.readexactly(min(int(headers["content-length"]), _EVENT_LIMIT))
    else:
        data = await reader.read(_EVENT_LIMIT)
    return _decode(data)


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The chunks of a chunked HTTP/1.1 body."""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise AdminError(f"airlock admin API: bad chunk size {size_line[:40]!r}", status=200) from None
        if size == 0:
            return
        if size > _EVENT_LIMIT:
            raise AdminError("airlock admin API: a chunk larger than 4 MiB", status=200)
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


async def _raw(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A body delimited by the end of the connection."""
    while True:
        data = await reader.read(65536)
        if not data:
            return
        yield data


async def _sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[Dict[str, Any]]:
    """Server-sent events (``data:`` lines up to a blank line), each decoded as JSON."""
    buffer = b""
    data: List[bytes] = []
    async for chunk in chunks:
        buffer += chunk
        if len(buffer) > _EVENT_LIMIT:
            raise AdminError("airlock admin API: an event larger than 4 MiB", status=200)
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            line, buffer = buffer[:newline].rstrip(b"\r"), buffer[newline + 1 :]
            if not line:
                if data:
                    payload = b"\n".join(data)
                    data = []
                    try:
                        event = json.loads(payload)
                    except ValueError:
                        event = {"data": payload.decode("utf-8", "replace")}
                    yield event if isinstance(event, dict) else {"data": event}
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
            # Comments (":...") and other fields (event:, id:, retry:) are not used.
