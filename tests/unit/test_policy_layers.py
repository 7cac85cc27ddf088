"""Services, policy layers (docs/services.md 1.4): a service may tighten the organisation's
policy, never loosen it — table 1.4 field by field, each both ways; owners (written, or from
a Backstage catalog through ``owners_map``) as one more layer; ``OrgIndex``."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.config import load_config
from agents.org import Org, OrgIndex, load_org, policy_notes, share_layers
from agents.policy.diff import policy_diff
from agents.policy.eligibility import eligibility, of_scopes
from agents.policy.freeze import frozen
from agents.policy.rules import UNSCOPED, Policy
from tools.errors import ConfigError

SERVICE = """
tools:
  ship: {{description: ship, command: "echo {{version}}", target: environment,
          params: {{version: {{pattern: '^v\\d+$'}}}}}}
inventory:
  hosts: {{{svc}-1: {{connection: local}}, {svc}-2: {{connection: local}}, {svc}-3: {{connection: local}}}}
  environments:
    staging: {{hosts: [{svc}-1]}}
    production: {{hosts: [{svc}-2, {svc}-3]}}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def service(svc: str, extra: str = "") -> str:
    return textwrap.dedent(SERVICE.format(svc=svc)) + extra


def org_of(tmp_path: Path, org_policy: str, api_policy: str = "", *, main_extra: str = "",
           api_extra: str = "") -> Org:
    """Two services, api (with ``api_policy`` as its ``policy:``) and web (none), under
    ``org_policy`` as the main config's ``policy:``."""
    api = service("api", api_extra) + (f"policy: {api_policy}\n" if api_policy else "")
    write(tmp_path / "services" / "api.yml", api)
    write(tmp_path / "services" / "web.yml", service("web"))
    main = "services: {api: services/api.yml, web: services/web.yml}\n" + main_extra
    main += f"policy: {org_policy}\n" if org_policy else ""
    return load_org(write(tmp_path / "deckhand.yml", main))


def prod(policy: Policy) -> object:
    return policy.strictest(["production"])


def problems(tmp_path: Path, org_policy: str, api_policy: str = "", **kw: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        org_of(tmp_path, org_policy, api_policy, **kw)
    return [str(p).removeprefix(f"{tmp_path}/") for p in caught.value.problems]


P = "{environments: {production: {approvers: {anyone: true}, %s}}}"
"""A policy whose production rule sets one more field."""


@pytest.mark.parametrize(("field", "strict", "loose", "value"), [
    ("min_approvals", "min_approvals: 3", "min_approvals: 1", 3),
    ("self_approval", "self_approval: false", "self_approval: true", False),
    ("unattended", "unattended: false", "unattended: true", False),
    ("confirm", "confirm: true", "confirm: false", True),
    ("approval_ttl", "approval_ttl: 60", "approval_ttl: 7200", 60.0),
    ("lock", "lock: refuse", "lock: wait", "refuse"),
])
def test_each_rule_field_takes_the_strictest_layer_either_way(
        tmp_path: Path, field: str, strict: str, loose: str, value: object) -> None:
    loosened = org_of(tmp_path / "a", P % strict, P % loose).services["api"].policy
    assert getattr(prod(loosened), field) == value  # the service cannot loosen it
    tightened = org_of(tmp_path / "b", P % loose, P % strict).services["api"].policy
    assert getattr(prod(tightened), field) == value  # and may tighten it
    written = org_of(tmp_path / "c", P % loose, P % loose).services["api"].policy
    assert getattr(prod(written), field) != value  # neither strict: the loose value


def test_what_the_organisation_leaves_unset_does_not_tighten(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{environments: {production: {approvers: {users: [U1, U2]}}}}",
                 P % "unattended: true, lock: wait, approval_ttl: 7200")
    rule = prod(org.services["api"].policy)
    assert (rule.unattended, rule.lock, rule.approval_ttl) == (True, "wait", 7200.0)


def test_approvers_every_layer_must_allow(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{environments: {production: {approvers: {users: [U1, U2]}}}}",
                 "{environments: {production: {approvers: {users: [U2, U3]}}}}")
    api, web = org.services["api"].policy, org.services["web"].policy
    assert [u for u in ("U1", "U2", "U3") if api.may_approve(u, [], ["production"])] == ["U2"]
    assert [u for u in ("U1", "U2", "U3") if web.may_approve(u, [], ["production"])] == \
        ["U1", "U2"]  # web writes no policy: the organisation's alone
    anyone = org_of(tmp_path / "b", "{environments: {production: {approvers: {users: [U1]}}}}",
                    "{environments: {production: {approvers: {anyone: true}}}}")
    assert not anyone.services["api"].policy.may_approve("U9", [], ["production"])
    answer = eligibility(of_scopes(["production"]), anyone.services["api"].policy)
    assert [line.source for line in answer.lines] == [
        "services/api.yml:9 policy.environments.production",
        "organisation: deckhand.yml:2 policy.environments.production"]


def test_default_and_unscoped_both_layers_apply(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{default: {approvers: {users: [U1]}}, "
                           "unscoped: {approvers: {users: [U1, U2]}, min_approvals: 2}}",
                 "{default: {approvers: {anyone: true}}, unscoped: {approvers: {anyone: true}}}")
    api = org.services["api"].policy
    assert not api.may_approve("U9", [], ["staging"]) and api.may_approve("U1", [], ["staging"])
    assert not api.may_approve("U9", [], ["qa"])  # a scope it does not list: still the org's
    assert not api.may_approve("U9", [], [UNSCOPED])
    assert api.strictest([UNSCOPED]).min_approvals == 2


@pytest.mark.parametrize(("field", "org_value", "api_value", "expected"), [
    ("max_replans", 0, 3, 0),
    ("require_rollback", "true", "false", True),
    ("on_failure", "cancel", "finish", "cancel"),
    ("pause_timeout", 60, 1800, 60.0),
])
def test_policy_wide_fields_take_the_strictest(tmp_path: Path, field: str, org_value: object,
                                               api_value: object, expected: object) -> None:
    loosened = org_of(tmp_path / "a", f"{{{field}: {org_value}}}", f"{{{field}: {api_value}}}")
    assert getattr(loosened.services["api"].policy, field) == expected
    tightened = org_of(tmp_path / "b", f"{{{field}: {api_value}}}", f"{{{field}: {org_value}}}")
    assert getattr(tightened.services["api"].policy, field) == expected


def test_promotion_keeps_the_organisations_order(tmp_path: Path) -> None:
    org = "{promotion: [staging, production]}"
    assert problems(tmp_path / "a", org, "{promotion: [production, staging]}") == [
        "services/api.yml:9 policy.promotion: production -> staging does not keep the "
        "organisation's order staging -> production (deckhand.yml:2 policy.promotion): a "
        "service may add stages, never skip or reorder one"]
    ok = org_of(tmp_path / "b", org, "{promotion: [staging, canary, production]}",
                api_extra="    canary: {hosts: [api-3]}\n")  # a stage of its own: fine
    assert ok.services["api"].policy.promotion == ["staging", "canary", "production"]
    unset = org_of(tmp_path / "c", "{promotion: [staging, canary, production]}",
                   "{require_rollback: true}", api_extra="    canary: {hosts: [api-3]}\n")
    assert unset.services["api"].policy.promotion == ["staging", "canary", "production"]
    assert unset.services["web"].policy.promotion == ["staging", "production"]  # no canary


def freezes(*windows: tuple[str, str, str]) -> str:
    """A policy of freeze windows (environment, reason, ``services`` or "") in 2030."""
    return "{freeze: [" + ", ".join(
        f'{{environments: [{env}], reason: {why}, start: "2030-01-01T00:00:00", '
        f'end: "2030-01-02T00:00:00"{f", services: [{svc}]" if svc else ""}}}'
        for env, why, svc in windows) + "]}"


def reason(policy: Policy, environment: str) -> str | None:
    found = frozen(policy.freeze, [environment], datetime(2030, 1, 1, 12, tzinfo=UTC))
    return found.reason if found else None


def test_freezes_are_a_union_and_may_name_services(tmp_path: Path) -> None:
    org = org_of(tmp_path, freezes(("production", "web launch", "web"),
                                   ("staging", "org audit", "")),
                 freezes(("production", "api migration", "")))
    api, web = org.services["api"].policy, org.services["web"].policy
    assert (reason(api, "production"), reason(api, "staging")) == ("api migration", "org audit")
    assert (reason(web, "production"), reason(web, "staging")) == ("web launch", "org audit")
    bad = problems(tmp_path / "b", freezes(("staging", "x", "wbe")),
                   freezes(("staging", "y", "api")))
    assert bad == [
        "deckhand.yml:2 policy.freeze.0.services.0: unknown service 'wbe' (known: api, web)",
        "services/api.yml:9 policy.freeze.0.services: a service's freeze applies to itself; "
        "`services:` is for the main config's windows"]


def test_limits_take_the_smaller(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{limits: {production: {hosts_per_run: 1, runs_per_hour: 9}}}",
                 "{limits: {production: {hosts_per_run: 5, runs_per_hour: 2}}}")
    limits = org.services["api"].policy.limits["production"]
    assert (limits.hosts_per_run, limits.runs_per_hour) == (1, 2)
    web = org.services["web"].policy.limits["production"]
    assert (web.hosts_per_run, web.runs_per_hour) == (1, 9)


def test_break_glass_is_the_organisations_alone(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{break_glass: {users: [IC1]}}", "{max_replans: 1}")
    assert org.services["api"].policy.break_glass.users == ["IC1"]
    assert problems(tmp_path / "b", "{break_glass: {users: [IC1]}}",
                    "{break_glass: {users: [ME]}}") == [
        "services/api.yml:9 policy.break_glass: policy.break_glass belongs in the main "
        "config (a service adding granters would loosen the organisation's freezes)"]


def test_layers_are_never_written(tmp_path: Path) -> None:
    found = problems(tmp_path, "", "{layers: {}}")
    assert found == ["services/api.yml:9 policy.layers: is worked out at load "
                     "(docs/services.md 1.4), never written"]


CATALOG = """
apiVersion: backstage.io/v1alpha1
kind: System
metadata: {name: shop}
spec: {}
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata: {name: api, namespace: payments}
spec:
  type: service
  owner: team-api
"""


def test_owners_from_a_catalog_file_through_owners_map(tmp_path: Path) -> None:
    write(tmp_path / "services" / "catalog-info.yaml", CATALOG)
    org = org_of(tmp_path, "", "", api_extra="owners: {catalog: catalog-info.yaml}\n",
                 main_extra="owners_map: {'group:payments/team-api': [U1, S0TEAM]}\n")
    owners = org.services["api"].owners
    assert owners is not None
    assert (owners.approvers.users, owners.approvers.groups) == (["U1"], ["S0TEAM"])
    assert owners.source == ("owners: services/api.yml:9, services/catalog-info.yaml:11 "
                             "(group:payments/team-api)")
    api = org.services["api"].policy
    assert api.may_approve("U1", [], ["production"])
    assert api.may_approve("U7", ["S0TEAM"], ["staging"])
    assert not api.may_approve("U2", [], ["production"])  # anyone's rule, but not an owner
    assert org.services["web"].policy.may_approve("U2", [], ["production"])  # no owners
    assert org.index.owned == {"U1": ["api"], "S0TEAM": ["api"]}
    assert org.index.owned_by("U7", ["S0TEAM"]) == ["api"]


def test_an_unmapped_owner_is_refused_at_its_line(tmp_path: Path) -> None:
    write(tmp_path / "services" / "catalog-info.yaml", CATALOG)
    found = problems(tmp_path, "", "", api_extra="owners: {catalog: catalog-info.yaml}\n",
                     main_extra="owners_map: {team-web: U5}\n")
    assert found == ["services/catalog-info.yaml:11 spec.owner: owner 'group:payments/team-api' "
                     "is not in owners_map (known: group:default/team-web): map it to Slack "
                     "user or group ids in the main config"]
    missing = problems(tmp_path / "b", "", "", api_extra="owners: {catalog: nope.yaml}\n")
    assert len(missing) == 1 and missing[0].startswith(
        "services/api.yml:9 owners: cannot read the catalog file")
    empty = problems(tmp_path / "c", "", "", api_extra="owners: {users: []}\n")
    assert empty == ["services/api.yml:9 owners: names no owner: list users or groups, or "
                     "give a catalog file (delete `owners` for no owners rule)"]


def test_a_config_without_services_has_its_owners_layer(tmp_path: Path) -> None:
    path = write(tmp_path / "deckhand.yml", service("app", "owners: {users: [U1]}\n"
                                                    "policy: {environments: {production: "
                                                    "{approvers: {users: [U1, U2]}}}}\n"))
    policy = load_config(path).policy
    assert policy.may_approve("U1", [], ["production"])
    assert not policy.may_approve("U2", [], ["production"])
    lines = eligibility(of_scopes(["production"]), policy).lines
    assert [line.source for line in lines] == ["policy.environments.production",
                                               "owners: deckhand.yml:9"]
    plain = write(tmp_path / "plain.yml", service("app"))
    assert load_config(plain).policy.layers == {}  # no services, no owners: as before


def test_org_index(tmp_path: Path) -> None:
    org = org_of(tmp_path, "", "", api_extra="owners: {users: [U1]}\n")
    index = org.index
    assert index.names == {"api": "api", "web": "web"}
    assert index.hosts[("name", "api-2")] == [("api", "production")]
    assert index.scopes == [("api", "staging"), ("api", "production"), ("web", "staging"),
                            ("web", "production")]
    assert index.owned == {"U1": ["api"]}
    json.dumps(index.scopes)  # plain data, what faces hand on


def test_check_notes_name_which_layer_wins(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{environments: {production: {approvers: {users: [U1, U2]}, "
                           "min_approvals: 2}}}",  # two named: a count one name could not meet
                 P % "approval_ttl: 60", api_extra="owners: {users: [U1]}\n")
    notes = policy_notes(org)
    assert ("api/production: min_approvals 2 — organisation: deckhand.yml:2 policy.environments."
            "production wins over services/api.yml:10 policy.environments.production (1)") in notes
    assert ("api/production: approval_ttl 60s — services/api.yml:10 policy.environments."
            "production wins over organisation: deckhand.yml:2 policy.environments.production "
            "(3600s)") \
        not in notes  # the organisation did not write a ttl: it has no say
    assert any(n.startswith("api: owners <@U1> approve its runs") for n in notes)
    assert ("web/staging: no organisation rule of that name, so nothing of the "
            "organisation's applies (organisation rules match names)") in notes


def test_a_shared_host_takes_every_services_layers(tmp_path: Path) -> None:
    """Step 4: api's policy learns web/production (the machine box/shop both list) as a
    scope of its own, governed by web's rule and layers alone; api's own environments keep
    only their own rules, so a run not touching the host answers to api alone."""
    box = "{address: 10.0.0.5, port: 2222}"
    api = write(tmp_path / "api.yml", service("api").replace("api-3: {connection: local}", f"box: {box}")
                .replace("[api-2, api-3]", "[api-2, box]") + "owners: {users: [U1]}\n"
                "policy:\n  environments: {production: {approvers: {users: [U1, U2]}}}\n")
    web = write(tmp_path / "web.yml", service("web").replace("web-3: {connection: local}", f"shop: {box}")
                .replace("[web-2, web-3]", "[web-2, shop]") + "owners: {users: [U2]}\n"
                "policy:\n  environments: {production: {approvers: {anyone: true}, "
                "min_approvals: 2, lock: wait}}\n  freeze: [{environments: [production], "
                "reason: sale, start: '2030-01-01T00:00:00', end: '2030-01-02T00:00:00'}]\n"
                "  limits: {production: {hosts_per_run: 1, runs_per_hour: 3}}\n")
    services = {"api": load_config(api), "web": load_config(web)}
    index = OrgIndex.of(services)
    assert index.hosts[("ssh", "10.0.0.5", "2222")] == [("api", "production"),
                                                         ("web", "production")]
    share_layers(services, index)
    policy = services["api"].policy
    assert services["api"].inventory.shared == {"box": ("web/production",)}
    assert policy.foreign == {"web/production": ("web", "production")}
    assert policy.may_approve("U1", [], ["production"])  # api alone: not touching box
    assert policy.strictest(["production"]).min_approvals == 1
    assert reason(policy, "production") is None
    both = ["production", "web/production"]
    assert not policy.may_approve("U1", [], both)  # api's owner, not web's
    assert not policy.may_approve("U2", [], both)  # web's owner, not api's
    assert policy.may_approve("U2", [], ["web/production"])  # api's own rules not there
    assert policy.strictest(both).min_approvals == 2
    assert policy.strictest(both).lock == "refuse"  # api's own production rule refuses
    assert reason(policy, "web/production") == "web/production: sale"
    assert policy.limits["web/production"].hosts_per_run == 1
    assert [line.source for line in eligibility(of_scopes(both), policy).lines] == [
        "policy.environments.production", "owners: api.yml:9",
        "web/production: policy.environments.production",
        "web/production: owners: web.yml:9"]
    assert [line.label for line in eligibility(of_scopes(both), policy).lines] == [
        "production", "production (owners)", "web/production", "web/production (owners)"]
    web_policy = services["web"].policy
    assert web_policy.strictest(["production"]).min_approvals == 2  # nothing of api's
    assert web_policy.may_approve("U2", [], ["production"])
    assert not web_policy.may_approve("U2", [], ["production", "api/production"])


def test_policy_diff_sees_owners_not_the_lines_they_moved_to(tmp_path: Path) -> None:
    old = load_config(write(tmp_path / "a" / "deckhand.yml", service("app")))
    owned = load_config(write(tmp_path / "b" / "deckhand.yml",
                              service("app", "owners: {users: [U1]}\n")))
    moved = load_config(write(tmp_path / "c" / "deckhand.yml",
                              "owners: {users: [U1]}\n" + service("app")))
    added = policy_diff((old.policy, old.inventory), (owned.policy, owned.inventory))
    assert added.changed and any("owners: deckhand.yml" in line for line in added.lines())
    same = policy_diff((owned.policy, owned.inventory), (moved.policy, moved.inventory))
    assert not same.changed, same.lines()


def test_check_says_when_the_layers_leave_nobody(tmp_path: Path) -> None:
    org = org_of(tmp_path, "{environments: {production: {approvers: {users: [U1, U2]}}}}",
                 api_extra="owners: {users: [U3]}\n")
    notes = policy_notes(org)
    assert ("api/production: nobody is allowed by every layer, so no plan touching it can "
            "be approved: only someone allowed by every rule (production: <@U1>, <@U2>; "
            "production (owners): <@U3>)") in notes
    assert not any(n.startswith(("api/staging: nobody", "web/")) and "nobody is" in n
                   for n in notes)


def test_a_config_cannot_call_its_own_environment_foreign(tmp_path: Path) -> None:
    """Which scopes are another service's is computed at load, never read from a file:
    written, it would drop the environment's own rule."""
    path = write(tmp_path / "deckhand.yml", service("app") + "policy:\n  foreign: "
                 "{production: [web, production]}\n  environments: {production: "
                 "{approvers: {users: [U1]}}}\n")
    with pytest.raises(ConfigError, match="foreign"):
        load_config(path)
