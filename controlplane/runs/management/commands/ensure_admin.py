"""Makes sure an admin user exists, for the quick start and docker compose, which run this at
every start. The password and the API token are printed once, when made (or the token on
request): every start's output stays in a log (`docker compose logs`, var/), and a token
there is a credential anyone reading the log may use."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token

from controlplane.runs.passwords import checked_password


class Command(BaseCommand):
    help = (
        "Create the admin user if missing; its password and API token are printed when made, "
        "the token again with --show-token."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--password",
            default="",
            help="password for a new user; a random one is generated and printed when empty",
        )
        parser.add_argument(
            "--show-token", action="store_true", help="print the API token, made or not"
        )

    def handle(
        self, *args: Any, username: str, password: str, show_token: bool, **options: Any
    ) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = password or secrets.token_urlsafe(12)
            checked_password(password, user_model(username=username))
            user = user_model.objects.create_superuser(username=username, password=password)
            self.stdout.write(f"admin user: {username}  password: {password}")
        else:
            self.stdout.write(f"admin user: {username}  (exists, password unchanged)")
        token, made = Token.objects.get_or_create(user=user)
        if made or show_token:
            self.stdout.write(f"API token: {token.key}")
        else:
            self.stdout.write(
                "API token: made already (python manage.py ensure_admin --show-token prints it)"
            )
