# The `served` fixture is imported from test_max_in_flight.py and requested by name: F811 is pytest's idiom here.
# ruff: noqa: F811
"""MaxInFlight is a bound at every moment, on node-flow and StageNext (test_max_in_flight.py has the
1,000-job Sheptra run and says how it is measured). A file of its own so that pytest-xdist, which
distributes whole files, runs these beside the Sheptra run rather than after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.functional.runtime.poller.test_max_in_flight import GIVE_UP_SECONDS, check_max_in_flight, served  # noqa: F401 - a fixture used by name

pytestmark = pytest.mark.slow


@pytest.mark.timeout(GIVE_UP_SECONDS + 300)
@pytest.mark.parametrize(
    ("served", "jobs"),
    [("nodeflow", 300), ("stagenext", 300)],
    indirect=["served"],
    ids=["nodeflow-300", "stagenext-300"],
)
def test_no_more_than_max_in_flight_jobs_of_a_type_are_ever_leased_at_once(served: tuple[Any, Path], jobs: int) -> None:
    """GIVEN a backlog of jobs of the three example types and the template as written
    WHEN local mode runs it to the end
    THEN at no change of any job's state were more than MaxInFlight jobs of one type leased and not
    yet final, and every job completed."""
    check_max_in_flight(served, jobs)
