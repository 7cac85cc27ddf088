"""Requests waiting for "which service?" (docs/services.md 2.7): a request that named no
service, in a channel without a default, is kept here (``ask:ID``, 15 minutes) while Slack
asks its sender with one button per service. A button's value holds only the id: a request
may be 2,000 characters, far more than a value takes. Only the sender's click takes it."""

from __future__ import annotations

from pydantic import BaseModel

from agents.errors import NotFound
from agents.store._redis import Part

ASK_TTL = 15 * 60.0
"""How long a request waits for its service to be chosen."""


class Ask(BaseModel):
    """A request planned for nobody yet, and what planning it needs once a service is
    chosen."""

    id: str
    user: str
    channel: str
    request: str
    break_glass: str | None = None
    dry_run: bool = False
    services: list[str]
    """The services offered: a click naming another is refused."""


class AskNotYours(NotFound):
    """Someone other than the sender clicked a which-service button: nothing is taken."""


class Asks(Part):
    """Requests waiting for their sender to choose a service."""

    def put(self, ask: Ask, *, ttl: float = ASK_TTL) -> None:
        with self.errors():
            self.r.set(self.keys.ask(ask.id), ask.model_dump_json(), px=int(ttl * 1000))

    def take(self, ask_id: str, *, user: str) -> Ask:
        """The request ``user`` asked, removed so a second click plans nothing more.
        AskNotYours (kept for its sender) when ``user`` did not ask it; NotFound when it
        expired or was already chosen."""
        key = self.keys.ask(ask_id)
        with self.errors():
            raw = self.r.get(key)
        if raw is None:
            raise NotFound(_gone(ask_id))
        ask = Ask.model_validate_json(raw)
        if ask.user != user:
            raise AskNotYours("only the person who asked can choose the service of this "
                              "request; ask for your own with /deploy")
        with self.errors():
            taken = self.r.getdel(key)
        if taken is None:  # the sender's other click took it a moment ago
            raise NotFound(_gone(ask_id))
        return ask


def _gone(ask_id: str) -> str:
    return (f"request {ask_id} is no longer waiting for a service (chosen already, or "
            f"older than {int(ASK_TTL // 60)} minutes): ask again, naming the service")
