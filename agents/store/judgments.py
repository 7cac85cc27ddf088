"""Go/no-go decisions between rollout batches: one field per hold of a run in
``run:ID:judgments`` (``STEP/BATCH`` → the Decision), written once (HSETNX) in the same
EXEC as its audit entry.

A person's decision is checked against the run as stored (it must wait at that hold) and
the policy (``agents.policy.approvals.judgment_problem``) under WATCH, so the answer holds
when it is written; a refusal is audited too. The worker's executor polls ``decided`` and,
past the deadline, ``settle``s the timeout the same way: whichever lands first stands.
The run record itself stays the worker's to write (the executor records the decision it
acted on), so nothing here rewrites it.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis.client import Pipeline

from agents.errors import ApprovalRefused
from agents.policy.approvals import judgment_problem
from agents.policy.rules import Policy
from agents.run.record import Decision, Judgment, Run, Verdict
from agents.said import Said
from agents.store._redis import Part, RedisBase, Write
from agents.store.audit import AuditLog
from agents.store.runs import Runs


class Judgments(Part):
    """Go/no-go decisions of runs (see the module)."""

    def __init__(self, db: RedisBase, *, runs: Runs, audit: AuditLog) -> None:
        super().__init__(db)
        self.runs, self.audit = runs, audit

    def decide(self, run_id: str, verdict: Verdict, *, user: str, via: str, policy: Policy,
               user_groups: Iterable[str] = (), hold: str | None = None
               ) -> tuple[Run, Judgment]:
        """``user`` decides the go/no-go ``run_id`` waits at (``hold``: only if it is that
        one — a button names its own). ApprovalRefused, audited, says why not."""
        groups = list(user_groups)
        run = self.runs.get(run_id)
        held = run.awaiting
        problem = self._stale(run, held, hold) or judgment_problem(
            run, user=user, user_groups=groups, policy=policy, verdict=verdict)
        if problem is None and held is not None:
            problem = self._write(run, held, Decision(verdict=verdict, actor=user, via=via,
                                                      at=self.clock()))
        if problem is not None or held is None:
            rule = problem or "nothing waits for a go/no-go"
            self.audit.refused("judge", action="judgment_refused", actor=user,
                               face=via, rule=rule, run_id=run_id,
                               plan_id=run.plan_id, decision=verdict.value, via=via,
                               hold=hold or (held.hold if held else None))
            raise ApprovalRefused(rule)
        return run, held

    def decided(self, run_id: str, hold: str) -> Decision | None:
        with self.errors():
            raw = self.r.hget(self.keys.judgments(run_id), hold)
        return Decision.model_validate_json(raw) if raw else None

    def settle(self, run_id: str, hold: str, decision: Decision, *, plan_id: str) -> Decision:
        """Record ``decision`` (the timeout's) unless one was made: the decision that stands."""
        key = self.keys.judgments(run_id)

        def attempt(pipe: Pipeline) -> Decision:
            raw = pipe.hget(key, hold)
            if raw:
                return Decision.model_validate_json(raw)
            self.db.queue_writes(pipe, [
                lambda p: p.hset(key, hold, decision.model_dump_json()),
                self._audit(run_id, plan_id, hold, decision)])
            pipe.execute()
            return decision

        return self.cas([key], attempt, busy=f"the go/no-go of run {run_id}")

    def for_run(self, run: Run) -> RunJudge:
        """The executor's view of one run's decisions (``agents.run.judgment.Judge``)."""
        return RunJudge(self, run.id, run.plan_id)

    def _stale(self, run: Run, held: Judgment | None, hold: str | None) -> str | None:
        if held is None:
            done = next((j for j in reversed(run.judgments) if j.hold == hold), None)
            if done is not None and done.decision is not None:
                return Said("this go/no-go was already decided: ", done.decision.describe())
            return (f"run {run.id} is not waiting for a go/no-go (it is "
                    f"{run.status.value.replace('_', ' ')})")
        if hold is not None and hold != held.hold:
            return (f"this button is for an earlier go/no-go; run {run.id} now waits "
                    f"{held.where()}")
        return None

    def _write(self, run: Run, held: Judgment, decision: Decision) -> str | None:
        """Write a person's decision (once, while the run still waits there); why not."""
        key, run_key = self.keys.judgments(run.id), self.keys.run(run.id)

        def attempt(pipe: Pipeline) -> str | None:
            raw = pipe.hget(key, held.hold)
            if raw:
                return ("this go/no-go was already decided: "
                        + Decision.model_validate_json(raw).describe())
            stored = pipe.get(run_key)
            if stored is None or Run.model_validate_json(stored).awaiting is None:
                return f"run {run.id} is no longer waiting for a go/no-go"
            self.db.queue_writes(pipe, [
                lambda p: p.hset(key, held.hold, decision.model_dump_json()),
                self._audit(run.id, run.plan_id, held.hold, decision)])
            pipe.execute()
            return None

        return self.cas([key, run_key], attempt, busy=f"the go/no-go of run {run.id}")

    def _audit(self, run_id: str, plan_id: str, hold: str, decision: Decision) -> Write:
        step, _, batch = hold.rpartition("/")
        return self.audit.write("judged", actor=decision.actor, run_id=run_id, plan_id=plan_id,
                                decision=decision.verdict.value, step=step, batch=int(batch),
                                via=decision.via, reason=decision.reason)


class RunJudge:
    """One run's decisions, as the executor polls them (``agents.run.judgment.Judge``)."""

    def __init__(self, judgments: Judgments, run_id: str, plan_id: str) -> None:
        self.judgments, self.run_id, self.plan_id = judgments, run_id, plan_id

    def decided(self, hold: str) -> Decision | None:
        return self.judgments.decided(self.run_id, hold)

    def settle(self, hold: str, decision: Decision) -> Decision:
        return self.judgments.settle(self.run_id, hold, decision, plan_id=self.plan_id)
