"""new-handler's template edit: two lines (its route, and the route's type), on a copy of the template in a
tree of the test's own."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from workerless_devkit.devtools.scaffold import ScaffoldError, add_job_type, scaffold_handler, stem, template_job_types
from workerless_devkit.local.template import load_template

ROOT = Path(__file__).resolve().parents[4]
TEMPLATE = ROOT / "template.yaml"
#: A name no user would pick, so a user's own scaffolded types never collide with the test's.
TYPE = "zz-scaffold-probe"


def test_adding_a_type_adds_its_route_and_the_routes_type_and_generates_the_rest() -> None:
    before = TEMPLATE.read_text(encoding="utf-8")
    after, ids = add_job_type(before, TYPE)
    changed = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    added = [line for line in changed if line.startswith("+")]
    removed = [line for line in changed if line.startswith("-")]
    # The type's route joins the routes list and Mappings.Routes names its engine job type; everything
    # of the route is generated from those two lines.
    assert removed == [] and added == [f"+    {stem(TYPE)}: {{Type: {TYPE}}}", f"+      - {stem(TYPE)}"], changed
    assert template_job_types(after) == [*template_job_types(before), TYPE]
    assert f"{stem(TYPE)}Function" in ids


def test_the_scaffolded_type_runs_locally_with_its_own_function_queue_and_route(tmp_path: Path) -> None:
    shutil.copy(TEMPLATE, tmp_path / "template.yaml")
    done = scaffold_handler(TYPE, template=tmp_path / "template.yaml")
    assert all(path.is_file() for path in done.files)
    template = load_template(tmp_path / "template.yaml")
    function = template.function(f"{stem(TYPE)}Function")
    assert function.code_dir == (tmp_path / "functions" / stem(TYPE)).resolve()
    assert [e.queue_id for e in function.sqs_events] == [f"{stem(TYPE)}Queue"]
    # Its job queue dead-letters to the one job dead-letter queue every route shares.
    assert template.queue(f"{stem(TYPE)}Queue").dead_letter_queue_id == "JobDeadLetterQueue"
    # That queue has no event source: the dead-letter function drains it (its schedule) for every route.
    assert template.function("DeadLetterFunction").sqs_events == ()
    assert template.environment()["WORKERLESS_DEAD_LETTER_QUEUE_URL"] == template.queue("JobDeadLetterQueue").url
    (route,) = [p for p in template.ssm_parameters if p.logical_id == f"{stem(TYPE)}Route"]
    assert route.name == f"/workerless/workerless-local/routes/{stem(TYPE)}"
    assert f'"type":"{TYPE}"' in route.value and template.queue(f"{stem(TYPE)}Queue").url in route.value
    assert "WORKERLESS_ROUTES" not in template.environment()


@pytest.mark.parametrize("job_type", ["charge-payment", "chargepayment", "charge_payment", "Bad", "poller"])
def test_an_existing_colliding_or_malformed_type_is_refused(job_type: str) -> None:
    with pytest.raises(ScaffoldError):
        add_job_type(TEMPLATE.read_text(encoding="utf-8"), job_type)


def test_the_generated_event_names_the_routes_queue(tmp_path: Path) -> None:
    shutil.copy(TEMPLATE, tmp_path / "template.yaml")
    scaffold_handler(TYPE, template=tmp_path / "template.yaml")
    event = (tmp_path / "events" / f"sqs-{TYPE}.json").read_text(encoding="utf-8")
    assert f":workerless-{stem(TYPE)}Queue-" in event
