"""AWS provisioning for a local run: what CloudFormation and IAM do before the functions run.

- :func:`create_resources` creates a template's queues (attributes, redrive to the DLQs), tables,
  SSM parameters and buckets through the same boto3 calls as in AWS, inside ``moto.mock_aws``;
- :func:`create_stack` creates a rehearsal bundle's stack on moto's CloudFormation instead and reads
  what runs back from it (:mod:`workerless_devkit.local.stack`);
- :func:`create_engine_secret` puts the env file's engine values in an embedded secret;
- :func:`iam_enforcer` renders every function's role (or takes the stack's, as created in IAM) and
  builds the check that holds each function's AWS calls to it (:mod:`workerless_devkit.local.iam`);
- :func:`serialise_moto_dynamodb_writes` makes moto's conditional writes atomic, as DynamoDB's are.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workerless.errors import ConfigurationError

from workerless_devkit.local import loop, rules
from workerless_devkit.local.iam.enforce import IamEnforcer
from workerless_devkit.local.stack.bundle import Bundle, load_bundle
from workerless_devkit.local.template import LOCAL_PLACE, LocalTemplate, Place, QueueSpec, TemplateError, load_template

if TYPE_CHECKING:
    from workerless_devkit.local.stack import StackView

log = logging.getLogger("workerless_devkit.local")


@dataclass(slots=True)
class EmbeddedAws:
    """The embedded AWS's clients a topology uses itself (its event sources, idle detection), and
    its queues by logical id and by name."""

    session: Any
    sqs: Any
    dynamodb: Any
    queue_urls: dict[str, str] = field(default_factory=dict)
    queue_by_name: dict[str, QueueSpec] = field(default_factory=dict)

    @classmethod
    def connect(cls, place: Place) -> EmbeddedAws:
        import boto3

        session = boto3.session.Session(region_name=place.region)
        config = _config()
        return cls(session, session.client("sqs", config=config), session.client("dynamodb", config=config))

    def add_queue(self, spec: QueueSpec, url: str) -> None:
        self.queue_urls[spec.logical_id] = url
        self.queue_by_name[spec.name] = spec


def _config() -> Any:
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": 3})


def create_resources(template: LocalTemplate, aws: EmbeddedAws) -> None:
    """Create the template's resources in the embedded AWS, as CloudFormation would."""
    pending = list(template.queues)
    # Dead-letter queues first: a redrive policy names its target's ARN.
    while pending:
        ready = [q for q in pending if q.dead_letter_queue_id is None or q.dead_letter_queue_id in aws.queue_urls]
        if not ready:
            raise TemplateError(f"redrive policies form a cycle: {', '.join(q.logical_id for q in pending)}")
        for spec in ready:
            _create_queue(template, aws, spec)
            pending.remove(spec)
    for table in template.tables:
        kwargs: dict[str, Any] = {
            "TableName": table.name,
            "KeySchema": list(table.key_schema),
            "AttributeDefinitions": list(table.attribute_definitions),
            "BillingMode": "PAY_PER_REQUEST",
        }
        if table.global_secondary_indexes:
            kwargs["GlobalSecondaryIndexes"] = [
                {k: v for k, v in index.items() if k != "ProvisionedThroughput"}
                for index in table.global_secondary_indexes
            ]
        aws.dynamodb.create_table(**kwargs)
        if table.ttl_attribute:
            # moto records the setting but never expires items (nor does local mode).
            aws.dynamodb.update_time_to_live(
                TableName=table.name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
            )
    if template.ssm_parameters:
        # The routes' parameters (the route loop's), as CloudFormation creates them before the
        # functions: the poller reads them with GetParametersByPath (its role checked).
        ssm = aws.session.client("ssm", config=_config())
        for parameter in template.ssm_parameters:
            ssm.put_parameter(Name=parameter.name, Value=parameter.value, Type=parameter.type, Tier=parameter.tier)
    if template.buckets:
        # The claim check's bucket (moto's S3, the same PutObject / GetObject calls as on AWS).
        # Its lifecycle rule is not emulated: nothing in a local run lives for a week.
        from workerless_devkit.local.stack.create import create_bucket

        s3 = aws.session.client("s3", config=_config())
        for bucket in template.buckets:
            create_bucket(s3, bucket.name)


def _create_queue(template: LocalTemplate, aws: EmbeddedAws, spec: QueueSpec) -> None:
    attributes = {
        "VisibilityTimeout": str(spec.visibility_timeout),
        "DelaySeconds": str(spec.delay_seconds),
        "MaximumMessageSize": str(spec.maximum_message_size),
    }
    if spec.message_retention_seconds is not None:
        attributes["MessageRetentionPeriod"] = str(spec.message_retention_seconds)
    if spec.receive_wait_seconds is not None:
        attributes["ReceiveMessageWaitTimeSeconds"] = str(spec.receive_wait_seconds)
    if spec.fifo:
        attributes["FifoQueue"] = "true"
    if spec.dead_letter_queue_id is not None:
        target = template.queue(spec.dead_letter_queue_id)
        # SQS's default maxReceiveCount is 10; the template's value is passed as written.
        max_receive = spec.max_receive_count if spec.max_receive_count is not None else 10
        attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": target.arn, "maxReceiveCount": max_receive})
    url = aws.sqs.create_queue(QueueName=spec.name, Attributes=attributes)["QueueUrl"]
    if loop.queue_name_of(url) != spec.name:  # pragma: no cover - moto names queues as asked
        raise TemplateError(f"{spec.logical_id}: embedded SQS created {url}, expected a queue named {spec.name}")
    aws.add_queue(spec, url)


def create_stack(bundle: Bundle, place: Place, parameters: dict[str, str]) -> tuple[StackView, Path]:
    """Create the bundle's stack in the mock; returns it, read back, and the directory its code was
    unpacked to (the caller removes it at stop)."""
    import boto3

    from workerless_devkit.local.stack import load_stack

    session = boto3.session.Session(region_name=place.region)
    code_dir = Path(tempfile.mkdtemp(prefix=f"workerless-{bundle.stack_name}-"))
    started = time.monotonic()
    stack = load_stack(bundle, session, code_dir, parameters=parameters)
    template = stack.template
    log.info(
        "stack %s created from %s in %.1f s: %d functions, %d queues; not created by moto's CloudFormation: %s",
        bundle.stack_name,
        bundle.transformed_path,
        time.monotonic() - started,
        len(template.functions),
        len(template.queues),
        ", ".join(sorted(stack.created.skipped)) or "-",
    )
    return stack, code_dir


def stack_aws(template: LocalTemplate, place: Place) -> EmbeddedAws:
    """The clients and queues of a stack that CloudFormation created (a bundle's)."""
    aws = EmbeddedAws.connect(place)
    for queue in template.queues:
        aws.add_queue(queue, queue.url)
    return aws


def create_engine_secret(place: Place, stack_name: str, env_file: Path) -> str:
    """The env file's engine values as an embedded secret, named to the functions as in AWS; its ARN."""
    import boto3

    client: Any = boto3.session.Session(region_name=place.region).client("secretsmanager")
    answer = client.create_secret(Name=f"{stack_name}/engine", SecretString=env_file.read_text(encoding="utf-8"))
    return str(answer["ARN"])


def iam_enforcer(
    template: LocalTemplate, place: Place, stack: StackView | None, secret_arn: str | None, stack_name: str
) -> IamEnforcer:
    """Render every function's role and warn about what AWS would, before anything runs."""
    from workerless_devkit.local.iam.roles import render_roles, secret_parameter

    def embedded(secret_id: str) -> str | None:
        return embedded_secret_arn(secret_id, place)

    # Each table's partition key: what DynamoDB puts in a call's dynamodb:LeadingKeys.
    partition_keys = {
        table.arn: key["AttributeName"]
        for table in template.tables
        for key in table.key_schema
        if key.get("KeyType") == "HASH"
    }
    if stack is not None:  # a bundle's: the roles as created in IAM
        enforcer = IamEnforcer(stack.roles, secret_arn=embedded, place=place, partition_keys=partition_keys)
    else:
        overrides: dict[str, str] = {}
        if secret_arn is not None:
            name = secret_parameter(template)
            if name is None:
                raise TemplateError(
                    "engine_secret: the functions' WORKERLESS_SECRET_ARN must be !Ref of a template parameter, "
                    "so that their roles can name the secret"
                )
            overrides[name] = secret_arn
        roles = render_roles(template, parameters=overrides, stack_name=stack_name)
        enforcer = IamEnforcer(roles, secret_arn=embedded, place=place, partition_keys=partition_keys)
    for warning in enforcer.check_platform(template):
        log.warning("IAM: %s", warning)
    return enforcer


def embedded_secret_arn(secret_id: str, place: Place = LOCAL_PLACE) -> str | None:
    """The full ARN of the embedded Secrets Manager's secret (in ``place``) named or ARN'd
    ``secret_id``, if any."""
    try:
        from moto.secretsmanager.models import secretsmanager_backends

        secret = secretsmanager_backends[place.account_id][place.region].secrets.get(secret_id)
    except Exception:  # noqa: BLE001 - unknown to moto (or moto changed): evaluated as given
        return None
    return str(secret.arn) if secret is not None else None


moto_write_lock = threading.RLock()


def serialise_moto_dynamodb_writes() -> None:
    """Make moto's DynamoDB writes atomic, as DynamoDB's are.

    DynamoDB applies a conditional write atomically per item. moto checks the condition and then
    writes, in two Python steps: two threads can both pass the check. Local mode runs every
    function in threads of one process, so without this a claim could be won twice (measured: 42
    of 500 racing claim pairs with a short thread switch interval) — a fault of the emulation, not
    of the pipeline. Idempotent; affects only the in-process moto backend.
    """
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_workerless_serialised", False):
        return
    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"):
        original = getattr(DynamoDBBackend, name)

        def locked(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with moto_write_lock:
                return __original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, functools.wraps(original)(locked))
    DynamoDBBackend._workerless_serialised = True  # type: ignore[attr-defined]


def install_emulation() -> None:
    """The process-wide patches local mode's embedded AWS needs (idempotent): the loop and IAM
    hooks on every botocore client, AWS's limits where moto is lenient, SQS's approximate counts,
    and DynamoDB's atomic conditional writes."""
    from workerless_devkit.local import limits, sqs_lag

    loop.install_hooks()
    limits.install_hooks()
    sqs_lag.install_hooks()  # before the client cache is cleared: every client has it
    limits.check_update_item_size(moto_write_lock)
    limits.precise_long_polls()
    serialise_moto_dynamodb_writes()


def open_stack(
    template_path: str | Path | None,
    bundle: str | Path | None,
    parameters: Mapping[str, str] | None,
    route_settings: Mapping[str, Mapping[str, Any]] | None,
    *,
    stack_name: str,
    engine_secret: bool,
) -> tuple[LocalTemplate | None, Bundle | None, str, Place]:
    """What a topology runs: a template (loaded, and held to AWS's rules now) or a rehearsal bundle
    (its stack, and with it what runs, exists once created in the mock at start); with the stack's
    name and place."""
    if (template_path is None) == (bundle is None):
        raise ConfigurationError("LocalTopology runs a template or a rehearsal bundle: give exactly one")
    if bundle is not None:
        loaded = load_bundle(bundle)
        if engine_secret:
            raise ConfigurationError(
                "engine_secret is not supported with a bundle: its roles name the bundle's EngineSecretArn",
                key="engine_secret",
            )
        if route_settings:
            raise ConfigurationError(
                "route_settings is not supported with a bundle: its stack was transformed with its own routes",
                key="route_settings",
            )
        return None, loaded, loaded.stack_name, loaded.place
    assert template_path is not None
    template = load_template(template_path, parameters=parameters, route_settings=route_settings, stack_name=stack_name)
    # What AWS would refuse to deploy must not run locally either.
    rules.check_template(template)
    return template, None, stack_name, template.place
