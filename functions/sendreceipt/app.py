"""send-receipt: send the order's receipt."""

from workerless import Job, job_handler


@job_handler("send-receipt")
def handler(job: Job) -> dict:
    job.log(f"receipt sent for order {job.variables.get('orderId')}")
    return {"receiptSent": True}
