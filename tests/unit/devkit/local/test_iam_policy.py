"""Local mode's IAM evaluation (workerless_devkit.local.iam): the evaluator, what each call needs, and the
roles rendered from a template by the SAM translator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workerless_devkit.local.iam.calls import UNMODELLED, Need, listing, needs, sqs_queue_arn
from workerless_devkit.local.iam.policy import (
    PolicyError,
    action_matches,
    evaluate,
    parse_statements,
    resource_matches,
)
from workerless_devkit.local.iam.roles import render_roles
from workerless_devkit.local.template import TemplateError, load_template

QUEUE = "arn:aws:sqs:us-east-1:123456789012:jobs"
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/records"


def statements(*items: dict[str, Any]) -> Any:
    return parse_statements({"Version": "2012-10-17", "Statement": list(items)}, "test")


def allow(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


# ---------------------------------------------------------------- matching


@pytest.mark.parametrize(
    ("pattern", "action", "expected"),
    [
        ("sqs:SendMessage", "sqs:SendMessage", True),
        ("sqs:sendmessage", "sqs:SendMessage", True),  # actions are case-insensitive
        ("SQS:SendMessage", "sqs:SendMessage", True),
        ("sqs:Send*", "sqs:SendMessage", True),
        ("sqs:*", "sqs:DeleteMessage", True),
        ("*", "dynamodb:GetItem", True),
        ("sqs:SendMessage", "sqs:SendMessageBatch", False),  # the call name is mapped first (calls.py)
        ("sqs:Get?ueueAttributes", "sqs:GetQueueAttributes", True),
        ("sqs:Get?QueueAttributes", "sqs:GetQueueAttributes", False),  # ? is exactly one character
        ("dynamodb:GetItem", "dynamodb:GetItems", False),  # the whole action, not a prefix
        ("sqs:SendMessage", "sns:SendMessage", False),
    ],
)
def test_action_matching(pattern: str, action: str, expected: bool) -> None:
    assert action_matches(pattern, action) is expected


@pytest.mark.parametrize(
    ("pattern", "arn", "expected"),
    [
        ("*", QUEUE, True),
        (QUEUE, QUEUE, True),
        ("arn:aws:sqs:us-east-1:123456789012:Jobs", QUEUE, False),  # ARNs are case-sensitive
        ("arn:aws:sqs:*:123456789012:jobs", QUEUE, True),
        ("arn:aws:sqs:us-east-1:123456789012:jo?s", QUEUE, True),
        ("arn:aws:sqs:us-east-1:123456789012:j*", QUEUE, True),
        ("arn:aws:sqs:us-east-1:123456789012:job", QUEUE, False),
        # A log group's Arn attribute ends in ":*": its streams (the * runs across the colons).
        (
            "arn:aws:logs:us-east-1:123456789012:log-group:fn:*",
            "arn:aws:logs:us-east-1:123456789012:log-group:fn:log-stream:2025/01/01/[$LATEST]abc",
            True,
        ),
        (
            "arn:aws:logs:us-east-1:123456789012:log-group:fn:*",
            "arn:aws:logs:us-east-1:123456789012:log-group:fn-other:log-stream:x",
            False,
        ),
        # Mid-segment, a wildcard stays in its segment.
        ("arn:aws:sqs:us-*-1:123456789012:jobs", "arn:aws:sqs:us-east:x-1:123456789012:jobs", False),
        (f"{TABLE}/index/*", f"{TABLE}/index/by-type", True),
        (TABLE, f"{TABLE}/index/by-type", False),  # an index needs its own grant
        ("", QUEUE, False),  # a parameter left empty names nothing
    ],
)
def test_resource_matching(pattern: str, arn: str, expected: bool) -> None:
    assert resource_matches(pattern, arn) is expected


# ---------------------------------------------------------------- evaluation


def test_an_allow_that_matches_allows_and_nothing_else_does() -> None:
    policy = statements(allow(["sqs:SendMessage"], [QUEUE]))
    assert evaluate(policy, "sqs:SendMessage", QUEUE).allowed
    denied = evaluate(policy, "sqs:DeleteMessage", QUEUE)
    assert not denied.allowed and not denied.explicit_deny and denied.statement is None
    assert not evaluate(policy, "sqs:SendMessage", QUEUE + "-dlq").allowed


def test_an_explicit_deny_beats_any_allow() -> None:
    policy = statements(allow("sqs:*", "*"), deny("sqs:DeleteMessage", QUEUE, Sid="NoDelete"))
    decision = evaluate(policy, "sqs:DeleteMessage", QUEUE)
    assert not decision.allowed and decision.explicit_deny
    assert decision.statement is not None and decision.statement.sid == "NoDelete"
    assert evaluate(policy, "sqs:SendMessage", QUEUE).allowed


def test_not_action_and_not_resource() -> None:
    policy = statements(
        {"Effect": "Allow", "NotAction": "sqs:DeleteMessage", "Resource": QUEUE},
        {"Effect": "Allow", "Action": "dynamodb:GetItem", "NotResource": TABLE},
    )
    assert evaluate(policy, "sqs:SendMessage", QUEUE).allowed
    assert not evaluate(policy, "sqs:DeleteMessage", QUEUE).allowed
    assert not evaluate(policy, "dynamodb:GetItem", TABLE).allowed
    assert evaluate(policy, "dynamodb:GetItem", TABLE + "-other").allowed


def test_a_condition_local_mode_cannot_evaluate_never_allows_and_always_denies() -> None:
    condition = {"Condition": {"Bool": {"aws:SecureTransport": "true"}}}
    assert not evaluate(statements(allow("sqs:SendMessage", QUEUE, **condition)), "sqs:SendMessage", QUEUE).allowed
    both = statements(allow("sqs:SendMessage", QUEUE), deny("sqs:*", "*", **condition))
    decision = evaluate(both, "sqs:SendMessage", QUEUE)
    assert not decision.allowed and decision.explicit_deny


def leading(*keys: str) -> dict[str, tuple[str, ...]]:
    """A DynamoDB item call's request context: the partition key values it touches."""
    return {"dynamodb:leadingkeys": keys}


def own_route(operator: str = "ForAllValues:StringLike", *patterns: str) -> Any:
    return statements(
        allow(
            ["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Scan"],
            TABLE,
            Condition={operator: {"dynamodb:LeadingKeys": list(patterns or ("job#charge-payment#*",))}},
        )
    )


def test_leading_keys_hold_a_role_to_its_own_partition_keys_as_iam_does() -> None:
    """ForAllValues:StringLike on dynamodb:LeadingKeys (AWS's "Using IAM policy conditions for
    fine-grained access control"): every partition key the call touches must match a pattern."""
    policy = own_route()
    assert evaluate(policy, "dynamodb:GetItem", TABLE, leading("job#charge-payment#sheptra#1")).allowed
    assert not evaluate(policy, "dynamodb:GetItem", TABLE, leading("job#send-receipt#sheptra#1")).allowed
    assert not evaluate(policy, "dynamodb:GetItem", TABLE, leading("state#poller-lock")).allowed
    # A batch: all of its keys, not some.
    both = leading("job#charge-payment#sheptra#1", "job#send-receipt#sheptra#2")
    assert not evaluate(policy, "dynamodb:BatchGetItem", TABLE, both).allowed
    # StringLike is case-sensitive, and * runs across any character (no ARN segments here).
    assert not evaluate(policy, "dynamodb:GetItem", TABLE, leading("JOB#charge-payment#x")).allowed
    assert evaluate(policy, "dynamodb:GetItem", TABLE, leading("job#charge-payment#a:b/c#d")).allowed
    # A call with no leading key (a Scan): ForAllValues holds on an empty set, as IAM documents;
    # this is why no role may be granted Scan beside a LeadingKeys condition.
    assert evaluate(policy, "dynamodb:Scan", TABLE, {}).allowed
    # Context unknown (local mode could not tell the keys): never allowed.
    assert not evaluate(policy, "dynamodb:GetItem", TABLE, None).allowed


@pytest.mark.parametrize(
    ("operator", "patterns", "keys", "expected"),
    [
        ("ForAllValues:StringEquals", ("a", "b"), ("a", "b"), True),
        ("ForAllValues:StringEquals", ("a",), ("a", "b"), False),
        ("ForAllValues:StringEquals", ("a",), (), True),  # no key in the request: true
        ("ForAnyValue:StringEquals", ("a",), ("a", "b"), True),
        ("ForAnyValue:StringEquals", ("a",), (), False),  # no key: false
        ("ForAllValues:StringNotLike", ("state#*",), ("job#x",), True),
        ("ForAllValues:StringNotLike", ("state#*",), ("job#x", "state#lock"), False),
        ("StringEquals", ("a", "b"), ("b",), True),  # one value, no set operator: values OR
        ("StringEquals", ("a",), (), False),  # absent: a positive operator fails
        ("StringNotEquals", ("a",), (), True),  # ... and a negated one holds
        ("StringEqualsIfExists", ("a",), (), True),
        ("StringEqualsIgnoreCase", ("ABC",), ("abc",), True),
        ("StringLike", ("a?c",), ("abc",), True),
        ("StringLike", ("a?c",), ("abbc",), False),
        ("Null", ("true",), (), True),
        ("Null", ("false",), (), False),
        ("Null", ("false",), ("a",), True),
    ],
)
def test_condition_operators_and_set_operators(
    operator: str, patterns: tuple[str, ...], keys: tuple[str, ...], expected: bool
) -> None:
    policy = own_route(operator, *patterns)
    context = leading(*keys) if keys else {}
    assert evaluate(policy, "dynamodb:GetItem", TABLE, context).allowed is expected


def test_a_conditional_deny_applies_only_where_its_condition_holds() -> None:
    """The poller lock kept from a role that may touch the rest of the table: a Deny on state#* keys."""
    policy = statements(
        allow("dynamodb:GetItem", TABLE),
        deny("dynamodb:GetItem", TABLE, Condition={"ForAnyValue:StringLike": {"dynamodb:LeadingKeys": "state#*"}}),
    )
    assert evaluate(policy, "dynamodb:GetItem", TABLE, leading("job#a#1")).allowed
    refused = evaluate(policy, "dynamodb:GetItem", TABLE, leading("state#poller-lock"))
    assert not refused.allowed and refused.explicit_deny
    # Unknown context: the Deny is taken to apply (stricter than AWS at worst).
    assert evaluate(policy, "dynamodb:GetItem", TABLE, None).explicit_deny


def test_an_unevaluable_condition_is_unknown() -> None:
    """Several values without a set operator, a policy variable, an unmodelled operator: never allow."""
    for condition in (
        {"StringEquals": {"dynamodb:LeadingKeys": "a"}},  # with two keys in the request
        {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": "${aws:userid}"}},
        {"ForAllValues:NumericEquals": {"dynamodb:LeadingKeys": "1"}},
    ):
        policy = statements(allow("dynamodb:GetItem", TABLE, Condition=condition))
        assert not evaluate(policy, "dynamodb:GetItem", TABLE, leading("a", "b")).allowed, condition


def test_dynamodb_item_calls_carry_their_leading_keys() -> None:
    """What DynamoDB puts in dynamodb:LeadingKeys: the Key's or the Item's partition key value; every
    key of a batch; a Query's partition key equality; none for a Scan."""
    pk = {TABLE: "pk"}.get

    def keys(operation: str, params: dict[str, Any]) -> list[tuple[str, ...] | None]:
        found = needs("dynamodb", operation, {"TableName": "records", **params}, partition_key=pk)
        return [None if n.context is None else n.leading_keys for n in found]

    key = {"pk": {"S": "job#t#1"}}
    assert keys("GetItem", {"Key": key}) == [("job#t#1",)]
    assert keys("UpdateItem", {"Key": key}) == [("job#t#1",)]
    assert keys("DeleteItem", {"Key": key}) == [("job#t#1",)]
    assert keys("PutItem", {"Item": {**key, "status": {"S": "claimed"}}}) == [("job#t#1",)]
    assert keys("Scan", {}) == [()]
    query = {"KeyConditionExpression": "#k = :v", "ExpressionAttributeNames": {"#k": "pk"}}
    assert keys("Query", {**query, "ExpressionAttributeValues": {":v": {"S": "job#t#1"}}}) == [("job#t#1",)]
    assert keys("Query", {"IndexName": "i", "KeyConditionExpression": "x = :v"}) == [None]
    assert keys("ExecuteStatement", {"Statement": "SELECT * FROM records"}) == [None]
    batch = needs(
        "dynamodb",
        "BatchGetItem",
        {"RequestItems": {"records": {"Keys": [key, {"pk": {"S": "state#poller-lock"}}]}}},
        partition_key=pk,
    )
    assert [n.leading_keys for n in batch] == [("job#t#1", "state#poller-lock")]
    writes = needs(
        "dynamodb",
        "BatchWriteItem",
        {"RequestItems": {"records": [{"PutRequest": {"Item": key}}, {"DeleteRequest": {"Key": {"pk": {"S": "x"}}}}]}},
        partition_key=pk,
    )
    assert [n.leading_keys for n in writes] == [("job#t#1", "x")]
    transact = needs(
        "dynamodb",
        "TransactWriteItems",
        {
            "TransactItems": [
                {"Put": {"TableName": "records", "Item": key}},
                {"Update": {"TableName": "records", "Key": key}},
            ]
        },
        partition_key=pk,
    )
    assert [(n.action, n.leading_keys) for n in transact] == [
        ("dynamodb:PutItem", ("job#t#1",)),
        ("dynamodb:UpdateItem", ("job#t#1",)),
    ]
    # An Item of a table whose key local mode does not know: unknown (a condition on it never allows).
    unknown = needs("dynamodb", "PutItem", {"TableName": "other", "Item": {"pk": {"S": "a"}, "b": {"S": "c"}}})
    assert unknown[0].context is None


def test_an_unmodelled_resource_compares_actions_only() -> None:
    policy = statements(allow("s3:GetObject", "arn:aws:s3:::bucket/*"))
    assert evaluate(policy, "s3:GetObject", None).allowed
    assert not evaluate(policy, "s3:PutObject", None).allowed


@pytest.mark.parametrize(
    ("statement", "problem"),
    [
        ({"Action": "sqs:SendMessage", "Resource": QUEUE}, "Effect"),
        ({"Effect": "Allow", "Resource": QUEUE}, "Action or NotAction"),
        ({"Effect": "Allow", "Action": "sqs:SendMessage"}, "Resource or NotResource"),
        ({"Effect": "Allow", "Action": "a:b", "NotAction": "a:c", "Resource": QUEUE}, "exactly one"),
        ({"Effect": "Allow", "Action": {"Ref": "X"}, "Resource": QUEUE}, "expected a string"),
        ({"Effect": "Allow", "Action": [], "Resource": QUEUE}, "empty list"),
    ],
)
def test_a_statement_iam_would_reject_is_an_error_naming_it(statement: dict[str, Any], problem: str) -> None:
    with pytest.raises(PolicyError, match=problem) as caught:
        parse_statements({"Statement": [statement]}, "MyRole/inline")
    assert "MyRole/inline" in str(caught.value)


# ---------------------------------------------------------------- what a call needs


def test_sqs_batch_calls_are_authorised_as_their_single_actions() -> None:
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
    assert sqs_queue_arn(url) == QUEUE
    for operation, action in (
        ("SendMessage", "sqs:SendMessage"),
        ("SendMessageBatch", "sqs:SendMessage"),
        ("DeleteMessageBatch", "sqs:DeleteMessage"),
        ("ChangeMessageVisibilityBatch", "sqs:ChangeMessageVisibility"),
        ("GetQueueAttributes", "sqs:GetQueueAttributes"),
    ):
        assert needs("sqs", operation, {"QueueUrl": url}) == [Need(action, QUEUE, QUEUE)]
    assert needs("sqs", "GetQueueUrl", {"QueueName": "jobs"}) == [Need("sqs:GetQueueUrl", QUEUE, QUEUE)]
    assert needs("sqs", "ListQueues", {}) == [Need("sqs:ListQueues", "*", "*")]


def test_dynamodb_batch_and_transact_calls_are_checked_per_table_and_contained_action() -> None:
    other = "arn:aws:dynamodb:us-east-1:123456789012:table/other"
    batch = needs("dynamodb", "BatchGetItem", {"RequestItems": {"records": {}, "other": {}}})
    assert [(n.action, n.resource) for n in batch] == [
        ("dynamodb:BatchGetItem", TABLE),
        ("dynamodb:BatchGetItem", other),
    ]
    assert [(n.action, n.resource) for n in needs("dynamodb", "BatchWriteItem", {"RequestItems": {"records": []}})] == [
        ("dynamodb:BatchWriteItem", TABLE)
    ]
    transact = needs(
        "dynamodb",
        "TransactWriteItems",
        {
            "TransactItems": [
                {"Put": {"TableName": "records"}},
                {"Update": {"TableName": "other"}},
                {"Delete": {"TableName": "records"}},
                {"ConditionCheck": {"TableName": "other"}},
            ]
        },
    )
    assert [(n.action, n.resource) for n in transact] == [
        ("dynamodb:PutItem", TABLE),
        ("dynamodb:UpdateItem", other),
        ("dynamodb:DeleteItem", TABLE),
        ("dynamodb:ConditionCheckItem", other),
    ]
    got = needs("dynamodb", "TransactGetItems", {"TransactItems": [{"Get": {"TableName": "other"}}]})
    assert [(n.action, n.resource) for n in got] == [("dynamodb:GetItem", other)]


def test_dynamodb_query_on_an_index_needs_the_index_and_a_table_arn_is_accepted_as_name() -> None:
    assert needs("dynamodb", "Query", {"TableName": "records", "IndexName": "by-type"})[0].resource == (
        f"{TABLE}/index/by-type"
    )
    assert needs("dynamodb", "Scan", {"TableName": "records"})[0].resource == TABLE
    assert needs("dynamodb", "GetItem", {"TableName": TABLE})[0].resource == TABLE


def test_a_secret_is_evaluated_by_its_full_arn_and_shown_as_given() -> None:
    full = "arn:aws:secretsmanager:us-east-1:123456789012:secret:engine-AbCdEf"
    known = {"engine": full, full: full}
    (by_name,) = needs("secretsmanager", "GetSecretValue", {"SecretId": "engine"}, secret_arn=known.get)
    assert (by_name.resource, by_name.shown) == (full, "engine")
    (by_arn,) = needs("secretsmanager", "GetSecretValue", {"SecretId": full}, secret_arn=known.get)
    assert (by_arn.resource, by_arn.shown) == (full, full)
    (unknown,) = needs("secretsmanager", "GetSecretValue", {"SecretId": "nope"}, secret_arn=known.get)
    assert unknown.resource == "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope"


def test_s3_calls_are_checked_on_the_object_or_the_bucket() -> None:
    """The claim check's calls name the object (arn:aws:s3:::bucket/key), as IAM evaluates them, so a
    grant of one prefix (bucket/jobs/charge-payment/*) does not cover another."""
    arn, bucket = "arn:aws:s3:::b/jobs/t/k", "arn:aws:s3:::b"
    assert needs("s3", "GetObject", {"Bucket": "b", "Key": "jobs/t/k"}) == [Need("s3:GetObject", arn, arn, ())]
    assert needs("s3", "HeadObject", {"Bucket": "b", "Key": "jobs/t/k"}) == [Need("s3:GetObject", arn, arn, ())]
    assert needs("s3", "ListObjectsV2", {"Bucket": "b"}) == [Need("s3:ListBucket", bucket, bucket, ())]
    assert resource_matches("arn:aws:s3:::b/jobs/t/*", arn)
    assert not resource_matches("arn:aws:s3:::b/jobs/other/*", arn)


def test_a_listing_is_held_to_its_prefix_and_a_missing_key_is_listed_under_its_own_name() -> None:
    """s3:ListBucket held by s3:prefix (StringLike results/*): a listing of results/... is allowed, one
    of jobs/... or of the whole bucket (no Prefix: the key absent) is not; S3's check before it
    answers NoSuchKey asks the same with the key as s3:prefix (calls.listing)."""
    [statement] = parse_statements(
        {
            "Statement": {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": "arn:aws:s3:::b",
                "Condition": {"StringLike": {"s3:prefix": "results/*"}},
            }
        },
        "doc",
    )

    def allowed(need: Need) -> bool:
        return evaluate([statement], need.action, need.resource, need.condition_context).allowed

    (inside,) = needs("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "results/t/"})
    (outside,) = needs("s3", "ListObjectsV2", {"Bucket": "b", "Prefix": "jobs/t/"})
    (whole,) = needs("s3", "ListObjectsV2", {"Bucket": "b"})
    assert (allowed(inside), allowed(outside), allowed(whole)) == (True, False, False)
    assert allowed(listing("b", "results/t/k")) and not allowed(listing("b", "jobs/t/k"))
    assert listing("b", "results/t/k") == Need(
        "s3:ListBucket", "arn:aws:s3:::b", "arn:aws:s3:::b", (("s3:prefix", ("results/t/k",)),)
    )


def test_other_services_are_checked_by_action_and_sts_identity_needs_nothing() -> None:
    assert needs("lambda", "Invoke", {"FunctionName": "f"}) == [Need("lambda:Invoke", UNMODELLED, "*")]
    assert needs("sts", "GetCallerIdentity", {}) == []


# ---------------------------------------------------------------- roles from a template

TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Parameters:
  Extra:
    Type: String
    Default: ""
Resources:
  Jobs:
    Type: AWS::SQS::Queue
  Records:
    Type: AWS::DynamoDB::Table
    Properties:
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
  Generated:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: fn/
      Handler: app.handler
      Runtime: python3.12
      Policies:
        - DynamoDBReadPolicy:
            TableName: !Ref Records
        - Statement:
            - Effect: Deny
              Action: dynamodb:Scan
              Resource: !GetAtt Records.Arn
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Jobs.Arn
  OwnRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Statement: [{Effect: Allow, Principal: {Service: lambda.amazonaws.com}, Action: sts:AssumeRole}]
      Policies:
        - PolicyName: own
          PolicyDocument:
            Statement:
              - Effect: Allow
                Action: sqs:SendMessage
                Resource: !GetAtt Jobs.Arn
              - Effect: Allow
                Action: [logs:CreateLogStream, logs:PutLogEvents]
                Resource: !GetAtt OwnLogs.Arn
  Attached:
    Type: AWS::IAM::Policy
    Properties:
      PolicyName: attached
      Roles: [!Ref OwnRole]
      PolicyDocument:
        Statement:
          - Effect: Allow
            Action: dynamodb:PutItem
            Resource: !Sub "${Records.Arn}"
  OwnLogs:
    Type: AWS::Logs::LogGroup
  Explicit:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: fn/
      Handler: app.handler
      Runtime: python3.12
      Role: !GetAtt OwnRole.Arn
      LoggingConfig:
        LogGroup: !Ref OwnLogs
"""


def _roles(tmp_path: Path, text: str = TEMPLATE) -> Any:
    (tmp_path / "fn").mkdir(exist_ok=True)
    (tmp_path / "template.yaml").write_text(text)
    return render_roles(load_template(tmp_path / "template.yaml"))


def test_a_function_without_role_gets_sams_generated_role_with_its_managed_policies(tmp_path: Path) -> None:
    role = _roles(tmp_path)["Generated"]
    assert role.generated and role.role_id == "GeneratedRole"
    assert role.principal == (
        "arn:aws:sts::123456789012:assumed-role/workerless-local-GeneratedRole/workerless-local-Generated"
    )
    # DynamoDBReadPolicy (a SAM policy template), resolved to local mode's table ARN.
    assert role.decide("dynamodb:GetItem", f"{TABLE.rsplit('/', 1)[0]}/workerless-local-Records").allowed
    assert not role.decide("dynamodb:PutItem", f"{TABLE.rsplit('/', 1)[0]}/workerless-local-Records").allowed
    # The inline Deny beats the template's Scan allow.
    assert role.decide("dynamodb:Scan", f"{TABLE.rsplit('/', 1)[0]}/workerless-local-Records").explicit_deny
    # AWSLambdaBasicExecutionRole and AWSLambdaSQSQueueExecutionRole: logs and receive on "*".
    assert role.decide("logs:CreateLogGroup", "arn:aws:logs:us-east-1:123456789012:log-group:x").allowed
    assert role.decide("sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:123456789012:anything").allowed
    assert not role.decide("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:anything").allowed
    assert role.log_group == "/aws/lambda/workerless-local-Generated" and not role.log_group_in_template


def test_a_function_with_role_gets_its_inline_and_attached_policies(tmp_path: Path) -> None:
    role = _roles(tmp_path)["Explicit"]
    assert not role.generated and role.role_name == "workerless-local-OwnRole"
    assert role.decide("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:workerless-local-Jobs").allowed
    table = "arn:aws:dynamodb:us-east-1:123456789012:table/workerless-local-Records"
    assert role.decide("dynamodb:PutItem", table).allowed  # from the attached AWS::IAM::Policy
    assert not role.decide("dynamodb:GetItem", table).allowed
    stream = "arn:aws:logs:us-east-1:123456789012:log-group:workerless-local-OwnLogs:log-stream:s"
    assert role.decide("logs:PutLogEvents", stream).allowed
    assert role.log_group == "workerless-local-OwnLogs" and role.log_group_in_template


def test_a_role_that_is_not_in_the_template_or_an_unknown_managed_policy_is_an_error(tmp_path: Path) -> None:
    outside = TEMPLATE.replace("Role: !GetAtt OwnRole.Arn", "Role: arn:aws:iam::123456789012:role/elsewhere")
    with pytest.raises(TemplateError, match="not a role of this template"):
        _roles(tmp_path, outside)
    own = "      Policies:\n        - PolicyName: own"
    managed = TEMPLATE.replace(own, "      ManagedPolicyArns: [arn:aws:iam::aws:policy/AmazonSQSFullAccess]\n" + own)
    with pytest.raises(TemplateError, match="AmazonSQSFullAccess"):
        _roles(tmp_path, managed)


def test_a_scaffolded_job_types_role_grants_what_the_shipped_handlers_roles_grant(tmp_path: Path) -> None:
    """GIVEN template.yaml with a job type added by `workerless new-handler` WHEN the roles are rendered
    THEN the new handler's role has the same statements as charge-payment's, on its own queue and log
    group: the scaffold's copy of the role cannot drift from the template's (the drift test measures
    the template's)."""
    from workerless_devkit.devtools.scaffold import add_job_type

    root = Path(__file__).resolve().parents[4]
    text, _ = add_job_type((root / "template.yaml").read_text(encoding="utf-8"), "zz-probe")
    (tmp_path / "template.yaml").write_text(text, encoding="utf-8")
    roles = render_roles(load_template(tmp_path / "template.yaml"))

    def shape(function: str, own: str, job_type: str) -> list[tuple[str | None, tuple[str, ...], tuple[str, ...]]]:
        return [
            (s.sid, s.actions, tuple(r.replace(own, "<own>").replace(f"/{job_type}/", "/<type>/") for r in s.resources))
            for s in roles[function].statements
        ]

    assert shape("zzprobeFunction", "zzprobe", "zz-probe") == shape(
        "chargepaymentFunction", "chargepayment", "charge-payment"
    )
