"""The `aws` provider: agents on EC2 instances (boto3), found again by their tags.

Settings (Determined's names where it has them; checked by `AwsSettings.parse`, naming the field):

    provider:
      type: aws
      region: us-west-2
      image_id: ami-0123456789abcdef0        # or launch_template: {id|name, version}
      instance_type: g5.xlarge
      instance_slots: 1                      # the agent's slots (GPUs) on one instance
      root_volume_size: 200                  # GiB
      tag_key: cairn-pool                    # the pool's instances carry tag_key=tag_value
      tag_value: gpu-pool                    # (default: the pool's name)
      instance_name: cairn-agent
      custom_tags: [{key: team, value: ml}]
      ssh_key_name: ops
      iam_instance_profile_arn: arn:aws:iam::123456789012:instance-profile/cairn-agent
      network_interface: {subnet_id: subnet-0abc, security_group_id: sg-0abc, public_ip: false}
      spot: true                             # falls back to on-demand when spot has no capacity
      spot_max_price: "0.50"
      master_address: master.internal:8090   # what the agents dial
      cluster_token_parameter: /cairn/cluster-token   # an SSM SecureString the instance role reads
      agent_docker_image: registry.internal/cairn-service:1.0   # else `cairn-agent` from the AMI
      startup_script: "echo hello"           # runs first, as root
      endpoint_url: http://127.0.0.1:5000    # another EC2 endpoint (a private one; moto in tests)

The cluster token never travels in user data (any process on the instance could read it from the
metadata service): the start-up script reads it from SSM with the instance's role, and the
instances require IMDSv2 with a hop limit of 1, so containers on bridge networks cannot reach it.

Launch is idempotent by Cairn's instance id: it is a tag (cairn-instance-id) looked up before
launching, and the EC2 ClientToken, so that a retried RunInstances never makes a second instance.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from services.common.logging import get_logger
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.provisioning.provider import (
    JOIN_TOKEN_ENV,
    LaunchSpec,
    ProviderError,
    ProviderInstance,
    ProviderState,
)

log = get_logger(__name__)

INSTANCE_ID_TAG = "cairn-instance-id"
_STATES = {
    "pending": ProviderState.STARTING,
    "running": ProviderState.RUNNING,
}
_LISTED_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]
# Errors after which an on-demand launch is tried in place of a spot one.
_SPOT_FALLBACK = {
    "InsufficientInstanceCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
}
_KEYS = {
    "region",
    "image_id",
    "launch_template",
    "instance_type",
    "root_volume_size",
    "tag_key",
    "tag_value",
    "instance_name",
    "custom_tags",
    "ssh_key_name",
    "iam_instance_profile_arn",
    "network_interface",
    "spot",
    "spot_max_price",
    "master_address",
    "cluster_token_parameter",
    "agent_docker_image",
    "agent_args",
    "startup_script",
    "endpoint_url",
}


def _text(
    options: Mapping[str, Any], key: str, where: str, *, required: bool = False, limit: int = 2048
) -> str:
    value = options.get(key)
    if value is None or value == "":
        if required:
            raise InvalidArgument(f"{where}.{key}: required")
        return ""
    if not isinstance(value, str) or len(value) > limit or "\0" in value:
        raise InvalidArgument(f"{where}.{key}: text of at most {limit} characters")
    return value


@dataclass(frozen=True)
class AwsSettings:
    region: str
    instance_type: str
    tag_key: str
    tag_value: str
    master_address: str
    image_id: str = ""
    launch_template: Mapping[str, str] = field(default_factory=dict)
    root_volume_size: int = 0
    instance_name: str = "cairn-agent"
    custom_tags: tuple[tuple[str, str], ...] = ()
    ssh_key_name: str = ""
    iam_instance_profile_arn: str = ""
    subnet_id: str = ""
    security_group_id: str = ""
    public_ip: bool = True
    spot: bool = False
    spot_max_price: str = ""
    cluster_token_parameter: str = ""
    agent_docker_image: str = ""
    agent_args: tuple[str, ...] = ()
    startup_script: str = ""
    endpoint_url: str = ""

    @classmethod
    def parse(cls, options: Mapping[str, Any], pool: str, where: str, default_master: str) -> AwsSettings:
        unknown = sorted(set(options) - _KEYS)
        if unknown:
            raise InvalidArgument(f"{where}.{unknown[0]}: not a setting of the aws provider")
        template = options.get("launch_template") or {}
        if not isinstance(template, Mapping) or set(template) - {"id", "name", "version"}:
            raise InvalidArgument(f"{where}.launch_template: a mapping of id or name, and version")
        if template and not (template.get("id") or template.get("name")):
            raise InvalidArgument(f"{where}.launch_template: give its id or its name")
        image_id = _text(options, "image_id", where)
        if not image_id and not template:
            raise InvalidArgument(f"{where}.image_id: required (or a launch_template)")
        tags = options.get("custom_tags") or []
        if not isinstance(tags, list) or len(tags) > 40:
            raise InvalidArgument(f"{where}.custom_tags: a list of at most 40 {{key, value}}")
        custom = []
        for i, tag in enumerate(tags):
            if not isinstance(tag, Mapping) or not isinstance(tag.get("key"), str) or not tag["key"]:
                raise InvalidArgument(f"{where}.custom_tags[{i}]: a mapping with key and value")
            custom.append((str(tag["key"]), str(tag.get("value", ""))))
        network = options.get("network_interface") or {}
        if not isinstance(network, Mapping) or set(network) - {"subnet_id", "security_group_id", "public_ip"}:
            raise InvalidArgument(f"{where}.network_interface: subnet_id, security_group_id, public_ip")
        volume = options.get("root_volume_size", 0)
        if isinstance(volume, bool) or not isinstance(volume, int) or not 0 <= volume <= 16384:
            raise InvalidArgument(f"{where}.root_volume_size: GiB, 0 to 16384")
        spot = options.get("spot", False)
        if not isinstance(spot, bool):
            raise InvalidArgument(f"{where}.spot: true or false")
        args = options.get("agent_args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) and len(a) < 4096 for a in args):
            raise InvalidArgument(f"{where}.agent_args: a list of strings")
        return cls(
            region=_text(options, "region", where, required=True, limit=64),
            instance_type=_text(options, "instance_type", where, required=not template, limit=64),
            tag_key=_text(options, "tag_key", where, limit=128) or "cairn-pool",
            tag_value=_text(options, "tag_value", where, limit=256) or pool,
            master_address=_text(options, "master_address", where, limit=512) or default_master,
            image_id=image_id,
            launch_template={str(k): str(v) for k, v in template.items()},
            root_volume_size=volume,
            instance_name=_text(options, "instance_name", where, limit=256) or "cairn-agent",
            custom_tags=tuple(custom),
            ssh_key_name=_text(options, "ssh_key_name", where, limit=255),
            iam_instance_profile_arn=_text(options, "iam_instance_profile_arn", where),
            subnet_id=str(network.get("subnet_id") or ""),
            security_group_id=str(network.get("security_group_id") or ""),
            public_ip=bool(network.get("public_ip", True)),
            spot=spot,
            spot_max_price=str(options.get("spot_max_price") or ""),
            cluster_token_parameter=_text(options, "cluster_token_parameter", where, limit=2048),
            agent_docker_image=_text(options, "agent_docker_image", where, limit=512),
            agent_args=tuple(args),
            startup_script=_text(options, "startup_script", where, limit=16384),
            endpoint_url=_text(options, "endpoint_url", where, limit=512),
        )


def user_data(settings: AwsSettings, spec: LaunchSpec) -> str:
    """The instance's start-up script: the user's script, the cluster token from SSM, the agent."""
    q = shlex.quote
    agent = [
        "--master",
        settings.master_address,
        "--agent-id",
        spec.instance_id,
        "--resource-pool",
        spec.resource_pool,
        "--slots",
        str(spec.slots),
        *settings.agent_args,
    ]
    lines = ["#!/bin/bash", "set -euo pipefail", settings.startup_script]
    if settings.cluster_token_parameter:
        parameter = q(settings.cluster_token_parameter)
        lines.append(
            "CAIRN_CLUSTER_TOKEN=$(aws ssm get-parameter --with-decryption --output text "
            f"--query Parameter.Value --region {q(settings.region)} --name {parameter})"
        )
        lines.append("export CAIRN_CLUSTER_TOKEN")
    if spec.join_token:
        # One-time and bound to this instance's id: used at the agent's first start, refused after.
        lines.append(f"export {JOIN_TOKEN_ENV}={q(spec.join_token)}")
    if settings.agent_docker_image:
        lines.append(
            "exec docker run --name cairn-agent --network host --restart unless-stopped "
            f"-e CAIRN_CLUSTER_TOKEN -e {JOIN_TOKEN_ENV} -v /var/run/docker.sock:/var/run/docker.sock "
            f"{q(settings.agent_docker_image)} agent {' '.join(q(a) for a in agent)}"
        )
    else:
        lines.append(f"exec cairn-agent {' '.join(q(a) for a in agent)}")
    return "\n".join(line for line in lines if line) + "\n"


class AwsProvider:
    name = "aws"

    def __init__(self, settings: AwsSettings) -> None:
        self.settings = settings
        self._ec2 = boto3.client(
            "ec2",
            region_name=settings.region,
            endpoint_url=settings.endpoint_url or None,
            # The loop retries with its own backoff: a call fails fast rather than hang a step.
            config=BotoConfig(connect_timeout=5, read_timeout=20, retries={"max_attempts": 2}),
        )

    def _find(self, instance_id: str | None = None) -> list[dict[str, Any]]:
        filters = [
            {"Name": f"tag:{self.settings.tag_key}", "Values": [self.settings.tag_value]},
            {"Name": "instance-state-name", "Values": _LISTED_STATES},
        ]
        if instance_id is not None:
            filters.append({"Name": f"tag:{INSTANCE_ID_TAG}", "Values": [instance_id]})
        found: list[dict[str, Any]] = []
        try:
            for page in self._ec2.get_paginator("describe_instances").paginate(Filters=filters):
                for reservation in page.get("Reservations", []):
                    found.extend(reservation.get("Instances", []))
        except (ClientError, BotoCoreError) as exc:
            raise ProviderError(f"DescribeInstances: {exc}") from None
        return found

    def _request(self, spec: LaunchSpec, spot: bool) -> dict[str, Any]:
        s = self.settings
        tags = [
            {"Key": "Name", "Value": s.instance_name},
            {"Key": s.tag_key, "Value": s.tag_value},
            {"Key": INSTANCE_ID_TAG, "Value": spec.instance_id},
            *({"Key": k, "Value": v} for k, v in s.custom_tags),
        ]
        request: dict[str, Any] = {
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": f"{spec.instance_id}-{'spot' if spot else 'od'}"[:64],
            "UserData": user_data(s, spec),
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            # IMDSv2 only, one hop: trial containers on bridge networks cannot reach it.
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpPutResponseHopLimit": 1,
                "HttpEndpoint": "enabled",
            },
        }
        if s.launch_template:
            template = {
                k: v
                for k, v in (
                    ("LaunchTemplateId", s.launch_template.get("id")),
                    ("LaunchTemplateName", s.launch_template.get("name")),
                )
                if v
            }
            template["Version"] = s.launch_template.get("version") or "$Default"
            request["LaunchTemplate"] = template
        if s.image_id:
            request["ImageId"] = s.image_id
        if s.instance_type:
            request["InstanceType"] = s.instance_type
        if s.root_volume_size:
            request["BlockDeviceMappings"] = [
                {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": s.root_volume_size, "VolumeType": "gp3"}}
            ]
        if s.ssh_key_name:
            request["KeyName"] = s.ssh_key_name
        if s.iam_instance_profile_arn:
            request["IamInstanceProfile"] = {"Arn": s.iam_instance_profile_arn}
        if s.subnet_id or s.security_group_id:
            interface: dict[str, Any] = {"DeviceIndex": 0, "AssociatePublicIpAddress": s.public_ip}
            if s.subnet_id:
                interface["SubnetId"] = s.subnet_id
            if s.security_group_id:
                interface["Groups"] = [s.security_group_id]
            request["NetworkInterfaces"] = [interface]
        if spot:
            options: dict[str, Any] = {"SpotInstanceType": "one-time"}
            if s.spot_max_price:
                options["MaxPrice"] = s.spot_max_price
            request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
        return request

    # ---- the contract ---------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        if self._find(spec.instance_id):
            return  # launched before (a master restart asks again): never a second one
        try:
            self._ec2.run_instances(**self._request(spec, self.settings.spot))
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if not (self.settings.spot and code in _SPOT_FALLBACK):
                raise ProviderError(f"RunInstances: {exc}") from None
            log.warning("spot launch failed; launching on demand", instance_id=spec.instance_id, error=code)
            try:
                self._ec2.run_instances(**self._request(spec, spot=False))
            except ClientError as again:
                raise ProviderError(
                    f"RunInstances (on demand, after spot failed with {code}): {again}"
                ) from None
        except BotoCoreError as exc:
            raise ProviderError(f"RunInstances: {exc}") from None
        log.info("EC2 instance launched", instance_id=spec.instance_id, pool=spec.resource_pool)

    def list(self) -> list[ProviderInstance]:
        listed = []
        for instance in self._find():
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            state = _STATES.get(instance.get("State", {}).get("Name", ""), ProviderState.STOPPED)
            listed.append(
                ProviderInstance(id=tags.get(INSTANCE_ID_TAG) or instance["InstanceId"], state=state)
            )
        return listed

    def terminate(self, instance_id: str) -> None:
        ec2_ids = [i["InstanceId"] for i in self._find(instance_id)]
        if not ec2_ids:
            # Not ours by tag: an instance adopted without one carries its EC2 id as its id.
            ec2_ids = [i["InstanceId"] for i in self._find() if i["InstanceId"] == instance_id]
        if not ec2_ids:
            return
        try:
            self._ec2.terminate_instances(InstanceIds=ec2_ids)
        except (ClientError, BotoCoreError) as exc:
            raise ProviderError(f"TerminateInstances: {exc}") from None
        log.info("EC2 instance terminated", instance_id=instance_id, ec2_ids=ec2_ids)
