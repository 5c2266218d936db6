"""Sheptra's identity side, the base of :class:`~workerless_devkit.emulators.sheptra.SheptraEmulator`: cells,
credentials and tokens (the OAuth2 token endpoint, JWKS, bearer checks), discovery, the worker
environment block, and what every engine call passes first (the cell, the rate limit, the token).
Its attributes are set by the emulator's constructor."""

from __future__ import annotations

import base64
import binascii
import json
import math
import secrets
from typing import Literal
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from workerless_devkit.emulators.core import EngineEmulator
from workerless_devkit.emulators.http import HTTPProblem, Request, Response, json_response

EnvVariant = Literal["normal", "auth_off", "placeholder"]

AUTH_OFF_COMMENT = "# authentication is off on this deployment — nothing to mint from; leave blank"
PLACEHOLDER_COMMENT = "# the management host did not answer the auth discovery — fill in your token endpoint below"
PLACEHOLDER_TOKEN_ENDPOINT = "https://<your-authkit-domain>/oauth2/token"  # noqa: S105 - a URL, not a secret


def _problem(status: int, title: str, detail: str, **headers: str) -> HTTPProblem:
    return HTTPProblem(status, title, detail, headers=headers or None)


def _bad_request(detail: str) -> HTTPProblem:
    return _problem(400, "Bad Request", detail)


class SheptraIdentity(EngineEmulator):
    """Cells, credentials, tokens and discovery; the emulator's constructor sets these attributes."""

    auth: bool
    token_ttl: int
    client_id: str
    client_secret: str
    cluster: str
    org_id: str
    audience: str
    issuer: str
    rate_limit: float | None
    _cell_index: int
    _revoked: bool
    _tokens_minted: int
    _key_id: str
    _private_key: rsa.RSAPrivateKey
    _bucket: float
    _bucket_at: float

    @property
    def cell(self) -> str:
        """The cell currently serving the environment (``cell-a``, then ``cell-b`` after a move...)."""
        return self._cell_name(self._cell_index)

    @staticmethod
    def _cell_name(index: int) -> str:
        letters = ""
        index += 1
        while index:
            index, rem = divmod(index - 1, 26)
            letters = chr(ord("a") + rem) + letters
        return f"cell-{letters}"

    def move_cell(self) -> str:
        """Move the environment to a new cell: the old API prefix answers 421 from now on, and
        discovery returns the new ``baseUrl``. Jobs and leases move with the environment."""
        with self._changed:
            self._cell_index += 1
            self._changed.notify_all()  # long polls held on the old cell end now
            return self.cell

    @property
    def tokens_minted(self) -> int:
        """How many tokens the token endpoint has issued (to check that a worker caches its token)."""
        return self._tokens_minted

    def revoke_client(self) -> None:
        """Revoke the API client: new mints are refused; tokens already minted work until they expire."""
        with self._lock:
            self._revoked = True

    def invalidate_tokens(self) -> None:
        """Rotate the signing key: every token minted so far is refused (401); new mints work."""
        with self._lock:
            self._private_key = self._new_key()

    def _new_key(self) -> rsa.RSAPrivateKey:
        self._key_id = "key-" + secrets.token_hex(4)
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def api_url(self, base_url: str) -> str:
        return f"{base_url.rstrip('/')}/cells/{self.cell}"

    def engine_values(self, base_url: str) -> dict[str, str]:
        """The six keys of the worker environment block, as a worker reads them."""
        base = base_url.rstrip("/")
        return {
            "SHEPTRA_TOKEN_ENDPOINT": f"{base}/oauth2/token" if self.auth else "",
            "SHEPTRA_CLIENT_ID": self.client_id,
            "SHEPTRA_CLIENT_SECRET": self.client_secret,
            "SHEPTRA_API_URL": self.api_url(base),
            "SHEPTRA_DISCOVERY_URL": f"{base}/v1/discovery/cell",
            "SHEPTRA_ENVIRONMENT": self.cluster,
        }

    def env_block(self, base_url: str, variant: EnvVariant | str | None = None) -> str:
        """The worker environment block exactly as Drive prints it (valid dotenv).

        ``variant``: ``normal`` (six keys), ``auth_off`` (comment + blank token endpoint) or
        ``placeholder`` (comment + a placeholder endpoint to fill in, printed when the management
        host did not answer the auth discovery). None: ``auth_off`` when auth is off, else normal.
        """
        if variant is None:
            variant = "normal" if self.auth else "auth_off"
        values = self.engine_values(base_url)
        lines: list[str] = []
        if variant == "auth_off":
            lines.append(AUTH_OFF_COMMENT)
            values["SHEPTRA_TOKEN_ENDPOINT"] = ""
        elif variant == "placeholder":
            lines.append(PLACEHOLDER_COMMENT)
            values["SHEPTRA_TOKEN_ENDPOINT"] = PLACEHOLDER_TOKEN_ENDPOINT
        elif variant != "normal":
            raise ValueError(f"variant must be normal, auth_off or placeholder, got {variant!r}")
        lines.extend(f"{key}={value}" for key, value in values.items())
        return "\n".join(lines) + "\n"

    def _base_of(self, req: Request) -> str:
        host = req.header("Host")
        return f"http://{host}" if host else (self.base_url or "")

    def _token(self, req: Request) -> Response:
        form = {k: v[-1] for k, v in parse_qs(req.body.decode("utf-8", "replace"), keep_blank_values=True).items()}
        client_id, client_secret = form.get("client_id"), form.get("client_secret")
        basic = req.header("Authorization") or ""
        if basic.lower().startswith("basic "):  # client_secret_basic is as standard as the form fields
            try:
                client_id, _, client_secret = base64.b64decode(basic[6:]).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise self._oauth_error(401, "invalid_client", "malformed Basic credentials") from None
        if form.get("grant_type") != "client_credentials":
            raise self._oauth_error(400, "unsupported_grant_type", "grant_type must be client_credentials")
        if not client_id or not client_secret:
            raise self._oauth_error(401, "invalid_client", "client_id and client_secret are required")
        known = secrets.compare_digest(client_id.encode(), self.client_id.encode()) and secrets.compare_digest(
            client_secret.encode(), self.client_secret.encode()
        )
        if not known:
            raise self._oauth_error(401, "invalid_client", "unknown client or wrong secret")
        with self._lock:
            if self._revoked:
                raise self._oauth_error(401, "invalid_client", "this API client has been revoked")
            issued = int(self.now())
            self._tokens_minted += 1
            claims = {
                "iss": self.issuer,
                "sub": client_id,
                "aud": self.audience,
                "org_id": self.org_id,
                "iat": issued,
                "exp": issued + self.token_ttl,
                "jti": secrets.token_hex(8),
            }
            token = jwt.encode(claims, self._private_key, algorithm="RS256", headers={"kid": self._key_id})
        return json_response(
            {"access_token": token, "expires_in": self.token_ttl, "token_type": "Bearer"},
            headers={"Cache-Control": "no-store"},
        )

    @staticmethod
    def _oauth_error(status: int, error: str, description: str) -> HTTPProblem:
        title = "Unauthorized" if status == 401 else "Bad Request"
        return HTTPProblem(
            status,
            title,
            description,
            extra={"error": error, "error_description": description},
            headers={"WWW-Authenticate": 'Basic realm="sheptra"'} if status == 401 else None,
        )

    def _jwks(self, req: Request) -> Response:
        with self._lock:
            jwk = json.loads(RSAAlgorithm.to_jwk(self._private_key.public_key()))
            jwk.update({"kid": self._key_id, "use": "sig", "alg": "RS256"})
        return json_response({"keys": [jwk]})

    def _discovery_auth(self, req: Request) -> Response:
        if not self.auth:
            return json_response({"enabled": False, "tokenEndpoint": None, "audience": None, "issuer": None})
        base = self._base_of(req)
        return json_response(
            {
                "enabled": True,
                "tokenEndpoint": f"{base}/oauth2/token",
                "audience": self.audience,
                "issuer": self.issuer,
                "jwksUri": f"{base}/.well-known/jwks.json",
            }
        )

    def _subject(self, req: Request) -> str:
        """The caller's subject from a verified bearer token (``anonymous`` when auth is off)."""
        if not self.auth:
            return "anonymous"  # any Authorization header is ignored, as on a deployment with auth off
        header = req.header("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _problem(401, "Unauthorized", "a bearer token is required", **{"WWW-Authenticate": "Bearer"})
        with self._lock:
            public_key = self._private_key.public_key()
        try:
            claims = jwt.decode(
                token.strip(),
                public_key,
                algorithms=["RS256"],
                audience=self.audience,
                issuer=self.issuer,
                # Expiry is checked below against the emulator clock, which advance() moves.
                options={"verify_exp": False, "verify_iat": False, "require": ["exp", "iat", "sub", "aud"]},
            )
        except jwt.InvalidTokenError as exc:
            raise _problem(
                401,
                "Unauthorized",
                f"the bearer token is not valid: {type(exc).__name__}",
                **{"WWW-Authenticate": 'Bearer error="invalid_token"'},
            ) from None
        if float(claims["exp"]) <= self.now():
            raise _problem(
                401,
                "Unauthorized",
                "the bearer token has expired",
                **{"WWW-Authenticate": 'Bearer error="invalid_token", error_description="expired"'},
            )
        subject = str(claims["sub"])
        if not subject.startswith("client_"):
            # Only a client_… subject is granted the worker role the job endpoints require.
            raise _problem(403, "Forbidden", "the token's subject does not hold the worker role")
        return subject

    def _discovery_cell(self, req: Request) -> Response:
        self._subject(req)
        cluster = req.query.get("cluster")
        if not cluster:
            raise _bad_request("query parameter 'cluster' is required")
        if cluster != self.cluster:
            raise _problem(404, "Not Found", f"no environment with cluster id {cluster!r} in this organization")
        return json_response(
            {
                "baseUrl": self.api_url(self._base_of(req)),
                "cluster": self.cluster,
                "name": f"Emulated environment {self.cluster}",
                "environment": "emulator",
                "status": "running",
            }
        )

    def _engine_call(self, req: Request) -> str:
        """Routing, rate limiting and authentication shared by every engine call; returns the subject."""
        cell = req.params.get("cell")
        if cell != self.cell:
            raise _problem(
                421,
                "Misdirected Request",
                f"this environment is no longer served by {cell}; re-resolve it through discovery",
            )
        self._take_rate_token()
        return self._subject(req)

    def _take_rate_token(self) -> None:
        if self.rate_limit is None:
            return
        with self._lock:
            now = self.now()
            capacity = max(1.0, self.rate_limit)
            self._bucket = min(capacity, self._bucket + max(0.0, now - self._bucket_at) * self.rate_limit)
            self._bucket_at = now
            if self._bucket >= 1.0:
                self._bucket -= 1.0
                return
            wait = math.ceil((1.0 - self._bucket) / self.rate_limit)
        raise _problem(429, "Too Many Requests", "rate limit exceeded", **{"Retry-After": str(max(1, wait))})

    def _admin_move(self, req: Request) -> Response:
        cell = self.move_cell()
        return json_response({"cell": cell, "baseUrl": self.api_url(self._base_of(req))})

    def _admin_invalidate(self, req: Request) -> Response:
        self.invalidate_tokens()
        return Response(204)

    def _admin_revoke(self, req: Request) -> Response:
        self.revoke_client()
        return Response(204)
