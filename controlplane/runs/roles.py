"""Who may do what: two roles, kept as Django groups so the admin can grant them.

``viewer`` reads everything; ``operator`` also creates runs, commands them (stop, pause, resume,
override), acknowledges steps and registers engines. A superuser is an operator. A user in no
group reads as a viewer does: signing in is the line between the team and everyone else, and
writing is the line between those who steer runs and those who watch them.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group

OPERATOR = "operator"
VIEWER = "viewer"
ROLES = (OPERATOR, VIEWER)


def is_operator(user: AbstractBaseUser | AnonymousUser | None) -> bool:
    if user is None or not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return user.groups.filter(name=OPERATOR).exists()  # type: ignore[attr-defined]


def role_of(user: AbstractBaseUser | AnonymousUser | None) -> str | None:
    """The role a user acts with; None when not signed in."""
    if user is None or not user.is_authenticated:
        return None
    return OPERATOR if is_operator(user) else VIEWER


def grant(user: AbstractBaseUser, role: str) -> None:
    """Make ``user`` hold exactly ``role`` among Pacer's roles (other groups are kept)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    groups = user.groups  # type: ignore[attr-defined]
    groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name=role))
    groups.add(Group.objects.get_or_create(name=role)[0])
