"""Plan versions: immutable once written, ``latest`` pointing at the newest."""

from __future__ import annotations

from agents.errors import NotFound, StoreError
from agents.plan import Plan
from agents.store._redis import RedisBase


class PlanStore(RedisBase):
    def save_plan(self, plan: Plan) -> None:
        """Store a plan version. Versions are immutable: saving one twice is refused."""
        with self.errors():
            pipe = self.r.pipeline()
            pipe.set(self.keys.plan(plan.id, plan.version), plan.model_dump_json(), nx=True)
            pipe.set(self.keys.plan_latest(plan.id), plan.version)
            created, _ = pipe.execute()
        if not created:
            raise StoreError(f"plan {plan.id} version {plan.version} already exists")

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

    def plan_versions(self, plan_id: str) -> list[Plan]:
        latest = self.plan(plan_id).version
        return [self.plan(plan_id, v) for v in range(1, latest + 1)]
