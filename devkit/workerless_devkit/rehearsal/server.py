"""moto's server in this process, on 127.0.0.1 and a port the OS picks: the rehearsal's "AWS".

SAM CLI (a subprocess) and this process's boto3 clients reach the same S3, CloudFormation, Lambda,
SQS... through it, so an artifact `sam package` uploads is the object moto's Lambda reads and the
rehearsal downloads. One server serves every region (moto keeps a backend per region and account).

moto's werkzeug server logs every request at INFO on the "werkzeug" logger; while the server runs
that logger is kept at WARNING (restored after), so a rehearsal prints its findings, not its traffic;
the server's own exceptions (logged at ERROR) still show, unless a step collects them
(:func:`workerless_devkit.rehearsal.sam.deploy_without_executing`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from workerless_devkit.rehearsal.errors import ToolError
from workerless_devkit.rehearsal.tools import FAKE_CREDENTIALS

#: moto's default account: what its ARNs and the pseudo-parameter AWS::AccountId carry.
ACCOUNT_ID = "123456789012"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """The running server: where SAM CLI and boto3 reach it."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def s3_url(self) -> str:
        # The same server. "localhost": moto's CloudFormation parses a TemplateURL whose host is
        # anything else as virtual-hosted (bucket "http://127"), and SAM CLI builds it from this.
        return f"http://localhost:{self.port}"

    def client(self, service: str, region: str) -> Any:
        """A boto3 client of ``service`` in ``region`` on this server, with fake credentials."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.url,
            region_name=region,
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            # No proxy for loopback whatever the environment says; a bounded retry.
            config=Config(proxies={}, retries={"max_attempts": 2, "mode": "standard"}),
        )


def _reset(endpoint: Endpoint) -> None:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    # An http:// URL on 127.0.0.1 that this module builds: no other scheme can reach it.
    request = urllib.request.Request(f"{endpoint.url}/moto-api/reset", method="POST")  # noqa: S310
    with opener.open(request, timeout=30) as response:
        if response.status != 200:
            raise ToolError(f"moto's server refused its reset (HTTP {response.status})")


@contextmanager
def moto_server() -> Iterator[Endpoint]:
    """Starts moto's server on 127.0.0.1 (ephemeral port) for the block, and stops it after."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # moto[server] pulls in Flask
        raise ToolError(f"moto's server is not installed ({exc}): the devkit needs moto[server]") from None
    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.WARNING)
    # Without a handler in its chain werkzeug adds a stream handler of its own, for good.
    quiet = logging.NullHandler()
    werkzeug.addHandler(quiet)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        if host != "127.0.0.1":
            raise ToolError(f"moto's server listens on {host}, not 127.0.0.1")
        endpoint = Endpoint(port=int(port))
        # moto's backends are this process's globals: a rehearsal starts from nothing and leaves
        # nothing (a 7 MB layer per region) to the tests that share its process.
        _reset(endpoint)
        yield endpoint
        _reset(endpoint)
    finally:
        server.stop()
        werkzeug.removeHandler(quiet)
        werkzeug.setLevel(level)
