"""resolve_openai_configs: the config-resolution table of the env CLI (spec §6.2, with fixes)."""

from __future__ import annotations

import pytest

from atroposlib.envs.server_handling.openai_server import ServerConfigError, resolve_openai_configs
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline
from atroposlib.envs.server_handling.server_manager import ServerManager

A = APIServerConfig(model_name="a", base_url="http://a:1/v1", api_key="ka")
B = APIServerConfig(model_name="b", base_url="http://b:2/v1", api_key="kb")


def test_yaml_list_of_two_wins():
    yaml = {
        "openai": [
            {"model_name": "y1", "base_url": "http://y1/v1"},
            {"model_name": "y2", "base_url": "http://y2/v1"},
        ]
    }
    out = resolve_openai_configs(A, A.model_dump(), yaml, {})
    assert [c.model_name for c in out] == ["y1", "y2"]
    assert all(isinstance(c, APIServerConfig) for c in out)


@pytest.mark.parametrize(
    ("default", "yaml"),
    [(A, {"openai": [{"model_name": "y1"}, {"model_name": "y2"}]}), ([A, B], {})],
)
def test_cli_overrides_with_several_servers_are_an_error(default, yaml):
    with pytest.raises(ServerConfigError, match="--openai.base_url") as err:
        resolve_openai_configs(default, {}, yaml, {"openai.base_url": "http://z/v1", "env.group_size": 2})
    assert err.value.exit_code == 2


def test_default_list_of_two_is_kept():
    out = resolve_openai_configs([A, B], {}, {}, {"env.group_size": "4"})
    assert out == [A, B]


def test_single_default_gives_a_single_merged_config_used_as_given():
    merged = {**A.model_dump(), "base_url": "https://openrouter.ai/api/v1"}
    out = resolve_openai_configs(A, merged, {}, {"openai.base_url": "https://openrouter.ai/api/v1"})
    assert isinstance(out, APIServerConfig)
    assert out.base_url == "https://openrouter.ai/api/v1" and out.api_key == "ka"
    # The fix of defect 1: the manager uses exactly this server, not localhost:9004-9007.
    manager = ServerManager(out)
    assert [s.config.base_url for s in manager.servers] == ["https://openrouter.ai/api/v1"]
    assert manager.servers[0].config.api_key == "ka"


def test_server_baseline_unchanged_without_overrides():
    baseline = ServerBaseline(model_name="m")
    assert resolve_openai_configs(baseline, {}, {}, {}) is baseline


def test_server_baseline_with_overrides_becomes_one_config():
    baseline = ServerBaseline(model_name="m", num_requests_for_eval=7)
    out = resolve_openai_configs(
        baseline, {}, {"openai": {"api_key": "k"}}, {"openai.base_url": "http://remote:9/v1"}
    )
    assert isinstance(out, APIServerConfig)
    assert (out.model_name, out.num_requests_for_eval, out.api_key, out.base_url) == (
        "m",
        7,
        "k",
        "http://remote:9/v1",
    )


def test_list_of_one_gives_a_list_of_the_merged_config():
    out = resolve_openai_configs(
        [A], {**A.model_dump(), "model_name": "cli"}, {}, {"openai.model_name": "cli"}
    )
    assert isinstance(out, list) and len(out) == 1 and out[0].model_name == "cli"


def test_invalid_merged_value_names_the_field():
    with pytest.raises(ServerConfigError, match=r"openai\.timeout"):
        resolve_openai_configs([A], {**A.model_dump(), "timeout": "soon"}, {}, {"openai.timeout": "soon"})


def test_yaml_entry_must_be_a_mapping():
    with pytest.raises(ServerConfigError, match=r"openai\[1\]"):
        resolve_openai_configs(A, {}, {"openai": [{"model_name": "x"}, "oops"]}, {})
