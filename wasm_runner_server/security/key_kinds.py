"""The kinds of API key a tenant can hold (members, apps, admins): here alone, so that the
command line's parsers name them without loading the tenants' store."""

from typing import Literal

KeyKind = Literal["member", "app", "admin"]
KINDS: tuple[KeyKind, ...] = ("member", "app", "admin")
