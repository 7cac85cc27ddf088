"""Plans deckhand validated for a requester who has not yet asked to run them (``deckhand
mcp``'s ``plan``): remembered by hash for a while, so a later request can only name a plan
deckhand itself produced — never one a client wrote or changed."""

from __future__ import annotations

from pydantic import BaseModel
from redis.client import Pipeline

from agents.errors import NotFound
from agents.plan.model import Plan
from agents.store._redis import RedisBase


class Proposal(BaseModel):
    """A validated plan, and the run it was requested as (None until requested)."""

    plan: Plan
    run_id: str | None = None


class ProposalStore(RedisBase):
    def propose(self, plan: Plan, *, ttl: float) -> None:
        """Remember ``plan`` for ``plan.requested_by`` under its hash for ``ttl`` seconds."""
        key = self.keys.proposal(plan.hash, plan.requested_by)
        with self.errors():
            self.r.set(key, Proposal(plan=plan).model_dump_json(), px=int(ttl * 1000))

    def proposal(self, plan_hash: str, requester: str) -> Proposal:
        """The plan ``requester`` was given with this hash; NotFound if none (or expired)."""
        with self.errors():
            raw = self.r.get(self.keys.proposal(plan_hash, requester))
        if raw is None:
            raise NotFound(_missing(plan_hash, requester))
        return Proposal.model_validate_json(raw)

    def take_proposal(self, plan_hash: str, requester: str, *, run_id: str) -> Proposal:
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
            before = Proposal.model_validate_json(raw)
            if before.run_id is None:
                pipe.multi()
                pipe.set(key, before.model_copy(update={"run_id": run_id}).model_dump_json(),
                         keepttl=True)
                pipe.execute()
            return before

        return self.cas([key], attempt, busy=f"plan {plan_hash[:12]}")

    def rebind_proposal(self, plan_hash: str, requester: str, *, old: str, new: str) -> None:
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


def _missing(plan_hash: str, requester: str) -> str:
    return (f"no plan with hash {plan_hash[:12]}… was made for {requester} recently (unknown, "
            f"changed or expired); call `plan` and request the hash it returns")
