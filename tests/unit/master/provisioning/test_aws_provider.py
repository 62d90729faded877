"""The aws provider against moto's EC2 in server mode (a real HTTP endpoint on a free port; no AWS
is reachable from here): instances launched from the configured launch template with the pool's
tags, found again by them, launched once per id, terminated; the cluster token never in user data;
a launch error comes back as a ProviderError with EC2's message."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.provisioning.provider import LaunchSpec, ProviderError, ProviderState
from services.master.provisioners.aws import INSTANCE_ID_TAG, AwsProvider, AwsSettings
from tests.support.moto_ec2 import moto_server

REGION = "us-west-2"


@pytest.fixture(scope="module")
def ec2_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "cairn-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cairn-test")


def ec2(endpoint: str) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)


def settings(endpoint: str, pool: str, **extra: Any) -> AwsSettings:
    options = {"region": REGION, "endpoint_url": endpoint, **extra}
    return AwsSettings.parse(options, pool, "provider", "master.internal:8090")


def instances(endpoint: str, pool: str) -> list[dict[str, Any]]:
    found = ec2(endpoint).describe_instances(Filters=[{"Name": "tag:cairn-pool", "Values": [pool]}])
    return [i for r in found["Reservations"] for i in r["Instances"]]


def test_instances_come_from_the_template_with_the_pools_tags_once_per_id(ec2_endpoint: str) -> None:
    client = ec2(ec2_endpoint)
    template = client.create_launch_template(
        LaunchTemplateName="cairn-agents",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"},
    )["LaunchTemplate"]
    provider = AwsProvider(
        settings(
            ec2_endpoint,
            "gpu",
            launch_template={"name": "cairn-agents"},
            custom_tags=[{"key": "team", "value": "ml"}],
            cluster_token_parameter="/cairn/cluster-token",
            agent_docker_image="registry.internal/cairn-service:1.0",
        )
    )
    spec = LaunchSpec(instance_id="gpu-0001", resource_pool="gpu", slots=1, join_token="jt-gpu-0001")
    provider.launch(spec)
    provider.launch(spec)  # asked again (a restarted master): still one instance
    (made,) = instances(ec2_endpoint, "gpu")
    tags = {t["Key"]: t["Value"] for t in made["Tags"]}
    assert tags["cairn-pool"] == "gpu" and tags[INSTANCE_ID_TAG] == "gpu-0001"
    assert (tags["Name"], tags["team"]) == ("cairn-agent", "ml")
    assert made["InstanceType"] == "g5.xlarge" and made["ImageId"] == "ami-12c6146b"
    assert tags.get("aws:ec2launchtemplate:id", template["LaunchTemplateId"]) == template["LaunchTemplateId"]
    script = base64.b64decode(
        client.describe_instance_attribute(InstanceId=made["InstanceId"], Attribute="userData")["UserData"][
            "Value"
        ]
    ).decode()
    assert "--agent-id gpu-0001 --resource-pool gpu --slots 1" in script
    assert "aws ssm get-parameter" in script and "registry.internal/cairn-service:1.0 agent" in script
    # The agent enrols with the join token made for this instance, handed into its container.
    assert "export CAIRN_AGENT_JOIN_TOKEN=jt-gpu-0001" in script and "-e CAIRN_AGENT_JOIN_TOKEN" in script

    assert [(i.id, i.state) for i in provider.list()] == [("gpu-0001", ProviderState.RUNNING)]
    provider.terminate("gpu-0001")
    provider.terminate("gpu-0001")  # gone already: nothing to do
    assert all(i.state == ProviderState.STOPPED for i in provider.list())


def test_a_launch_error_carries_ec2s_message(ec2_endpoint: str) -> None:
    provider = AwsProvider(
        settings(
            ec2_endpoint,
            "broken",
            image_id="ami-12c6146b",
            instance_type="t3.micro",
            network_interface={"subnet_id": "subnet-does-not-exist"},
        )
    )
    with pytest.raises(ProviderError, match=r"RunInstances: .*subnet"):
        provider.launch(LaunchSpec(instance_id="broken-1", resource_pool="broken", slots=1))
    assert instances(ec2_endpoint, "broken") == []


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"instance_type": "t3.micro"}, "provider.image_id"),
        ({"image_id": "ami-1", "instance_type": "t3.micro", "colour": "red"}, "provider.colour"),
        ({"image_id": "ami-1", "instance_type": "t3.micro", "spot": "yes"}, "provider.spot"),
        ({"launch_template": {"version": "1"}}, "provider.launch_template"),
        (
            {"image_id": "ami-1", "instance_type": "t3.micro", "custom_tags": [{"value": "x"}]},
            "provider.custom_tags[0]",
        ),
    ],
)
def test_settings_are_checked_naming_the_field(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        AwsSettings.parse({"region": REGION, **options}, "p", "provider", "m:1")
    assert str(refused.value).startswith(f"{named}:")
