"""generate-report: a long job. Sleeps `seconds` (default 1, at most 600), checking the lease as it
goes, so runs that outlive a short lease exercise the heartbeat."""

import time

from workerless import Job, TerminalError, job_handler

MAX_SECONDS = 600
STEP_SECONDS = 0.5


@job_handler("generate-report")
def handler(job: Job) -> dict:
    seconds = job.variables.get("seconds", 1)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_SECONDS:
        raise TerminalError(f"seconds must be a number from 0 to {MAX_SECONDS}, got {seconds!r}")
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if job.lease_lost():
            raise RuntimeError("lease lost: another worker has this job; stopping")
        time.sleep(min(STEP_SECONDS, left))
    return {"reportReady": True}
