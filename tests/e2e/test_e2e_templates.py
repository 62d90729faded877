"""Config templates with the stock determined==0.38.1 CLI: `det template create|list|describe|set|
remove` and `det experiment create --template`, judged by what Cairn stores and what a second
command shows (`det` exits 0 after many failures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cairn.api.v1 import experiment_pb2, template_pb2
from cairn.wire import struct_to_python, value_to_python
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import cairn_cli, trials, wait_state
from tests.support.cluster import AuthedStub, TestCluster

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"

TEMPLATE = {
    "description": "shared by the team",
    "max_restarts": 5,
    "labels": ["team"],
    "hyperparameters": {"steps": 4, "step_s": 0.05, "increment_by": 3},
    "searcher": {"name": "single", "metric": "x", "smaller_is_better": False, "max_length": {"batches": 4}},
    "environment": {"environment_variables": ["SHARED=template", "TEAM=1"]},
}
# `det template set` replaces the config whole.
NEW_TEMPLATE = {**TEMPLATE, "description": "set again", "max_restarts": 4}

EXPERIMENT = """
name: with-template
entrypoint: python3 det_core_trial.py
max_restarts: 0
labels: [mine]
hyperparameters:
  steps: 2
environment:
  environment_variables: [SHARED=experiment]
"""


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def stored_templates(api: AuthedStub) -> dict[str, tuple[Any, int]]:
    found = api.GetTemplates(template_pb2.GetTemplatesRequest()).templates
    return {t.name: (_whole(value_to_python(t.config)), t.workspace_id) for t in found}


def stored_config(api: AuthedStub, experiment_id: int) -> Any:
    request = experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)
    return _whole(struct_to_python(api.GetExperiment(request).config))


def experiment_count(api: AuthedStub) -> int:
    return len(api.GetExperiments(experiment_pb2.GetExperimentsRequest()).experiments)


def write_yaml(path: Path, data: Any) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_templates_with_the_stock_cli(cluster: TestCluster, tmp_path: Path) -> None:
    api = cluster.login()
    env = determined_env(cluster, tmp_path / "home")
    det = det_runner(env, "determined")
    admin = det_runner(env, "admin")

    # Create, list and describe.
    assert "Created template team" in det(
        "template", "create", "team", write_yaml(tmp_path / "t.yaml", TEMPLATE)
    )
    assert stored_templates(api) == {"team": (TEMPLATE, 1)}
    listed = det("template", "list")
    assert "team" in listed and "Uncategorized" in listed
    assert yaml.safe_load(det("template", "describe", "team")) == TEMPLATE
    assert "max_restarts: 5" in det("template", "list", "--details")

    # Set: the same name, new content, replaced whole; for a new name, a new template.
    det("template", "set", "team", write_yaml(tmp_path / "t2.yaml", NEW_TEMPLATE))
    assert stored_templates(api) == {"team": (NEW_TEMPLATE, 1)}
    assert yaml.safe_load(det("template", "describe", "team")) == NEW_TEMPLATE
    det("tpl", "set", "fresh", write_yaml(tmp_path / "f.yaml", {"debug": True}))
    det("template", "set-value", "config", "fresh", write_yaml(tmp_path / "f2.yaml", {"max_restarts": 2}))
    assert stored_templates(api) == {"team": (NEW_TEMPLATE, 1), "fresh": ({"max_restarts": 2}, 1)}
    det("template", "remove", "fresh")

    # Bad template files are refused and change nothing: an unknown key, a wrong type, not a mapping.
    bad_key = write_yaml(tmp_path / "bad1.yaml", {"max_restrats": 1})
    refused = det("template", "create", "bad", bad_key, check=False)
    assert "config.max_restrats: unknown field (did you mean 'max_restarts'?)" in refused
    wrong_type = write_yaml(tmp_path / "bad2.yaml", {"searcher": {"name": "random", "max_trials": "many"}})
    assert "config.searcher.max_trials: must be an integer" in det(
        "template", "set", "team", wrong_type, check=False
    )
    not_a_mapping = write_yaml(tmp_path / "bad3.yaml", ["max_restarts: 1"])
    assert "config: must be a mapping" in det("template", "create", "bad", not_a_mapping, check=False)
    assert stored_templates(api) == {"team": (NEW_TEMPLATE, 1)}

    # Someone else's template: listed and usable, not changed or removed by another user.
    admins_file = write_yaml(tmp_path / "a.yaml", {"max_restarts": 1})
    admin("template", "create", "admins", admins_file)
    assert "belongs to another user" in det("template", "remove", "admins", check=False)
    assert "belongs to another user" in det(
        "template", "set", "admins", str(tmp_path / "t.yaml"), check=False
    )
    assert stored_templates(api)["admins"] == ({"max_restarts": 1}, 1)
    # Renaming (the WebUI's call; the CLI has no verb for it): only its owner may.
    rename = """
body = bindings.v1PatchTemplateNameRequest(oldName="admins", newName="{new}")
result = bindings.patch_PatchTemplateName(client._determined._session, body=body).template.name
"""
    with pytest.raises(AssertionError, match="belongs to another user"):
        sdk_runner(env, "determined")(rename.format(new="stolen"))
    assert sdk_runner(env, "admin")(rename.format(new="team-admins")) == "team-admins"
    assert stored_templates(api)["team-admins"] == ({"max_restarts": 1}, 1)

    # An experiment with the template: its own keys win, the template fills the rest.
    config_file = tmp_path / "exp.yaml"
    config_file.write_text(EXPERIMENT)
    assert "Created experiment 1" in det(
        "experiment", "create", "--template", "team", str(config_file), str(DET_TRIAL_DIR)
    )
    config = stored_config(api, 1)
    assert config["name"] == "with-template" and config["max_restarts"] == 0
    assert config["description"] == "set again"
    assert config["labels"] == ["mine", "team"]
    assert config["searcher"]["metric"] == "x" and config["searcher"]["smaller_is_better"] is False
    assert config["hyperparameters"]["steps"] == {"type": "const", "val": 2}
    assert config["hyperparameters"]["increment_by"] == {"type": "const", "val": 3}
    # The template's variables first, so the experiment's assignment of SHARED wins.
    assert config["environment"]["environment_variables"] == [
        "SHARED=template",
        "TEAM=1",
        "SHARED=experiment",
    ]
    wait_state(api, 1, "COMPLETED")
    (trial,) = trials(api, 1)
    assert _whole(struct_to_python(trial.hparams)) == {"steps": 2, "step_s": 0.05, "increment_by": 3}

    # An unknown template: refused, nothing created.
    refused = det(
        "experiment", "create", "--template", "nope", str(config_file), str(DET_TRIAL_DIR), check=False
    )
    assert "template: no template named 'nope'" in refused
    assert experiment_count(api) == 1

    # Remove: gone for good; the experiment keeps its expanded config.
    det("template", "remove", "team")
    assert set(stored_templates(api)) == {"team-admins"}
    with pytest.raises(grpc.RpcError) as missing:
        api.GetTemplate(template_pb2.GetTemplateRequest(template_name="team"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert stored_config(api, 1) == config

    # Cairn's own CLI: the same verbs over gRPC, and --template on experiment create.
    cairn = cairn_cli(cluster, tmp_path / "cairn-config")
    assert "Created template mine" in cairn("template", "create", "mine", str(tmp_path / "t.yaml"))
    cairn("template", "set", "mine", str(tmp_path / "t2.yaml"))
    assert yaml.safe_load(cairn("template", "describe", "mine")) == NEW_TEMPLATE
    listed_json = json.loads(cairn("template", "list", "--json"))
    assert [t["name"] for t in listed_json["templates"]] == ["mine", "team-admins"]
    checked = json.loads(
        cairn(
            "experiment",
            "create",
            "--template",
            "mine",
            "--validate-only",
            "--json",
            str(config_file),
            str(DET_TRIAL_DIR),
        )
    )
    assert checked["config"]["description"] == "set again" and checked["config"]["max_restarts"] == 0
    cairn("template", "rm", "mine")
    assert set(stored_templates(api)) == {"team-admins"} and experiment_count(api) == 1
