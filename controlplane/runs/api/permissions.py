"""The API's permission rule: signed in to read, an operator to write (see ``roles``)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from controlplane.runs.roles import is_operator


class OperatorOrReadOnly(BasePermission):
    """Unauthenticated: refused (401, as the token scheme is offered); a viewer writing: 403."""

    message = "this needs the operator role; your account is a viewer"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False
        return request.method in SAFE_METHODS or is_operator(user)
