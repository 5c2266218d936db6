"""SheptraConfig: the worker environment block as Drive prints it, parsed as dotenv (pure, no I/O)."""

from __future__ import annotations

import pytest
from workerless._core.settings import parse_env_text
from workerless.engines.sheptra import SheptraConfig, check_discovered_base_url
from workerless.errors import ConfigurationError, ResponseShapeError

SECRET = "secret_s3cr3t-value-never-printed"

NORMAL_BLOCK = f"""\
SHEPTRA_TOKEN_ENDPOINT=https://acme.authkit.example/oauth2/token
SHEPTRA_CLIENT_ID=client_01HZX
SHEPTRA_CLIENT_SECRET={SECRET}
SHEPTRA_API_URL=https://env-42.cells.sheptra.example/
SHEPTRA_DISCOVERY_URL=https://manage.sheptra.example/v1/discovery/cell
SHEPTRA_ENVIRONMENT=cl-42
"""

AUTH_OFF_BLOCK = f"""\
# authentication is off on this deployment — nothing to mint from; leave blank
SHEPTRA_TOKEN_ENDPOINT=
SHEPTRA_CLIENT_ID=client_01HZX
SHEPTRA_CLIENT_SECRET={SECRET}
SHEPTRA_API_URL=https://env-42.cells.sheptra.example
SHEPTRA_DISCOVERY_URL=https://manage.sheptra.example/v1/discovery/cell
SHEPTRA_ENVIRONMENT=cl-42
"""

PLACEHOLDER_BLOCK = f"""\
# the management host did not answer the auth discovery — fill in your token endpoint below
SHEPTRA_TOKEN_ENDPOINT=https://<your-authkit-domain>/oauth2/token
SHEPTRA_CLIENT_ID=client_01HZX
SHEPTRA_CLIENT_SECRET={SECRET}
SHEPTRA_API_URL=https://env-42.cells.sheptra.example
SHEPTRA_DISCOVERY_URL=https://manage.sheptra.example/v1/discovery/cell
SHEPTRA_ENVIRONMENT=cl-42
"""


def values(**overrides: str | None) -> dict[str, str]:
    """The normal block's values with some keys replaced (None: removed)."""
    base = parse_env_text(NORMAL_BLOCK)
    for key, value in overrides.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


def config_error(raw: dict[str, str]) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        SheptraConfig.from_values(raw)
    assert SECRET not in str(info.value)
    return info.value


# ---- the three printed variants ------------------------------------------------------------


def test_normal_block_is_config_mode_with_auth() -> None:
    """GIVEN the block as Drive prints it WHEN parsed THEN config mode, auth on, URL without trailing /."""
    config = SheptraConfig.from_values(parse_env_text(NORMAL_BLOCK))
    assert config.mode == "config"
    assert config.auth is True
    assert config.token_endpoint == "https://acme.authkit.example/oauth2/token"
    assert config.client_id == "client_01HZX"
    assert config.client_secret is not None
    assert config.client_secret.get_secret_value() == SECRET
    assert config.api_url == "https://env-42.cells.sheptra.example"
    assert config.tenant_ids == ()
    # The discovery keys are not read in config mode.
    assert config.discovery_url is None
    assert config.environment is None


def test_secret_never_in_repr() -> None:
    config = SheptraConfig.from_values(parse_env_text(NORMAL_BLOCK))
    assert SECRET not in repr(config)
    assert SECRET not in str(config)


def test_auth_off_block_has_no_credentials() -> None:
    """GIVEN the auth-off variant (comment + blank endpoint) THEN auth is off and nothing is minted."""
    raw = parse_env_text(AUTH_OFF_BLOCK)
    assert raw["SHEPTRA_TOKEN_ENDPOINT"] == ""
    config = SheptraConfig.from_values(raw)
    assert config.auth is False
    assert config.token_endpoint is None
    assert config.client_secret is None
    assert config.api_url == "https://env-42.cells.sheptra.example"


def test_auth_off_needs_no_client_keys() -> None:
    config = SheptraConfig.from_values(
        {"SHEPTRA_TOKEN_ENDPOINT": "", "SHEPTRA_API_URL": "https://env.example", "SHEPTRA_CLIENT_SECRET": ""}
    )
    assert config.auth is False


def test_placeholder_endpoint_asks_to_fill_it_in() -> None:
    error = config_error(parse_env_text(PLACEHOLDER_BLOCK))
    assert error.key == "SHEPTRA_TOKEN_ENDPOINT"
    assert "SHEPTRA_TOKEN_ENDPOINT" in str(error)
    assert "fill in" in str(error)


# ---- missing and malformed keys -----------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["SHEPTRA_TOKEN_ENDPOINT", "SHEPTRA_CLIENT_ID", "SHEPTRA_CLIENT_SECRET", "SHEPTRA_API_URL"],
)
def test_missing_key_is_named(key: str) -> None:
    error = config_error(values(**{key: None}))
    assert error.key == key
    assert key in str(error)
    assert "missing" in str(error)


@pytest.mark.parametrize("key", ["SHEPTRA_CLIENT_ID", "SHEPTRA_CLIENT_SECRET", "SHEPTRA_API_URL"])
def test_empty_key_is_named(key: str) -> None:
    error = config_error(values(**{key: "  "}))
    assert error.key == key
    assert key in str(error)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("SHEPTRA_CLIENT_ID", "client_…"),
        ("SHEPTRA_CLIENT_SECRET", "<shown once, at creation>"),
        ("SHEPTRA_API_URL", "https://<your-environment-host>"),
    ],
)
def test_placeholders_from_the_docs_are_refused(key: str, value: str) -> None:
    error = config_error(values(**{key: value}))
    assert error.key == key
    assert "placeholder" in str(error)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("SHEPTRA_API_URL", "not a url"),
        ("SHEPTRA_API_URL", "ftp://env.example"),
        ("SHEPTRA_API_URL", "https://env.example:99999"),
        ("SHEPTRA_API_URL", "https://env.example/?x=1"),
        ("SHEPTRA_API_URL", "https://user:pw@env.example"),
        ("SHEPTRA_TOKEN_ENDPOINT", "//no-scheme.example/token"),
    ],
)
def test_malformed_urls_are_named(key: str, value: str) -> None:
    error = config_error(values(**{key: value}))
    assert error.key == key
    assert key in str(error)


def test_bad_secret_is_never_echoed() -> None:
    """A malformed secret is named, never printed."""
    error = config_error(values(SHEPTRA_CLIENT_SECRET="<" + SECRET + ">"))
    assert error.key == "SHEPTRA_CLIENT_SECRET"
    assert SECRET not in str(error)


# ---- https, except loopback -----------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080/cells/a", "http://localhost:9000", "http://[::1]:8080", "https://env.example"],
)
def test_https_or_loopback_http_is_accepted(url: str) -> None:
    assert SheptraConfig.from_values(values(SHEPTRA_API_URL=url)).api_url == url.rstrip("/")


@pytest.mark.parametrize(
    ("key", "url"),
    [
        ("SHEPTRA_API_URL", "http://env.example"),
        ("SHEPTRA_API_URL", "http://10.0.0.5:8080"),
        ("SHEPTRA_TOKEN_ENDPOINT", "http://acme.authkit.example/oauth2/token"),
    ],
)
def test_plain_http_off_loopback_is_refused(key: str, url: str) -> None:
    error = config_error(values(**{key: url}))
    assert error.key == key
    assert "https" in str(error)


def test_discovery_url_must_be_https_in_discovery_mode() -> None:
    error = config_error(
        values(SHEPTRA_MODE="discovery", SHEPTRA_DISCOVERY_URL="http://manage.example/v1/discovery/cell")
    )
    assert error.key == "SHEPTRA_DISCOVERY_URL"


# ---- mode selection --------------------------------------------------------------------------


def test_discovery_mode_reads_discovery_keys_only() -> None:
    config = SheptraConfig.from_values(values(SHEPTRA_MODE="discovery", SHEPTRA_API_URL=None))
    assert config.mode == "discovery"
    assert config.discovery_url == "https://manage.sheptra.example/v1/discovery/cell"
    assert config.environment == "cl-42"
    assert config.api_url is None


def test_mode_is_case_insensitive_and_config_is_default() -> None:
    assert SheptraConfig.from_values(values(SHEPTRA_MODE="Discovery")).mode == "discovery"
    assert SheptraConfig.from_values(values(SHEPTRA_MODE="")).mode == "config"
    assert SheptraConfig.from_values(values(SHEPTRA_MODE="config")).mode == "config"


def test_config_mode_ignores_broken_discovery_keys() -> None:
    config = SheptraConfig.from_values(values(SHEPTRA_DISCOVERY_URL="http://x", SHEPTRA_ENVIRONMENT=None))
    assert config.mode == "config"


@pytest.mark.parametrize("key", ["SHEPTRA_DISCOVERY_URL", "SHEPTRA_ENVIRONMENT"])
def test_discovery_mode_names_missing_key(key: str) -> None:
    error = config_error(values(SHEPTRA_MODE="discovery", **{key: None}))
    assert error.key == key


def test_unknown_mode_is_named() -> None:
    error = config_error(values(SHEPTRA_MODE="cells"))
    assert error.key == "SHEPTRA_MODE"


def test_missing_api_url_hints_at_discovery_mode() -> None:
    error = config_error(values(SHEPTRA_API_URL=None))
    assert "SHEPTRA_MODE=discovery" in str(error)


def test_tenant_ids_comma_list() -> None:
    config = SheptraConfig.from_values(values(SHEPTRA_TENANT_IDS=" eu, us ,, "))
    assert config.tenant_ids == ("eu", "us")


# ---- SSRF refusal of discovery answers --------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://env-42.cells.sheptra.example/cells/a",
        "https://10.1.2.3",
        "http://127.0.0.1:8080/cells/cell-a",
        "http://localhost:1234",
    ],
)
def test_discovered_base_url_accepted(url: str) -> None:
    assert check_discovered_base_url(url) == url.rstrip("/")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://env.example", "https"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://169.254.170.2/v2/credentials", "link-local"),
        ("https://[fd00:ec2::254]/latest", "metadata"),
        ("https://[fe80::1]/", "link-local"),
        ("https://[::ffff:169.254.169.254]/", "link-local"),
        ("https://metadata.google.internal/computeMetadata/v1", "metadata host"),
        ("https://2852039166/", "numeric host"),
        ("https://0xa9fea9fe/", "numeric host"),
        ("https://0.0.0.0/", "unicast"),
        ("https://user:pw@env.example", "credentials"),
        ("file:///etc/passwd", "host"),
        ("", "missing"),
    ],
)
def test_discovered_base_url_refused(url: str, why: str) -> None:
    with pytest.raises(ResponseShapeError) as info:
        check_discovered_base_url(url)
    assert info.value.field == "baseUrl"
    assert "refused" in str(info.value)
    assert why in str(info.value)


@pytest.mark.parametrize("value", [None, 42, ["https://env.example"]])
def test_discovered_base_url_must_be_a_string(value: object) -> None:
    with pytest.raises(ResponseShapeError) as info:
        check_discovered_base_url(value)
    assert info.value.field == "baseUrl"
