"""Plan versions: immutable once written, ``latest`` pointing at the newest."""

from __future__ import annotations

from redis.client import Pipeline

from agents.errors import NotFound, StoreError
from agents.plan.model import Plan
from agents.store._redis import RedisBase


class PlanStore(RedisBase):
    def save_plan(self, plan: Plan) -> Plan:
        """Store a plan version; versions are immutable, so saving one twice is refused.

        A new plan (version 1) whose id another plan already has gets a fresh id, set on
        ``plan`` in place: the other plan is never touched. ``latest`` moves in the same
        MULTI as the version is written, and only forward.
        """
        if plan.version == 1:
            plan.id = self.create_unique(
                "plan", plan.id, self._plan_keys,
                lambda pipe, plan_id: self._write_first(pipe, plan, plan_id))
            return plan
        keys = [self.keys.plan_latest(plan.id), self.keys.plan(plan.id, plan.version)]
        self.cas(keys, lambda pipe: self._write_next(pipe, plan), busy=f"plan {plan.id}")
        return plan

    def _plan_keys(self, plan_id: str) -> list[str]:
        return [self.keys.plan_latest(plan_id), self.keys.plan(plan_id, 1)]

    def _write_first(self, pipe: Pipeline, plan: Plan, plan_id: str) -> bool:
        stored = pipe.get(self.keys.plan(plan_id, 1))
        if stored is not None and Plan.model_validate_json(stored) == plan:
            raise StoreError(f"plan {plan.id} version 1 already exists")
        if stored is not None or pipe.exists(self.keys.plan_latest(plan_id)):
            return False  # the id belongs to another plan
        data = plan.model_copy(update={"id": plan_id}).model_dump_json()
        pipe.multi()
        pipe.set(self.keys.plan(plan_id, 1), data)
        pipe.set(self.keys.plan_latest(plan_id), 1)
        pipe.execute()
        return True

    def _write_next(self, pipe: Pipeline, plan: Plan) -> None:
        key = self.keys.plan(plan.id, plan.version)
        latest = pipe.get(self.keys.plan_latest(plan.id))
        if pipe.exists(key):
            raise StoreError(f"plan {plan.id} version {plan.version} already exists")
        pipe.multi()
        pipe.set(key, plan.model_dump_json())
        if latest is None or int(latest) < plan.version:
            pipe.set(self.keys.plan_latest(plan.id), plan.version)
        pipe.execute()

    def plan(self, plan_id: str, version: int | None = None) -> Plan:
        with self.errors():
            if version is None:
                latest = self.r.get(self.keys.plan_latest(plan_id))
                if latest is None:
                    raise NotFound(f"no plan {plan_id}")
                version = int(latest)
            raw = self.r.get(self.keys.plan(plan_id, version))
        if raw is None:
            raise NotFound(f"no plan {plan_id} version {version}")
        return Plan.model_validate_json(raw)

    def plans_at(self, refs: list[tuple[str, int]]) -> list[Plan | None]:
        """The plan at each (id, version), in one round trip; None where there is none."""
        if not refs:
            return []
        with self.errors():
            raws = self.r.mget([self.keys.plan(plan_id, version) for plan_id, version in refs])
        return [Plan.model_validate_json(raw) if raw else None for raw in raws]

    def plan_versions(self, plan_id: str) -> list[Plan]:
        latest = self.plan(plan_id).version
        return [self.plan(plan_id, v) for v in range(1, latest + 1)]
