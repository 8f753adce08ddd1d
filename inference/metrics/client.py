"""Fetches one engine's ``/metrics`` text and ``/v1/models`` length over HTTP.

The HTTP client is injected (``inference.engine_http.engine_http_client`` in production,
whose idle connections close before the engine's, one over ``httpx.MockTransport`` in tests)
and owned once entered: ``async with MetricsClient(http)``
opens it and closes it on exit. Every failure leaves as one ``ScrapeError`` subclass (see
``inference.metrics.errors``), so callers handle one exception type per engine. Bodies are
streamed and abandoned past a size cap, because a broken exporter that writes without end must
cost one engine's scrape, not the worker's memory.

    http = engine_http_client(max_connections=len(engines))
    async with MetricsClient(http, ScrapeConfig(read_s=1.0)) as client:
        text = await client.metrics_text("http://engine-0:8000")
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum
from types import TracebackType

import httpx

from inference.metrics.errors import (
    ScrapeBadFormat,
    ScrapeConnectionError,
    ScrapeHttpStatus,
    ScrapeRefused,
    ScrapeTimeout,
    ScrapeTooLarge,
)
from inference.metrics.parse import parse_max_model_len

# Ask for the classic text format: prometheus_client answers OpenMetrics only when asked.
_ACCEPT = "text/plain;version=0.0.4"


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """Time and size limits of one scrape; each phase fails on its own, the total caps all."""

    # An engine on the cluster network accepts in milliseconds; a second means it is not there.
    connect_s: float = 1.0
    # vLLM renders /metrics in milliseconds, but its API server's event loop lags under load.
    read_s: float = 2.0
    # A GET request is a few hundred bytes; any wait to send it is a dead socket.
    write_s: float = 1.0
    # Waiting for a free pooled connection; one connection per engine suffices.
    pool_s: float = 1.0
    # The whole request including a slow drip of bytes; below the 5 s poll period.
    total_s: float = 3.0
    # A real exposition is about 54 KB (vLLM 0.32.0, one engine): 75x headroom for DP ranks.
    max_body_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("connect_s", "read_s", "write_s", "pool_s", "total_s"):
            value = getattr(self, name)
            if not 0 < value <= 600:
                raise ValueError(f"{name} must be within (0, 600] seconds, got {value}")
        if not 1024 <= self.max_body_bytes <= 1 << 30:
            raise ValueError(
                f"max_body_bytes must be within 1 KiB..1 GiB, got {self.max_body_bytes}"
            )

    @property
    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.connect_s, read=self.read_s, write=self.write_s, pool=self.pool_s
        )


class ClientState(Enum):
    UNOPENED = "unopened"  # built; enter it before scraping
    OPENED = "opened"  # inside ``async with``: scrapes allowed
    CLOSED = "closed"  # exited; the HTTP client is closed and cannot be reopened


class MetricsClient:
    def __init__(self, http: httpx.AsyncClient, config: ScrapeConfig | None = None) -> None:
        self._http = http
        self._config = config or ScrapeConfig()
        self._state = ClientState.UNOPENED

    async def __aenter__(self) -> MetricsClient:
        if self._state is not ClientState.UNOPENED:
            raise RuntimeError(f"MetricsClient is {self._state.value}; it can be entered once")
        await self._http.__aenter__()
        self._state = ClientState.OPENED
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._state = ClientState.CLOSED
        await self._http.__aexit__(exc_type, exc, traceback)

    async def metrics_text(self, base_url: str) -> str:
        """The engine's exposition text; ScrapeError on any failure."""
        body = await self._get(f"{base_url.rstrip('/')}/metrics")
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScrapeBadFormat(f"{base_url}/metrics is not UTF-8 text: {exc}") from exc

    async def max_model_len(self, base_url: str) -> int:
        """The smallest ``max_model_len`` the engine's ``/v1/models`` lists."""
        return parse_max_model_len(await self._get(f"{base_url.rstrip('/')}/v1/models"))

    async def _get(self, url: str) -> bytes:
        if self._state is not ClientState.OPENED:
            raise RuntimeError(f"MetricsClient is {self._state.value}; scrape inside `async with`")
        try:
            async with asyncio.timeout(self._config.total_s):
                try:
                    return await self._read_capped(url)
                except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
                    # The connection broke before an answer: one kept alive across the
                    # engine's death, or cut as it died. Asked once more on a fresh one, a
                    # dead engine refuses (down at once) and a live one answers.
                    return await self._read_capped(url)
        except TimeoutError as exc:
            raise ScrapeTimeout(
                f"{url}: no complete answer within {self._config.total_s} s"
            ) from exc
        except httpx.TimeoutException as exc:
            phase = type(exc).__name__.removesuffix("Timeout").lower()
            raise ScrapeTimeout(f"{url}: {phase} timed out") from exc
        except httpx.DecodingError as exc:
            raise ScrapeBadFormat(f"{url}: body cannot be decoded: {exc}") from exc
        except httpx.ConnectError as exc:
            raise ScrapeRefused(f"{url}: {type(exc).__name__}: {exc}") from exc
        except (httpx.TransportError, httpx.InvalidURL) as exc:
            raise ScrapeConnectionError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def _read_capped(self, url: str) -> bytes:
        cap = self._config.max_body_bytes
        async with self._http.stream(
            "GET", url, headers={"Accept": _ACCEPT}, timeout=self._config.timeout
        ) as response:
            if not response.is_success:
                raise ScrapeHttpStatus(
                    f"{url}: HTTP {response.status_code} {response.reason_phrase}",
                    response.status_code,
                )
            declared = response.headers.get("content-length", "")
            if declared.isascii() and declared.isdigit() and int(declared) > cap:
                raise ScrapeTooLarge(f"{url}: body of {declared} bytes exceeds the {cap} byte cap")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    raise ScrapeTooLarge(f"{url}: body exceeds the {cap} byte cap")
                chunks.append(chunk)
            return b"".join(chunks)
