"""A test-only generate-report handler for the node-flow pipeline tests: it logs the lines it is
given through ``job.log`` and then raises an ordinary exception, so the task's log must show the
lines in order followed by the failure's stack. template.yaml's generate-report function points
here only in the test's template variant; the example handler's behaviour is untouched."""

from typing import Any

from workerless import Job, job_handler


@job_handler("generate-report")
def handler(job: Job) -> dict[str, Any]:
    for line in job.variables.get("lines", []):
        job.log(str(line))
    raise RuntimeError(str(job.variables.get("error", "report failed")))
