"""The AWS managed policies SAM attaches to the roles it generates, bundled (no IAM call).

SAM's generated role for a function always gets AWSLambdaBasicExecutionRole; an SQS event adds
AWSLambdaSQSQueueExecutionRole, ``Tracing: Active`` adds AWSXRayDaemonWriteAccess and a VpcConfig
AWSLambdaVPCAccessExecutionRole. Their documents (default versions as AWS publishes them) are copied
here so that local mode can evaluate them offline. Any other managed policy ARN is an error naming it:
local mode cannot know what it allows.
"""

from __future__ import annotations

from typing import Any

_LOGS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]

#: Managed policy name -> its policy document.
MANAGED_POLICIES: dict[str, dict[str, Any]] = {
    "AWSLambdaBasicExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": _LOGS, "Resource": "*"}],
    },
    "AWSLambdaSQSQueueExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", *_LOGS],
                "Resource": "*",
            }
        ],
    },
    "AWSXRayDaemonWriteAccess": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    "xray:PutTraceSegments",
                    "xray:PutTelemetryRecords",
                    "xray:GetSamplingRules",
                    "xray:GetSamplingTargets",
                    "xray:GetSamplingStatisticSummaries",
                ],
                "Resource": ["*"],
            }
        ],
    },
    "AWSLambdaVPCAccessExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    *_LOGS,
                    "ec2:CreateNetworkInterface",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSubnets",
                    "ec2:DeleteNetworkInterface",
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                "Resource": "*",
            }
        ],
    },
}


def managed_policy(arn: str) -> dict[str, Any] | None:
    """The document of an AWS managed policy (``arn:aws:iam::aws:policy/...``) bundled here, else None."""
    prefix, _, name = arn.rpartition("/")
    if not prefix.startswith("arn:") or ":iam::aws:policy" not in prefix:
        return None
    return MANAGED_POLICIES.get(name)
