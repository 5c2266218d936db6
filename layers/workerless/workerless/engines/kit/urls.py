"""URL rules every engine adapter applies to its configured and discovered addresses.

Tokens, API keys and session tokens travel on these connections, so one rule holds for all three
engines (docs/assumptions.md, "One engine kit"): https, or plain http to loopback only; no
credentials, query or fragment in a base URL. A URL an engine *answers* (Sheptra's discovery
``baseUrl``) is also refused when it points at a link-local or cloud metadata address (the SSRF
guard: a bearer token must never reach the instance metadata service).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from workerless.errors import ConfigurationError

__all__ = ["check_base_url", "is_loopback", "refused_answered_url"]

_METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_METADATA_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local: AWS/GCP/Azure IMDS, ECS task metadata
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS IMDS over IPv6
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud metadata
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (the only place plain http to an engine is accepted:
    tokens and secrets travel on these connections).

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("engine.example")
        (True, True, False)
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_base_url(key: str, text: str, *, what: str = "URL") -> str:
    """A configured engine URL (``key`` names the setting), without its trailing slash.

    https, or plain http to loopback only; a host; no credentials, query or fragment. Anything else
    raises :class:`ConfigurationError` naming ``key`` (a credential in the URL is never echoed).

    Example:
        >>> check_base_url("NF_URL", "https://nf.example.com/")
        'https://nf.example.com'
        >>> check_base_url("STAGENEXT_API_URL", "https://user:pw@host.example/?x=1")
        Traceback (most recent call last):
        ...
        workerless.errors.ConfigurationError: STAGENEXT_API_URL must not carry credentials in the URL
    """
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise ConfigurationError(f"{key} is not a valid URL: {text!r}", key=key) from None
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(f"{key} must not carry credentials in the URL", key=key)
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigurationError(f"{key} must be an https:// {what} with a host, got {text!r}", key=key)
    if parts.scheme == "http" and not is_loopback(host):
        raise ConfigurationError(
            f"{key} must use https (plain http is allowed only for loopback: 127.0.0.1, localhost, ::1), "
            f"got {parts.scheme}://{host}",
            key=key,
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(f"{key} must not have a query or fragment, got {text!r}", key=key)
    return text.rstrip("/")


def refused_answered_url(value: object) -> tuple[str, str | None]:
    """Check a URL an engine answered before any credential is sent to it.

    Returns ``(url without trailing slash, None)``, or ``("", why)`` when it is refused: missing,
    not https (plain http only to loopback), carrying credentials, or pointing at a link-local or
    cloud metadata address (literal addresses, IPv4-mapped forms, numeric host forms and the
    well-known metadata names; host names are not resolved). The caller raises its own
    :class:`~workerless.errors.ResponseShapeError` naming the field.

    Example:
        >>> refused_answered_url("http://169.254.169.254/latest")[1]
        "'http://169.254.169.254/latest' is not https (plain http is accepted only for loopback)"
        >>> refused_answered_url("https://169.254.169.254/")[1]
        '169.254.169.254 is a link-local / metadata address'
    """
    if not isinstance(value, str) or not value.strip():
        return "", "it is missing or not a string"
    text = value.strip()
    try:
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
        _ = parts.port
    except ValueError:
        return "", f"{text!r} is not a valid URL"
    if not host:
        return "", f"{text!r} has no host"
    if parts.username is not None or parts.password is not None:
        return "", "it carries credentials"
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not is_loopback(host)):
        return "", f"{text!r} is not https (plain http is accepted only for loopback)"
    if host.rstrip(".") in _METADATA_HOSTS:
        return "", f"{host!r} is a cloud metadata host"
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
        # "2852039166", "0xa9fea9fe", "169.254.43518": numeric forms some resolvers turn into an
        # address; a real environment host is a DNS name or a dotted address.
        if re.fullmatch(r"[0-9.]+|0x[0-9a-f.x]+", host):
            return "", f"{host!r} is a numeric host that is not a plain address"
    if address is not None:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in net for net in _METADATA_NETWORKS) or address.is_link_local:
            return "", f"{host} is a link-local / metadata address"
        if address.is_unspecified or address.is_multicast:
            return "", f"{host} is not a unicast address"
    return text.rstrip("/"), None
