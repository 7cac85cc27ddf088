"""Services, step 1 (docs/services.md): a main config's ``services:`` loaded into one Config
per service (a file, or inline), every section in its place with file:line problems, and a
config without ``services:`` as its one service, exactly as before."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agents.config import load_config
from agents.errors import ManyServices
from agents.org import cross_service_hosts, load_org
from agents.services import store_dir
from bot.cli import main
from tools.errors import ConfigError

API = """
tools:
  ship:
    description: put a version on every host of an environment
    command: "mkdir -p {host.dir} && echo {version} {vars.team} > {host.dir}/version"
    target: environment
    params: {version: {pattern: '^v\\d+\\.\\d+\\.\\d+$'}}
inventory:
  hosts:
    api-1: {connection: local, vars: {dir: "{state_dir}/api-1"}}
    api-2: {connection: local, vars: {dir: "{config_dir}/api-2"}}
  environments:
    staging: {hosts: [api-1]}
    production: {hosts: [api-2], aliases: [prod]}
vars: {team: api-team, region: eu}
secrets: [api-secret]
playbooks:
  - name: ship
    match: ['^ship (?P<version>v\\S+) to (?P<environment>\\S+)$']
    examples: ["ship v1.2.3 to staging"]
    goal: "ship {version} to {environment}"
    steps: [{id: ship, tool: ship, params: {environment: "{environment}",
                                            version: "{version}"}}]
"""

MAIN = """
services:
  api: services/api.yml
  docs:
    tools:
      publish: {description: publish the docs, command: "echo {vars.team} {vars.region}"}
    inventory:
      hosts: {docs-1: {connection: local, vars: {dir: "{state_dir}/docs-1"}}}
      environments: {live: {hosts: [docs-1]}}
vars: {team: platform, region: us}
secrets: [org-secret]
state_dir: state
inventory:
  known_hosts: "{config_dir}/known_hosts"
  ssh: {max_handshakes: 4}
policy:
  environments:
    production: {approvers: {users: [U1, U2]}, min_approvals: 2}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def org_files(tmp_path: Path, main: str = MAIN, api: str = API) -> Path:
    write(tmp_path / "services" / "api.yml", api)
    return write(tmp_path / "deckhand.yml", main)


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_org(path)
    return [str(p) for p in caught.value.problems]


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` that holds ``text`` (where a problem must point)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_two_services_one_from_a_file_one_inline(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DECKHAND_STATE_DIR", raising=False)
    org = load_org(org_files(tmp_path))
    assert org.split and list(org.services) == ["api", "docs"] and org.legacy is None
    api, docs = org.services["api"], org.services["docs"]
    assert (api.name, api.key, docs.name, docs.key) == ("api", "api", "docs", "docs")
    assert api.path == tmp_path / "services" / "api.yml" and docs.path == tmp_path / "deckhand.yml"
    assert api.main_path == docs.main_path == tmp_path / "deckhand.yml"
    # {state_dir}: the organisation's, one directory per service; {config_dir}: the file's
    assert api.state_dir == tmp_path / "state" / "services" / "api"
    assert api.inventory.hosts["api-1"].vars["dir"] == str(tmp_path / "state/services/api/api-1")
    assert api.inventory.hosts["api-2"].vars["dir"] == str(tmp_path / "services" / "api-2")
    assert docs.inventory.hosts["docs-1"].vars["dir"] == str(tmp_path / "state/services/docs/docs-1")
    # vars: the organisation's are defaults, the service's win; secrets add up
    assert api.vars == {"team": "api-team", "region": "eu"}
    assert docs.vars == {"team": "platform", "region": "us"}
    assert api.secrets == ["org-secret", "api-secret"] and docs.secrets == ["org-secret"]
    # one SSH pool: known_hosts and ssh come from the main config
    assert api.inventory.known_hosts == str(tmp_path / "known_hosts")
    assert api.inventory.ssh.max_handshakes == docs.inventory.ssh.max_handshakes == 4
    # the main config's policy governs a service that writes none; its names span services
    assert api.policy.for_env("production").min_approvals == 2
    assert docs.policy.for_env("live").approvers.anyone
    assert api.catalog.tools["ship"].params["environment"].enum == ["production", "staging"]
    # without REDIS_URL every service shares the organisation's embedded store (issue 43.1)
    assert store_dir(api) == store_dir(docs) == tmp_path / "state"


def test_the_faces_take_one_service_and_refuse_several_in_one_line(tmp_path: Path) -> None:
    org = load_org(org_files(tmp_path))
    with pytest.raises(ManyServices) as caught:
        org.only()
    text = str(caught.value)
    assert "\n" not in text and "2 services (api, docs)" in text
    assert "lands in a later step" in text and "deckhand check" in text
    one = write(tmp_path / "one.yml", "services:\n  api: services/api.yml\n")
    only = load_org(one).only()
    assert (only.name, only.key, only.main_path) == ("api", "api", one)


def test_legacy_service_keeps_the_shapes_of_before(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DECKHAND_STATE_DIR", raising=False)
    org = load_org(org_files(tmp_path, MAIN + "legacy_service: api\n"))
    api, docs = org.services["api"], org.services["docs"]
    assert org.legacy == "api" and (api.key, docs.key) == (None, "docs")
    assert api.state_dir == tmp_path / "state"  # the legacy service keeps STATE_DIR


@pytest.mark.parametrize(("stem", "service", "name"), [
    ("deckhand", None, "deckhand"),
    ("My.Deploy Conf", None, "my-deploy-conf"),
    ("deckhand", "payments", "payments"),
])
def test_a_config_without_services_is_one_service(tmp_path: Path, stem: str,
                                                  service: str | None, name: str) -> None:
    named = f"service: {service}\n" if service else ""
    path = write(tmp_path / f"{stem}.yml", named + textwrap.dedent(API))
    org = load_org(path)
    config = org.only()
    assert not org.split and org.legacy == name and list(org.services) == [name]
    assert (config.name, config.key, config.main_path) == (name, None, None)
    same = load_config(path)
    assert (same.name, same.key, same.vars, same.state_dir) == (name, None, config.vars,
                                                                 config.state_dir)


def test_a_config_without_services_keeps_its_errors(tmp_path: Path) -> None:
    """Nothing about a config of before changes: same sections, same problems."""
    path = write(tmp_path / "deckhand.yml", textwrap.dedent(API) + "planner: {prompts: {}}\n"
                 "retention: {days: 90, export: a.jsonl}\nstate_dir: st\naudit: {}\n")
    assert load_org(path).only().retention is not None
    bad = write(tmp_path / "bad.yml", "service: API\nchannels: {C1: api}\nbogus: 1\n"
                "owners: {users: []}\n")
    found = problems(bad)
    assert len(found) == 4, found
    assert any(p.startswith(f"{bad}:1 service: 'API' is not a service name") for p in found)
    assert any(p.startswith(f"{bad}:2 channels: `channels` belongs beside `services:`")
               for p in found)
    assert any(p.startswith(f"{bad}:3 bogus: unknown section (expected one of audit, "
                            f"history, inventory") for p in found)
    assert any(p.startswith("bad.yml:4 owners: names no owner") for p in found), found


def test_a_section_in_the_wrong_file_is_a_problem_at_its_line(tmp_path: Path) -> None:
    api = textwrap.dedent(API) + textwrap.dedent("""
        planner: {prompts: {}}
        audit: {}
        channels: {C1: api}
        policy:
          break_glass: {users: [U9]}
        """)
    api = api.replace("inventory:\n", "inventory:\n  ssh: {max_handshakes: 2}\n", 1)
    main = MAIN.replace("    tools:\n", "    retention: {days: 1, export: x}\n    tools:\n", 1)
    main += "tools: {x: {description: d, command: 'true'}}\nplaybooks: []\n"
    main = main.replace("  ssh: {max_handshakes: 4}\n",
                        "  ssh: {max_handshakes: 4}\n  hosts: {a: {connection: local}}\n")
    path = org_files(tmp_path, main, api)
    service = tmp_path / "services" / "api.yml"
    found = problems(path)

    def at(file: Path, text: str, where: str, message: str) -> None:
        expected = f"{file}:{line_of(file, text)} {where}: {message}"
        assert any(p.startswith(expected) for p in found), f"{expected}\nnot in:\n" + \
            "\n".join(found)

    at(path, "tools: {x:", "tools", "`tools` belongs in a service's config")
    at(path, "playbooks: []", "playbooks", "`playbooks` belongs in a service's config")
    at(path, "hosts: {a:", "inventory.hosts", "inventory.hosts belongs in a service's config")
    at(path, "retention: {days: 1", "services.docs.retention",
       "`retention` is organisation-wide: it belongs in the main config")
    at(service, "planner:", "planner", "`planner` is organisation-wide")
    at(service, "audit:", "audit", "`audit` is organisation-wide")
    at(service, "channels:", "channels", "`channels` is organisation-wide")
    at(service, "ssh:", "inventory.ssh", "inventory.ssh belongs in the main config")
    at(service, "break_glass", "policy.break_glass", "policy.break_glass belongs in the main")
    assert len(found) == 9, "\n".join(found)  # a policy in both is layers (1.4), no problem


def test_names_duplicates_and_references_between_services(tmp_path: Path) -> None:
    write(tmp_path / "services" / "web.yml", "service: website\n" + textwrap.dedent(API)
          .replace("api-", "web-"))
    main = """
        services:
          api: services/api.yml
          api: services/api.yml
          web: services/web.yml
          also-web: ./services/../services/web.yml
          Docs: {}
          deploy: {}
          staging: {}
          docs: {inventory: {hosts: {d-1: {connection: local}}, environments: {"a/b": {hosts: [d-1]}}}}
          gone: services/gone.yml
        channels: {C1: api, C2: nope}
        legacy_service: ghost
        """
    path = org_files(tmp_path, main)
    web = tmp_path / "services" / "web.yml"
    found = problems(path)
    expected = [
        f"{path}:3 services.api: duplicate key (first defined on line 2)",
        f"{web}:1 service: says service 'website', but the main config",
        f"{path}:5 services.also-web: loads the same file as service 'web'",
        f"{path}:6 services.Docs: 'Docs' is not a service name",
        f"{path}:7 services.deploy: 'deploy' is a word requests use",
        f"{path}:9 services.docs.inventory.environments.a/b: environment 'a/b': with "
        f"services, environment names may not contain ':' or '/'",
        f"{path}:10 services.gone: {tmp_path / 'services' / 'gone.yml'}: cannot read file",
        f"{path}:8 services.staging: service 'staging' is also an environment (or alias) "
        f"of api",
        f"{path}:12 legacy_service: unknown service 'ghost' (known: Docs, also-web, api",
        f"{path}:11 channels.C2: channel C2 names unknown service 'nope'",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in found), f"{line}\nnot in:\n" + "\n".join(found)
    assert not any("channels.C1" in p for p in found)
    assert len(found) == len(expected)


def test_the_main_policy_names_environments_of_any_service(tmp_path: Path) -> None:
    """Its rules go by environment name: production (api's) is known, a typo is not."""
    path = org_files(tmp_path, MAIN.replace("    production: {approvers",
                                            "    prodution: {approvers"))
    assert problems(path) == [f"{path}:{line_of(path, 'prodution')} policy.environments."
                              f"prodution: unknown environment 'prodution' (known: live, "
                              f"production, staging)"]


def test_a_machine_two_services_list_is_one_shared_host(tmp_path: Path) -> None:
    """By address and port (whatever each calls it) or by name: loaded, and each service's
    inventory knows the other's environments it reaches (docs/services.md 2.5)."""
    ssh_api = API.replace("api-2: {connection: local, vars: {dir: \"{config_dir}/api-2\"}}",
                          "api-2: {address: 10.0.0.5, port: 2222}")
    write(tmp_path / "services" / "web.yml",
          "inventory:\n  hosts:\n    box: {address: 10.0.0.5, port: 2222}\n"
          "    api-1: {connection: local}\n    web-1: {connection: local}\n"
          "  environments:\n    live: {hosts: [box, api-1]}\n    beta: {hosts: [web-1]}\n")
    org = load_org(org_files(tmp_path, "services: {api: services/api.yml, "
                                       "web: services/web.yml}\n", ssh_api))
    api, web = org.services["api"], org.services["web"]
    assert api.inventory.shared == {"api-1": ("web/live",), "api-2": ("web/live",)}
    assert web.inventory.shared == {"box": ("api/production",), "api-1": ("api/staging",)}
    assert api.inventory.hosts["api-2"].lock_id == web.inventory.hosts["box"].lock_id \
        == "10.0.0.5:2222"
    assert web.inventory.hosts["api-1"].lock_id == "local:api-1"
    assert set(api.policy.foreign) == {"web/live"} and "web/live" not in api.policy.environments


def test_one_host_name_for_two_machines_is_refused(tmp_path: Path) -> None:
    ssh_api = API.replace("api-2: {connection: local, vars: {dir: \"{config_dir}/api-2\"}}",
                          "api-2: {address: 10.0.0.5, port: 2222}")
    write(tmp_path / "services" / "web.yml",
          "inventory:\n  hosts:\n    api-2: {address: 10.0.0.6, port: 2222}\n"
          "  environments:\n    live: {hosts: [api-2]}\n")
    path = org_files(tmp_path, "services: {api: services/api.yml, web: services/web.yml}\n",
                     ssh_api)
    web = tmp_path / "services" / "web.yml"
    assert problems(path) == [
        f"{web}:3 inventory.hosts.api-2: host 'api-2' is api-2 (10.0.0.5:2222) in service "
        f"api but api-2 (10.0.0.6:2222) here: one name is one machine across services (its "
        f"rules and locks are shared); rename one of them"]


def test_check_validates_every_service(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    path = org_files(tmp_path)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path} is valid: 2 service(s): api, docs" in out
    assert f"  api ({tmp_path / 'services' / 'api.yml'}): 1 tools, 2 hosts, 2 environments, " \
           f"1 playbooks" in out
    assert f"  docs ({path}): 1 tools, 1 hosts, 1 environments, 0 playbooks" in out
    assert f"state: {tmp_path / 'state' / 'services' / 'api'} (writable)" in out
    (tmp_path / "services" / "api.yml").write_text(textwrap.dedent(API) + "planner: {}\n")
    assert main(["check", str(path)]) == 2
    out = capsys.readouterr().out
    assert "services/api.yml:" in out and "planner: `planner` is organisation-wide" in out


@pytest.mark.parametrize("argv", [["plan", "ship v1.2.3 to staging"], ["hosts", "--json"],
                                  ["run", "--yes", "ship v1.2.3 to staging"]])
def test_the_cli_asks_which_service_when_nothing_names_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        argv: list[str]) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("DECKHAND_SERVICE", raising=False)
    path = org_files(tmp_path)
    assert main([*argv, "--config", str(path)]) == 2
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert lines[-1].startswith("error: which service? This organisation has api, docs: "
                                "name one"), lines


def test_check_names_each_shared_host_and_warns_when_no_owner_is_common(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("DECKHAND_STATE_DIR", str(tmp_path / "state"))
    write(tmp_path / "services" / "web.yml",
          "inventory:\n  hosts: {api-2: {connection: local}}\n  environments:\n"
          "    live: {hosts: [api-2]}\nowners: {users: [U2]}\n"
          "policy: {environments: {live: {approvers: {users: [U2, U3]}, lock: wait}}}\n")
    path = org_files(tmp_path, "services: {api: services/api.yml, web: services/web.yml}\n",
                     API + "owners: {users: [U1, U3]}\n")
    org = load_org(path)
    notes, warnings = cross_service_hosts(org)
    assert notes[0].startswith("api: host api-2 (local:api-2) is also in web/live: a run of "
                               "api touching it needs every rule of production, web/live — "
                               "production: anyone (1 needed) — ")
    assert "web/live: U2, U3 (1 needed) — web/live: services/web.yml:6 policy." \
           "environments.live, touches api-2" in notes[0]
    assert "web/live: U2 (1 needed) — web/live: owners: services/web.yml:5" in notes[0]
    assert notes[0].endswith("it holds host lock local:api-2 (lock: refuse)")  # api's default
    assert notes[1].startswith("web: host api-2 (local:api-2) is also in api/production")
    assert warnings[0].startswith("api: no user is allowed by name by every rule over host "
                                  "api-2 (production (owners): U1, U3; web/live: U2, "
                                  "U3; web/live (owners): U2)")
    assert len(warnings) == 2  # and web's view of the same host
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "shared host: api: host api-2 (local:api-2) is also in web/live" in out
    assert "warning: web: no user is allowed by name by every rule over host api-2" in out
