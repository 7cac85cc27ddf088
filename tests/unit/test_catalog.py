import pytest

from tools.catalog import Catalog, ParamSpec, Tool
from tools.errors import ParamError, UnknownTool

VERSION = ParamSpec(pattern=r"^v\d+\.\d+\.\d+$")


def deploy_tool() -> Tool:
    return Tool(name="deploy", description="d", command="deploy.sh {version} {host.dir}",
                params={"version": VERSION})


@pytest.mark.parametrize("bad", [
    "v2.3.1; rm -rf /", "$(reboot)", "`reboot`", "v2.3.1\nreboot", "v2.3.1\u2028x",
    "v２.３.１", "v2.3.1 && true", "",
])
def test_version_pattern_rejects_injection_and_lookalikes(bad: str) -> None:
    problem = VERSION.check(bad) or ""
    if any(c in bad for c in "\n\u2028"):
        assert problem == "must not contain control characters or line breaks"
    else:
        assert problem == f"{bad!r} does not match the pattern ^v\\d+\\.\\d+\\.\\d+$"


def test_control_characters_refused_even_without_pattern() -> None:
    free = ParamSpec()
    assert free.check("hello world ünïcode ✓") is None
    assert "control" in (free.check("line1\nline2") or "")
    assert "control" in (free.check("bidi\u202etrick") or "")


def test_types_enum_and_bounds() -> None:
    assert ParamSpec(type="integer", minimum=1).check(0) == "must be >= 1"
    assert ParamSpec(type="integer").check(True) == "must be an integer"
    assert ParamSpec(type="boolean").check("yes") == "must be true or false"
    assert ParamSpec(enum=["a", "b"]).check("c") is not None
    assert ParamSpec(max_length=3).check("abcd") is not None


def test_render_delivers_values_as_variables_and_shows_them_quoted() -> None:
    catalog = Catalog({"t": Tool(name="t", description="d", command="echo {msg} {host.dir}",
                                 params={"msg": ParamSpec(), "key": ParamSpec(
                                     secret=True, required=False)})})
    cmd = catalog.render(catalog.get("t"), {"msg": "it's $(x) `y`"},
                         host_vars={"dir": "/srv/my app"}, config_vars={})
    assert cmd == ("DH_msg='it'\\''s $(x) `y`'\nDH_HOST_dir='/srv/my app'\n"
                   'echo "${DH_msg}" "${DH_HOST_dir}"')
    shown = catalog.command(catalog.get("t"), {"msg": "it's"}, host_vars={"dir": "/a b"},
                            config_vars={}).shown()
    assert shown == "echo 'it'\"'\"'s' '/a b'"


def test_render_refuses_invalid_params_and_missing_values() -> None:
    catalog = Catalog({"deploy": deploy_tool()})
    with pytest.raises(ParamError, match="does not match"):
        catalog.render(catalog.get("deploy"), {"version": "$(reboot)"}, host_vars={"dir": "/x"},
                       config_vars={})
    with pytest.raises(ParamError, match=r"\{host.dir\}"):
        catalog.render(catalog.get("deploy"), {"version": "v1.2.3"}, host_vars={},
                       config_vars={})


def test_unknown_tool_suggests_the_closest() -> None:
    with pytest.raises(UnknownTool, match="Did you mean 'deploy'"):
        Catalog({"deploy": deploy_tool()}).get("deplyo")


def test_param_problems_lists_all() -> None:
    catalog = Catalog({"deploy": deploy_tool()})
    problems = catalog.param_problems(catalog.get("deploy"), {"bogus": 1})
    assert any("unknown parameter 'bogus'" in p for p in problems)
    assert any("missing required parameter 'version'" in p for p in problems)


def test_environment_tools_get_an_environment_param() -> None:
    tool = Tool(name="d", description="d", command="x", target="environment")
    assert "environment" in tool.params
