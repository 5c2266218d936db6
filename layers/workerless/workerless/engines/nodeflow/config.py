"""node-flow's connection values (seed 002): NF_URL (the origin; the client appends /v1; https
unless loopback), NF_NAMESPACE (default ``default``), NF_API_KEY or NF_KEY_ID + NF_KEY_SECRET,
NF_DOMAIN (optional default domain for routes without an explicit engine queue)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from workerless.engines.kit import values as kv
from workerless.engines.kit.urls import check_base_url
from workerless.errors import ConfigurationError

__all__ = ["ENGINE", "NodeFlowConfig"]

ENGINE = "nodeflow"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, slots=True)
class NodeFlowConfig:
    """The node-flow connection values, validated (credentials never in a repr)."""

    base_url: str
    namespace: str = "default"
    api_key: str | None = field(default=None, repr=False)
    key_id: str | None = None
    key_secret: str | None = field(default=None, repr=False)
    domain: str | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> NodeFlowConfig:
        """Validate; a missing or malformed value raises ConfigurationError naming the key.

        Example:
            >>> NodeFlowConfig.from_values({"NF_URL": "http://127.0.0.1:3000/", "NF_API_KEY": "nf_1"}).base_url
            'http://127.0.0.1:3000'
        """
        url = kv.optional(values, "NF_URL")
        if url is None:
            raise ConfigurationError(
                "NF_URL is required (the node-flow origin, e.g. https://nodeflow.example.com)", key="NF_URL"
            )
        url = check_base_url("NF_URL", url, what="origin")
        if urlsplit(url).path.rstrip("/").endswith("/v1"):
            raise ConfigurationError(
                "NF_URL is the origin: drop the trailing /v1 (the client appends it)", key="NF_URL"
            )

        namespace = kv.optional(values, "NF_NAMESPACE") or "default"
        if not _NAME_RE.match(namespace):
            raise ConfigurationError(
                f"NF_NAMESPACE {namespace!r} is malformed: letters, digits, '_', '.', '-'", key="NF_NAMESPACE"
            )
        domain = kv.optional(values, "NF_DOMAIN")
        if domain is not None and not _NAME_RE.match(domain):
            raise ConfigurationError(
                f"NF_DOMAIN {domain!r} is malformed: letters, digits, '_', '.', '-'", key="NF_DOMAIN"
            )

        api_key = kv.visible_ascii(values, "NF_API_KEY")
        key_id = kv.visible_ascii(values, "NF_KEY_ID")
        key_secret = kv.visible_ascii(values, "NF_KEY_SECRET")
        if api_key is not None and (key_id is not None or key_secret is not None):
            raise ConfigurationError("set either NF_API_KEY or NF_KEY_ID + NF_KEY_SECRET, not both", key="NF_API_KEY")
        if api_key is None:
            if key_id is None and key_secret is None:
                raise ConfigurationError(
                    "node-flow needs credentials: NF_API_KEY, or NF_KEY_ID + NF_KEY_SECRET (a service account)",
                    key="NF_API_KEY",
                )
            if key_id is None:
                raise ConfigurationError("NF_KEY_ID is required with NF_KEY_SECRET", key="NF_KEY_ID")
            if key_secret is None:
                raise ConfigurationError("NF_KEY_SECRET is required with NF_KEY_ID", key="NF_KEY_SECRET")
        return cls(
            base_url=url,
            namespace=namespace,
            api_key=api_key,
            key_id=key_id,
            key_secret=key_secret,
            domain=domain,
        )
