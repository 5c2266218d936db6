"""boto3 clients for the dev tools: the developer's credentials chain, region and profile, and an
optional endpoint (a moto server, LocalStack). Built on demand, never at import."""

from __future__ import annotations

from typing import Any


def aws_client(
    service: str, *, region: str | None = None, profile: str | None = None, endpoint_url: str | None = None
) -> Any:
    """A boto3 client for ``service`` (``region`` None: the profile's or AWS_REGION's)."""
    import boto3
    from botocore.config import Config

    session: Any = boto3.session.Session(region_name=region, profile_name=profile)
    config = Config(connect_timeout=5, read_timeout=20, retries={"mode": "standard", "max_attempts": 3})
    return session.client(service, endpoint_url=endpoint_url, config=config)
