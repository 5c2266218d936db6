"""Seed 000's "minimal worker", in Python: the direct-worker reference the pipeline is compared with.

A line-for-line port of the seed's ``worker.mjs`` (mint and cache a token, renew a minute early;
activate every handled type in one request; complete or fail each job; back off on 429/503), with
two changes for a bounded benchmark: the HTTP client is injected (the same in-process emulator
transport as the pipeline's), and the loop stops after ``max_empty`` empty activations instead of
running forever. ``wait_seconds`` defaults to the seed's 30; the benchmark passes 0 so that the
final, empty poll does not hold for 30 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import httpx


class HTTPStatusError(Exception):
    def __init__(self, path: str, status: int, retry_after: float) -> None:
        super().__init__(f"{path} answered {status}")
        self.status = status
        self.retry_after = retry_after


class MinimalWorker:
    def __init__(
        self,
        values: dict[str, str],
        client: httpx.Client,
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]],
        *,
        max_jobs: int = 10,
        lease_seconds: int = 60,
        wait_seconds: int = 30,
    ) -> None:
        self.token_endpoint = values.get("SHEPTRA_TOKEN_ENDPOINT", "")
        self.client_id = values.get("SHEPTRA_CLIENT_ID", "")
        self.client_secret = values.get("SHEPTRA_CLIENT_SECRET", "")
        self.api_url = values["SHEPTRA_API_URL"]
        self.client = client
        self.handlers = handlers
        self.max_jobs = max_jobs
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self._cached: tuple[str, float] | None = None

    # client_credentials has no refresh token — cache the mint, renew a minute early
    def token(self) -> str | None:
        if not self.token_endpoint:
            return None
        if self._cached and time.time() < self._cached[1]:
            return self._cached[0]
        res = self.client.post(
            self.token_endpoint,
            content=urlencode(
                {"grant_type": "client_credentials", "client_id": self.client_id, "client_secret": self.client_secret}
            ),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        if not res.is_success:
            raise RuntimeError(f"token mint failed: {res.status_code}")
        body = res.json()
        self._cached = (body["access_token"], time.time() + (body["expires_in"] - 60))
        return str(body["access_token"])

    def post(self, path: str, body: dict[str, Any]) -> Any:
        token = self.token()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        res = self.client.post(f"{self.api_url}{path}", json=body, headers=headers)
        if not res.is_success:
            raise HTTPStatusError(path, res.status_code, float(res.headers.get("Retry-After") or 0))
        return res.json() if res.content else None

    def run(self, *, max_empty: int = 1, max_loops: int = 100_000) -> int:
        """The seed's loop; returns how many jobs were completed or failed."""
        done = empty = 0
        for _ in range(max_loops):
            try:
                jobs = self.post(
                    "/v1/jobs/activate",
                    {
                        "types": list(self.handlers),
                        "maxJobs": self.max_jobs,
                        "leaseSeconds": self.lease_seconds,
                        "waitSeconds": self.wait_seconds,
                    },
                )["jobs"]
                if not jobs:
                    empty += 1
                    if empty >= max_empty:
                        return done
                for job in jobs:
                    try:
                        variables = self.handlers[job["type"]](job)
                        self.post(f"/v1/jobs/{job['id']}/complete", {"variables": variables})
                    except HTTPStatusError as error:
                        if error.status == 409:
                            continue  # someone else finished it
                        raise
                    except Exception as error:  # noqa: BLE001 - the seed fails the job with the message
                        self.post(f"/v1/jobs/{job['id']}/fail", {"errorMessage": str(error), "retryBackoffSeconds": 30})
                    done += 1
            except HTTPStatusError as error:
                if error.status == 401:
                    self._cached = None  # re-mint on the next call
                elif error.status in (429, 503):
                    time.sleep(error.retry_after or 5)
                elif error.status == 421:
                    raise  # config mode: the host is wrong — fix SHEPTRA_API_URL
                else:
                    time.sleep(2)
        return done
