"""Plans deckhand validated for a requester who has not yet asked to run them (``deckhand
mcp``'s ``plan``): remembered by hash for a while, so a later request can only name a plan
deckhand itself produced — never one a client wrote or changed."""

from __future__ import annotations

from pydantic import BaseModel
from redis.client import Pipeline

from agents.errors import NotFound, ProposalTampered
from agents.plan.model import Plan
from agents.store._redis import Part


class Proposal(BaseModel):
    """A validated plan, and the run it was requested as (None until requested)."""

    plan: Plan
    run_id: str | None = None


class Proposals(Part):
    """Plans proposed over MCP, bound to their hash and requester until taken."""

    def put(self, plan: Plan, *, ttl: float, owner: str | None = None) -> None:
        """Remember ``plan`` for ``owner`` (default ``plan.requested_by``; MCP passes its
        connection) under its hash for ``ttl`` seconds."""
        key = self.keys.proposal(plan.hash, owner or plan.requested_by)
        with self.errors():
            self.r.set(key, Proposal(plan=plan).model_dump_json(), px=int(ttl * 1000))

    def get(self, plan_hash: str, requester: str) -> Proposal:
        """The plan ``requester`` was given with this hash; NotFound if none (or expired)."""
        with self.errors():
            raw = self.r.get(self.keys.proposal(plan_hash, requester))
        if raw is None:
            raise NotFound(_missing(plan_hash, requester))
        return _verified(raw, plan_hash)

    def take(self, plan_hash: str, requester: str, *, run_id: str) -> Proposal:
        """Bind the remembered plan to ``run_id`` once; the proposal as it was before.

        A proposal whose ``run_id`` is already set was requested earlier: it is returned
        unchanged, so a retried request finds the first run instead of making a second.
        NotFound if ``requester`` has no such plan (never made, changed, or expired).
        """
        key = self.keys.proposal(plan_hash, requester)

        def attempt(pipe: Pipeline) -> Proposal:
            raw = pipe.get(key)
            if raw is None:
                raise NotFound(_missing(plan_hash, requester))
            before = _verified(raw, plan_hash)
            if before.run_id is None:
                pipe.multi()
                pipe.set(key, before.model_copy(update={"run_id": run_id}).model_dump_json(),
                         keepttl=True)
                pipe.execute()
            return before

        return self.cas([key], attempt, busy=f"plan {plan_hash[:12]}")

    def rebind(self, plan_hash: str, requester: str, *, old: str, new: str) -> None:
        """Point a proposal bound to run ``old`` at ``new`` (the store gave the run another
        id); a proposal bound elsewhere, or gone, is left alone."""
        key = self.keys.proposal(plan_hash, requester)

        def attempt(pipe: Pipeline) -> None:
            raw = pipe.get(key)
            record = Proposal.model_validate_json(raw) if raw is not None else None
            if record is None or record.run_id != old:
                return
            pipe.multi()
            pipe.set(key, record.model_copy(update={"run_id": new}).model_dump_json(),
                     keepttl=True)
            pipe.execute()

        self.cas([key], attempt, busy=f"plan {plan_hash[:12]}")


def _verified(raw: bytes | str, plan_hash: str) -> Proposal:
    """The stored proposal, only if its plan still has the hash it is stored under: a plan
    edited in Redis after deckhand validated it never becomes a run under the old hash."""
    proposal = Proposal.model_validate_json(raw)
    if proposal.plan.hash != plan_hash:
        raise ProposalTampered(f"the plan stored for hash {plan_hash[:12]}… no longer has that "
                               f"hash (it was changed in the store after it was validated); "
                               f"refused — call `plan` again")
    return proposal


def _missing(plan_hash: str, requester: str) -> str:
    who, _, connection = requester.partition("@")  # never show the connection's token
    text = (f"no plan with hash {plan_hash[:12]}… was made for {who} on this connection "
            f"recently (unknown, changed or expired)")
    if not connection:
        return text + "; call `plan` and request the hash it returns"
    # stdio: a client that opens a new connection per call (the MCP Inspector's CLI mode)
    # has just called `plan`, on another connection
    return (text + ". A plan is bound to the connection that made it: call `plan` and "
            "`request_deploy` on one connection, or use `deckhand mcp --http`, where a plan "
            "is bound to the token's user")
