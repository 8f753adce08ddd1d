"""Token authentication for websockets, so the ``pacer`` CLI can follow a run live.

A client gives its API token as ``Authorization: Token <key>`` or, where it cannot set
headers (a browser's WebSocket), as ``?token=<key>``. A token given wins over the session and
an invalid one leaves the connection anonymous (refused by the consumer): it must never fall
back to a session silently. Without a token the session user (AuthMiddlewareStack) stays.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser
from rest_framework.authtoken.models import Token

TOKEN_KEY_LENGTH = 40  # rest_framework.authtoken keys are 40 hex characters


def token_from_scope(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, key = value.decode("latin1").partition(" ")
            if scheme.lower() == "token":
                return key.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin1"))
    keys = query.get("token")
    return keys[0] if keys else None


@database_sync_to_async
def user_for_token(key: str) -> Any:
    if len(key) != TOKEN_KEY_LENGTH:
        return AnonymousUser()
    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class TokenAuthMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        key = token_from_scope(scope)
        if key is not None:
            scope = {**scope, "user": await user_for_token(key)}
        return await self.inner(scope, receive, send)
