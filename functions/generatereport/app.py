"""generate-report: a long job. Sleeps `seconds` (default 1, from 0 to 600), checking the lease as it
goes, so runs that outlive a short lease exercise the heartbeat. The input is typed: a `seconds`
outside that range (or not a number) fails the job terminally before this code runs."""

import time

from pydantic import BaseModel, Field
from workerless import Job, job_handler

MAX_SECONDS = 600
STEP_SECONDS = 0.5


class ReportInput(BaseModel):
    seconds: float = Field(default=1, ge=0, le=MAX_SECONDS)


@job_handler("generate-report")
def handler(job: Job[ReportInput]) -> dict:
    deadline = time.monotonic() + job.input.seconds
    while (left := deadline - time.monotonic()) > 0:
        if job.lease_lost():
            raise RuntimeError("lease lost: another worker has this job; stopping")
        time.sleep(min(STEP_SECONDS, left))
    return {"reportReady": True}
