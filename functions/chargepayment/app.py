"""charge-payment: charge an order. The input is typed: variables that do not fit ChargeInput (a
missing orderId, a non-positive amount) fail the job terminally before this code runs, the message
naming each bad field. A charge above the single-charge limit can never succeed either: terminal."""

from pydantic import BaseModel, ConfigDict, Field, field_validator
from workerless import Job, TerminalError, job_handler

#: The largest amount one charge may take (the provider refuses more, whatever the retry).
MAX_CHARGE = 1_000_000


class ChargeInput(BaseModel):
    order_id: str = Field(alias="orderId")
    # strict: a JSON true is not an amount of 1 (lax mode would charge it); an int is a float here.
    amount: float = Field(strict=True)

    @field_validator("amount")
    @classmethod
    def _positive(cls, amount: float) -> float:
        if amount <= 0:
            raise ValueError(f"amount must be a positive number, got {amount:g}")
        return amount


class ChargeResult(BaseModel):
    # populate_by_name: built with Python names, reported with the engine's (by_alias).
    model_config = ConfigDict(populate_by_name=True)

    payment_ok: bool = Field(alias="paymentOk")
    charge_id: str = Field(alias="chargeId")


@job_handler("charge-payment")
def handler(job: Job[ChargeInput]) -> ChargeResult:
    charge = job.input
    if charge.amount > MAX_CHARGE:
        raise TerminalError(f"amount {charge.amount:g} is above the single-charge limit {MAX_CHARGE}")
    # A payment provider gets job.workflow_key as its idempotency key: the same for every attempt, so
    # the order is charged once however often the engine retries the job.
    job.log(f"charging {charge.amount:g} for order {charge.order_id}")
    return ChargeResult(payment_ok=True, charge_id=f"ch_{charge.order_id}")
