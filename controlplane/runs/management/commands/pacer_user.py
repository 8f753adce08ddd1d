"""Create (or update) a user with a Pacer role and print their API token."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token

from controlplane.runs.passwords import checked_password
from controlplane.runs.roles import ROLES, grant


class Command(BaseCommand):
    help = (
        "Create a user with the viewer or operator role (or change an existing user's role) "
        "and print their API token."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument(
            "--password",
            default=None,
            help="a password for the dashboard; without it the user signs in by token only",
        )

    def handle(
        self, *args: Any, username: str, role: str, password: str | None, **options: Any
    ) -> None:
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=username)
            if password is not None:
                checked_password(password, user)  # refused: the transaction takes the user back
                user.set_password(password)
            elif created:
                user.set_unusable_password()
            user.save()
            grant(user, role)
            token, _ = Token.objects.get_or_create(user=user)
        verb = "created" if created else "updated"
        self.stdout.write(f"user {username} {verb}, role {role}")
        self.stdout.write(f"API token: {token.key}")
