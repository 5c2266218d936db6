"""charge-payment: charge an order. A non-positive or missing amount can never succeed: terminal."""

from workerless import Job, TerminalError, job_handler


@job_handler("charge-payment")
def handler(job: Job) -> dict:
    order_id = job.variables.get("orderId")
    amount = job.variables.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount <= 0:
        raise TerminalError(f"amount must be a positive number, got {amount!r}")
    # A payment provider gets job.workflow_key as its idempotency key: the same for every attempt, so
    # the order is charged once however often the engine retries the job.
    job.log(f"charging {amount} for order {order_id}")
    return {"paymentOk": True, "chargeId": f"ch_{order_id}"}
