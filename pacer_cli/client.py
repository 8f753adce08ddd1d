"""The REST API over HTTP: one method per request, JSON in and out, errors as ApiError."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

# Creating a run asks every engine whether it serves the model (5 s each at worst).
TIMEOUT_S = 30.0


@dataclass
class ApiError(Exception):
    """The API refused: its status and the body's sentence and field errors."""

    status: int
    detail: str
    errors: dict[str, list[str]] = field(default_factory=dict)
    retry_after_s: int | None = None

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.detail}"


class Unreachable(Exception):
    """The server did not answer at all."""


class Api:
    def __init__(self, base_url: str, token: str, *, transport: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Token {token}", "Accept": "application/json"},
            timeout=TIMEOUT_S,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as failed:
            raise Unreachable(f"{self.base_url}: {type(failed).__name__}: {failed}") from None
        if response.is_success:
            return response.json() if response.content else None
        raise _error(response)

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=clean)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        if body is not None:
            kwargs["json"] = body
        return self.request("POST", path, **kwargs)

    def pages(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every row of a cursor-paginated list, a page at a time."""
        page = self.get(path, **params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    detail = str(body.get("detail") or response.reason_phrase or "error")
    errors = body.get("errors") if isinstance(body.get("errors"), dict) else {}
    retry = body.get("retry_after_s")
    if retry is None and response.headers.get("Retry-After", "").isdigit():
        retry = int(response.headers["Retry-After"])
    return ApiError(response.status_code, detail, errors, retry)
