"""Makes sure an admin user exists and prints its API token, for the quick start."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token

from controlplane.runs.passwords import checked_password


class Command(BaseCommand):
    help = "Create the admin user if missing (password printed once) and print its API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--password",
            default="",
            help="password for a new user; a random one is generated and printed when empty",
        )

    def handle(self, *args: Any, username: str, password: str, **options: Any) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = password or secrets.token_urlsafe(12)
            checked_password(password, user_model(username=username))
            user = user_model.objects.create_superuser(username=username, password=password)
            self.stdout.write(f"admin user: {username}  password: {password}")
        else:
            self.stdout.write(f"admin user: {username}  (exists, password unchanged)")
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"API token: {token.key}")
