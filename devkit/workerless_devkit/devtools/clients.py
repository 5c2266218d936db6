"""boto3 clients for the dev tools: the developer's credentials chain, region and profile, and an
optional endpoint (a moto server, LocalStack). Built on demand, never at import.

A missing region, missing credentials or an unknown profile is a configuration error, said in one
line before any call is made (botocore would say it as a traceback at the first call)."""

from __future__ import annotations

import os
from typing import Any

from workerless.errors import ConfigurationError


def aws_region(region: str | None, session: Any) -> str:
    """The region a command uses: ``--region``, else AWS_REGION, else AWS_DEFAULT_REGION or the
    profile's (boto3's own lookup), as the AWS CLI orders them."""
    found = region or os.environ.get("AWS_REGION") or session.region_name
    if not found:
        raise ConfigurationError(
            "no region: pass --region, or set AWS_REGION (or AWS_DEFAULT_REGION, or the profile's region)",
            key="region",
        )
    return str(found)


def aws_client(
    service: str, *, region: str | None = None, profile: str | None = None, endpoint_url: str | None = None
) -> Any:
    """A boto3 client for ``service`` in the region :func:`aws_region` finds.

    Raises :class:`ConfigurationError` (exit 2 in the CLI) for an unknown profile, no region or no
    credentials.
    """
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ProfileNotFound

    try:
        session: Any = boto3.session.Session(region_name=region, profile_name=profile)
    except ProfileNotFound:
        raise ConfigurationError(
            f"no AWS profile named {profile!r} (see `aws configure list-profiles`)", key="profile"
        ) from None
    resolved = aws_region(region, session)
    if session.get_credentials() is None:
        raise ConfigurationError(
            "no credentials: run `aws configure` (or `aws sso login`), pass --profile, or set AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            key="credentials",
        )
    config = Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard", "max_attempts": 3})
    return session.client(service, region_name=resolved, endpoint_url=endpoint_url, config=config)
