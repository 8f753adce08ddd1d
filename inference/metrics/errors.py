"""Why a scrape of one engine failed.

Every failure of one engine's scrape is one of these, so the monitor can mark that engine
stale with a readable reason and go on with the others::

    ScrapeError                    base: the engine's numbers from this scrape are unusable
    ├── ScrapeTimeout              a phase (connect, read, write, pool) or the whole scrape
    │                              ran out of time
    ├── ScrapeConnectionError      refused, reset, or broken mid-response
    │   └── ScrapeRefused          nothing accepts connections there: the engine is not running
    ├── ScrapeHttpStatus           the engine answered, but not with 2xx
    ├── ScrapeTooLarge             the body grew past the configured cap; reading stopped there
    └── ScrapeBadFormat            not a vLLM exposition (HTML page, empty body, parse error,
                                   NaN/Inf or out-of-range values, missing required series)
"""

from __future__ import annotations


class ScrapeError(Exception):
    """A scrape of one engine failed; the message says what and where."""


class ScrapeTimeout(ScrapeError):
    """The engine did not answer within the scrape's time budget."""


class ScrapeConnectionError(ScrapeError):
    """The connection was refused, reset or broken before the body was read."""


class ScrapeRefused(ScrapeConnectionError):
    """The connection could not be made at all (refused, unreachable): unlike a slow or
    failing engine, one whose process is gone; the monitor marks it down at once."""


class ScrapeHttpStatus(ScrapeError):
    """The engine answered with a non-success status."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class ScrapeTooLarge(ScrapeError):
    """The body exceeded the size cap; a runaway exporter must not exhaust memory."""


class ScrapeBadFormat(ScrapeError):
    """The body is not an exposition Pacer can read."""
