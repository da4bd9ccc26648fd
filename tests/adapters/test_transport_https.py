"""The shared transport over https (aiohttp): the same interface, one read limit per
request, a refused connection unavailable; a self-signed certificate made per module."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl

import aiohttp
import pytest

from adapters.errors import FailureKind, GatewayError
from adapters.transport import Transport
from tests.adapters.loopback import CHUNKED, OK, chunk, forever, read_request

# ---- https: aiohttp, one read limit per request ---------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and its key."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


@pytest.fixture
def tls_server(tls_files, monkeypatch):
    """serve() over TLS, with aiohttp trusting its certificate (its verified default context)."""
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    monkeypatch.setattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", ssl.create_default_context(cafile=str(cert)))

    @contextlib.asynccontextmanager
    async def run(handle):
        tasks: list[asyncio.Task] = []

        async def on_connect(reader, writer):
            tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                await handle(reader, writer, len(tasks) - 1)
            writer.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=server_ctx)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    return run


async def test_https_goes_through_aiohttp_with_the_same_interface(tls_server):
    seen = []

    async def handle(reader, writer, n):
        while True:
            head, body = await read_request(reader)
            seen.append((head, body))
            if head.startswith(b"GET"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhealth")
            else:
                writer.write(CHUNKED + chunk(b"a") + chunk(b"b") + b"0\r\n\r\n")
            await writer.drain()

    async with tls_server(handle) as port:
        t = Transport("b", f"https://127.0.0.1:{port}/root")
        resp = await t.open("/v1/x", b'{"q":1}', {"X-Request-Id": "r1"}, stream=True)
        assert resp.status == 200
        assert b"".join([c async for c in resp.iter_chunks()]) == b"ab"
        resp.release()
        resp = await t.open("/v1/x", b"{}", {}, stream=False)
        assert await t.read(resp) == b"ab"
        resp.close()
        assert await t.get("/health") == (200, b"health")
        await t.aclose()
    head, body = seen[0]
    assert head.startswith(b"POST /root/v1/x HTTP/1.1\r\n") and b"\r\nX-Request-Id: r1\r\n" in head
    assert body == b'{"q":1}'


@pytest.mark.parametrize(
    ("stream", "limits", "times_out"),
    [
        # a stream: the larger of its first-byte and idle limits
        (True, {"first_byte_timeout_s": 0.2, "stream_idle_timeout_s": 5.0, "timeout_s": 0.1}, False),
        (True, {"first_byte_timeout_s": 5.0, "stream_idle_timeout_s": 0.2, "timeout_s": 0.1}, False),
        (True, {"first_byte_timeout_s": 0.2, "stream_idle_timeout_s": 0.2, "timeout_s": 5.0}, True),
        # a whole answer: timeout_s
        (False, {"first_byte_timeout_s": 5.0, "stream_idle_timeout_s": 5.0, "timeout_s": 0.2}, True),
        (False, {"first_byte_timeout_s": 0.1, "stream_idle_timeout_s": 0.1, "timeout_s": 5.0}, False),
    ],
)
async def test_https_has_one_read_limit(tls_server, stream, limits, times_out, caplog):
    async def handle(reader, writer, n):
        await read_request(reader)
        await asyncio.sleep(0.5)
        writer.write(OK)
        await writer.drain()
        await forever()

    async with tls_server(handle) as port:
        t = Transport("b", f"https://127.0.0.1:{port}", **limits)
        if times_out:
            with pytest.raises(GatewayError) as info:
                await t.open("/", b"x", {}, stream=stream)
            assert (info.value.status, info.value.code, info.value.failure) == (
                504,
                "upstream_timeout",
                FailureKind.TIMEOUT,
            )
            assert str(info.value).endswith("did not start answering within 0.2 s.")
            # the log has aiohttp's words for it
            (line,) = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
            assert line.startswith("backend b timed out: ") and "read" in line.lower()
        else:
            resp = await t.open("/", b"x", {}, stream=stream)
            assert await t.read(resp) == b"ok"
            resp.release()
        await t.aclose()


async def test_https_refused_is_unavailable(tls_server):
    async with tls_server(forever) as port:
        pass
    t = Transport("b", f"https://127.0.0.1:{port}")
    with pytest.raises(GatewayError) as info:
        await t.open("/", b"x", {}, stream=True)
    assert (info.value.status, info.value.code, info.value.failure) == (503, "backend_unavailable", FailureKind.CONNECT)
    await t.aclose()


async def test_https_full_pool_is_busy_as_on_http(tls_server, caplog):
    # The same event as tests/adapters/test_transport.py's http full pool, the same answer:
    # 503 backend_busy, an overload, Retry-After, after pool_wait_s; the slot comes back on close.
    async def handle(reader, writer, n):
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.write(b"ok")
            await writer.drain()

    async with tls_server(handle) as port:
        t = Transport("b", f"https://127.0.0.1:{port}", max_connections=1, pool_wait_s=0.1)
        held = await t.open("/", b"x", {}, stream=True)
        with pytest.raises(GatewayError) as info:
            await t.open("/", b"x", {}, stream=True)
        err = info.value
        assert (err.status, err.code, err.failure, err.retry_after) == (503, "backend_busy", FailureKind.OVERLOAD, 1.0)
        assert "(waited 0.1 s)" in str(err)
        assert f"backend b busy: all 1 connections to 127.0.0.1:{port} stayed in use for 0.1 s" in caplog.text
        held.close()
        held.close()  # a second close frees nothing more
        resp = await t.open("/", b"x", {}, stream=False)
        assert await t.read(resp) == b"ok"
        resp.release()
        again = await t.open("/", b"x", {}, stream=False)
        with pytest.raises(GatewayError, match="no free connection"):
            await t.open("/", b"x", {}, stream=False)  # one slot: a double free would let it in
        again.close()
        await t.aclose()
