# The rendering fixtures are imported from test_template.py and requested by name: F811 is pytest's idiom here.
# ruff: noqa: F811
"""template.yaml's dashboard and alarms, read from the SAM translator's output (what CloudFormation
deploys), checked against what workerless.observability actually writes.

The rendering fixtures are test_template.py's (the translator in .venv-sam, offline)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from workerless import observability

from tests.functional.project.test_template import (  # noqa: F401 - pytest fixtures used by name
    JOB_TYPES,
    cfn,
    offline_env,
    rendered,
    source,
)

#: Every metric name workerless writes in its namespace.
EMITTED = set(observability.METRICS)


def resources(cfn: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in cfn["Resources"].items() if res["Type"] == kind}


def dead_letter_queues(cfn: dict[str, Any]) -> set[str]:
    targets = set()
    for queue in resources(cfn, "AWS::SQS::Queue").values():
        redrive = queue["Properties"].get("RedrivePolicy")
        if redrive:
            targets.add(redrive["deadLetterTargetArn"]["Fn::GetAtt"][0])
    return targets


def consumers(cfn: dict[str, Any]) -> dict[str, str]:
    """Queue logical id -> the function its SQS event source mapping invokes."""
    return {
        mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: mapping["Properties"]["FunctionName"]["Ref"]
        for mapping in resources(cfn, "AWS::Lambda::EventSourceMapping").values()
    }


def job_queues() -> set[str]:
    return {f"{camel}Queue" for camel in JOB_TYPES.values()}


@pytest.fixture(scope="module")
def dashboard(cfn: dict[str, Any]) -> dict[str, Any]:
    """The dashboard body as JSON, every ${...} replaced by a marker naming what it referenced."""
    (resource,) = resources(cfn, "AWS::CloudWatch::Dashboard").values()
    body = resource["Properties"]["DashboardBody"]["Fn::Sub"]
    assert isinstance(body, str), "DashboardBody must be one Fn::Sub string"
    for name in re.findall(r"\$\{([^}]+)\}", body):
        target = name.split(".")[0]
        assert target.startswith("AWS::") or target in cfn["Resources"], f"dashboard names unknown ${{{name}}}"
    parsed: dict[str, Any] = json.loads(re.sub(r"\$\{([^}]+)\}", r"ref:\1", body))
    return parsed


def widget_metrics(widget: dict[str, Any]) -> list[list[Any]]:
    return [m for m in widget["properties"].get("metrics", []) if isinstance(m[0], str)]


def widget_expressions(widget: dict[str, Any]) -> list[str]:
    return [m[0]["expression"] for m in widget["properties"].get("metrics", []) if isinstance(m[0], dict)]


def widget(dashboard: dict[str, Any], title_part: str) -> dict[str, Any]:
    found = [w for w in dashboard["widgets"] if title_part.lower() in w["properties"].get("title", "").lower()]
    assert len(found) == 1, f"expected one widget titled *{title_part}*, found {len(found)}"
    return found[0]


# ----------------------------------------------------------------------------- dashboard


def test_the_dashboard_is_on_by_default_and_linked_from_the_outputs(cfn: dict[str, Any]) -> None:
    (name, resource) = next(iter(resources(cfn, "AWS::CloudWatch::Dashboard").items()))
    assert resource["Condition"] == "HasDashboard"
    assert cfn["Conditions"]["HasDashboard"] == {"Fn::Equals": [{"Ref": "Dashboard"}, "true"]}
    assert cfn["Parameters"]["Dashboard"]["Default"] == "true"
    # Dashboard names are account-wide: the same stack name in a second region must not collide.
    assert resource["Properties"]["DashboardName"] == {"Fn::Sub": "${AWS::StackName}-${AWS::Region}"}
    output = cfn["Outputs"]["DashboardName"]
    assert output["Condition"] == "HasDashboard"
    assert output["Value"] == {"Ref": name}


@pytest.mark.parametrize(
    ("title", "metrics"),
    [
        ("throughput", {"JobsActivated", "JobsCompleted", "JobsFailed", "JobsThrown"}),
        ("pickup latency", {"PickupLatency"}),
        ("failures", {"JobsFailed", "JobsDeadLettered", "PollErrors"}),
        ("lease lost", {"JobsLeaseLost", "JobsActivated", "HeartbeatExtends"}),
    ],
)
def test_dashboard_widgets_show_the_pipelines_metrics(dashboard: dict[str, Any], title: str, metrics: set[str]) -> None:
    shown = {m[1] for m in widget_metrics(widget(dashboard, title)) if m[0] == "workerless"}
    assert metrics <= shown


def test_the_poller_and_duration_panels_read_lambdas_own_free_metrics(dashboard: dict[str, Any]) -> None:
    # The library publishes no metric AWS already does: the poller's runs are its Invocations, a
    # function's run time its Duration (each route has its own function).
    poller = widget(dashboard, "poller")
    assert [m[:3] for m in widget_metrics(poller)] == [["AWS/Lambda", "Invocations", "FunctionName"]]
    assert not [m for m in widget_metrics(poller) if m[0] == "workerless"]
    duration = widget(dashboard, "duration")
    assert widget_metrics(duration) == []
    stats = sorted(
        re.findall(r"MetricName=\"Duration\" ref:AWS::StackName', '(\w+)'", " ".join(widget_expressions(duration)))
    )
    assert stats == ["Maximum", "p50", "p90"]


def test_dashboard_per_type_and_status_breakdowns_use_the_emitted_dimensions(dashboard: dict[str, Any]) -> None:
    searches = [e for w in dashboard["widgets"] if w["type"] == "metric" for e in widget_expressions(w)]
    found = {
        (m.group(1), m.group(2))
        for e in searches
        if (m := re.search(r"SEARCH\('\{workerless,(\w+),service\} MetricName=\"(\w+)\"", e))
    }
    assert found == {("Status", "EngineErrors")}
    for _dimension, name in found:
        assert name in observability.METRICS
    # Per job type, the dashboard reads AWS's own (free) metrics of each route's queue and function,
    # found by the stack's name: workerless publishes no per-type metric for every job.
    aws = {
        (m.group(1), m.group(2))
        for e in searches
        if (m := re.search(r"SEARCH\('\{(AWS/\w+),\w+\} MetricName=\"(\w+)\" ref:AWS::StackName'", e))
    }
    assert aws == {
        ("AWS/SQS", "NumberOfMessagesDeleted"),
        ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible"),
        ("AWS/Lambda", "Duration"),
    }


def test_dashboard_names_only_metrics_the_library_writes(dashboard: dict[str, Any]) -> None:
    for w in dashboard["widgets"]:
        if w["type"] != "metric":
            continue
        for metric in widget_metrics(w):
            if metric[0] == "workerless":
                assert metric[1] in EMITTED, f"{w['properties']['title']}: {metric[1]} is never written"
                assert metric[2:4] == ["service", observability.SERVICE]
        for expression in widget_expressions(w):
            if "{workerless," in expression:
                for name in re.findall(r'MetricName=\\?"(\w+)', expression):
                    assert name in EMITTED


def test_dashboard_finds_every_route_by_search_with_no_per_type_text(
    cfn: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    """A new route appears on the dashboard without an edit: every AWS metric of the stack's queues
    and functions is a SEARCH on the stack's name (CloudFormation names them <stack>-<LogicalId>-...),
    and no job type or route logical ID is written in the body."""
    body = json.dumps(dashboard)
    for job_type, stem in JOB_TYPES.items():
        assert job_type not in body and stem not in body
    searches = {e for w in dashboard["widgets"] if w["type"] == "metric" for e in widget_expressions(w)}
    stack = "ref:AWS::StackName"
    dlq = widget(dashboard, "dead-letter queue depth")
    assert {(m, stack) for m in ("NumberOfMessagesReceived", "ApproximateNumberOfMessagesVisible")} <= {
        (name, stack)
        for e in widget_expressions(dlq)
        for name in re.findall(r'MetricName=\\?"(\w+)', e)
        if f"QueueName={stack}" in e and "QueueName=DeadLetterQueue" in e
    }
    age = widget(dashboard, "oldest message")
    assert any("ApproximateAgeOfOldestMessage" in e and f"QueueName={stack}" in e for e in widget_expressions(age))
    assert any("{AWS/Lambda,FunctionName}" in e and f"FunctionName={stack}" in e for e in searches)


def test_dashboard_widgets_fit_the_grid(dashboard: dict[str, Any]) -> None:
    cells: set[tuple[int, int]] = set()
    for w in dashboard["widgets"]:
        assert w["x"] >= 0 and w["x"] + w["width"] <= 24
        area = {(x, y) for x in range(w["x"], w["x"] + w["width"]) for y in range(w["y"], w["y"] + w["height"])}
        assert not area & cells, f"widget {w['properties'].get('title')} overlaps another"
        cells |= area
        if w["type"] == "metric":
            assert w["properties"]["region"] == "ref:AWS::Region"


# ----------------------------------------------------------------------------- alarms


def alarms(cfn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources(cfn, "AWS::CloudWatch::Alarm")


def alarm_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    props = alarm["Properties"]
    if "MetricName" in props:
        return [{"Namespace": props["Namespace"], "MetricName": props["MetricName"], "Dimensions": props["Dimensions"]}]
    return [m["MetricStat"]["Metric"] for m in props["Metrics"] if "MetricStat" in m]


def test_every_alarm_exists_only_with_a_topic_and_notifies_it(cfn: dict[str, Any]) -> None:
    assert cfn["Parameters"]["AlarmTopicArn"]["Default"] == ""
    assert cfn["Conditions"]["HasAlarmTopic"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}
    assert len(alarms(cfn)) >= 9
    for name, alarm in alarms(cfn).items():
        assert alarm["Condition"] == "HasAlarmTopic", name
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopicArn"}], name
        assert alarm["Properties"]["TreatMissingData"] == "notBreaching", name
        description = alarm["Properties"]["AlarmDescription"]
        if isinstance(description, dict) and "Fn::FindInMap" in description:
            top, key, field = description["Fn::FindInMap"]
            description = cfn["Mappings"][top][key][field]
        description = description["Fn::Sub"] if isinstance(description, dict) else description
        assert description.startswith("workerless - "), name


def test_every_dead_letter_queue_alarms_on_what_counts_its_dead_letters(cfn: dict[str, Any]) -> None:
    """A dead-letter queue that a function drains (the job DLQ every route shares: DeadLetterFunction
    settles each message within a minute, on its schedule) is empty at most samples, so its depth
    cannot alarm: it alarms on the function's receives, one alarm for every route (which types:
    JobsDeadLettered by JobType). The DLQs nothing consumes (heartbeat tickets, poller ticks) alarm
    on their depth."""
    assert not set(consumers(cfn)) & dead_letter_queues(cfn), "a dead-letter queue has an idle event source"
    variables = cfn["Resources"]["DeadLetterFunction"]["Properties"]["Environment"]["Variables"]
    drained = {variables["WORKERLESS_DEAD_LETTER_QUEUE_URL"]["Ref"]} & dead_letter_queues(cfn)
    assert drained == {"JobDeadLetterQueue"}
    watched: dict[str, set[str]] = {}
    for alarm in alarms(cfn).values():
        props = alarm["Properties"]
        value = (props.get("Dimensions") or [{"Value": None}])[0]["Value"]
        queue = value["Fn::GetAtt"][0] if isinstance(value, dict) and "Fn::GetAtt" in value else None
        if queue in dead_letter_queues(cfn):
            assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")
            watched.setdefault(queue, set()).add(f"{props['MetricName']}/{props['Statistic']}")
    assert set(watched) == dead_letter_queues(cfn)
    for queue, metrics in watched.items():
        # The drained queue also alarms on letters left waiting 5 minutes running (a visible letter
        # at every sample, Minimum): that does not depend on the drain running at all.
        expected = (
            {"NumberOfMessagesReceived/Sum", "ApproximateNumberOfMessagesVisible/Minimum"}
            if queue in drained
            else {"ApproximateNumberOfMessagesVisible/Maximum"}
        )
        assert metrics == expected, queue


def test_the_library_functions_alarm_on_their_errors_and_throttles(cfn: dict[str, Any]) -> None:
    """A heartbeat or dead-letter invocation that fails as a whole, and any throttle of the poller,
    the heartbeat or the dead-letter function, alarms (the poller's errors have their own alarm)."""
    seen = set()
    for alarm in alarms(cfn).values():
        props = alarm["Properties"]
        if props.get("Namespace") == "AWS/Lambda":
            seen.add((props["MetricName"], props["Dimensions"][0]["Value"]["Ref"]))
    functions = ("PollerFunction", "HeartbeatFunction", "DeadLetterFunction")
    assert {("Errors", f) for f in functions} <= seen
    assert {("Throttles", f) for f in functions} <= seen


def test_a_routes_parameter_waits_for_its_grants_to_the_shared_functions(cfn: dict[str, Any]) -> None:
    """The poller polls a route once it reads the route's parameter: created after the route's
    policies on the poller's and the heartbeat's roles, its first poll is not AccessDenied."""
    parameters = resources(cfn, "AWS::SSM::Parameter")
    assert parameters
    for name, parameter in parameters.items():
        route = name.removesuffix("Route")
        # CloudFormation orders a resource after every resource it refers to (Fn::ForEach does not
        # rewrite a DependsOn, so the parameter's Description refers to them).
        description = json.dumps(parameter["Properties"]["Description"])
        for policy in (f"{route}PollerPolicy", f"{route}HeartbeatPolicy"):
            assert f"${{{policy}}}" in description or f'"Ref": "{policy}"' in description, (name, description)


def test_poller_errors_alarm_on_lambda_errors_and_on_failing_polls(cfn: dict[str, Any]) -> None:
    by_metric = {(m["Namespace"], m["MetricName"]): m for a in alarms(cfn).values() for m in alarm_metrics(a)}
    assert by_metric[("AWS/Lambda", "Errors")]["Dimensions"] == [
        {"Name": "FunctionName", "Value": {"Ref": "PollerFunction"}}
    ]
    assert by_metric[("workerless", "PollErrors")]["Dimensions"] == [{"Name": "service", "Value": "workerless"}]


def test_lease_lost_rate_alarm_divides_lost_by_activated(cfn: dict[str, Any]) -> None:
    alarm = alarms(cfn)["LeaseLostRateAlarm"]["Properties"]
    names = {m["Id"]: m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert names == {"lost": "JobsLeaseLost", "activated": "JobsActivated"}
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["ReturnData"] is True and "lost" in expression["Expression"]
    assert all(m["ReturnData"] is False for m in alarm["Metrics"] if "MetricStat" in m)
    assert alarm["Threshold"] == 5


def test_every_job_queue_has_an_age_alarm_past_its_longest_legitimate_run(cfn: dict[str, Any]) -> None:
    """A message is as old as its job's wait plus its run so far: each queue alarms on its age
    minus its consumer's Timeout (metric math) over 600 s, so a generate-report job that
    legitimately runs 900 s does not page anyone, and a 120 s route pages after 720 s."""
    functions = resources(cfn, "AWS::Lambda::Function")
    timeout_of = {queue: functions[function]["Properties"]["Timeout"] for queue, function in consumers(cfn).items()}
    ages = {}
    for alarm in alarms(cfn).values():
        props = alarm["Properties"]
        stats = [m for m in props.get("Metrics", []) if "MetricStat" in m]
        if [m["MetricStat"]["Metric"]["MetricName"] for m in stats] != ["ApproximateAgeOfOldestMessage"]:
            continue
        queue = stats[0]["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        (expression,) = [m for m in props["Metrics"] if m.get("ReturnData")]
        assert props["Threshold"] == 600, queue
        ages[queue] = expression["Expression"]
    assert set(ages) == job_queues()
    for queue, expression in ages.items():
        text, variables = expression["Fn::Sub"]
        assert text == "age - ${Timeout}"
        assert variables["Timeout"] == timeout_of[queue], queue


def test_alarms_read_metrics_the_library_writes_with_its_service_rollup(cfn: dict[str, Any]) -> None:
    """The workerless metrics an alarm reads must be written with exactly the dimensions it names:
    the service-only roll-up, which observability adds to every per-type document."""
    read = [m for a in alarms(cfn).values() for m in alarm_metrics(a) if m["Namespace"] == "workerless"]
    assert read
    buffer = observability.MetricsBuffer()
    for name in EMITTED:
        buffer.add(name, 1, "Count", (("JobType", "t"),) if name.startswith(("Jobs", "Heartbeat")) else ())
    written = {
        (metric["Name"], tuple(dims))
        for doc in buffer.documents()
        for spec in doc["_aws"]["CloudWatchMetrics"]
        for metric in spec["Metrics"]
        for dims in spec["Dimensions"]
    }
    for metric in read:
        dims = tuple(d["Name"] for d in metric["Dimensions"])
        assert (metric["MetricName"], dims) in written
        assert {d["Value"] for d in metric["Dimensions"]} == {observability.SERVICE}


def test_no_function_needs_put_metric_data(cfn: dict[str, Any]) -> None:
    """EMF metrics are log lines: no role may carry cloudwatch:* for them (least privilege)."""
    for name, role in resources(cfn, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            statements = policy["PolicyDocument"]["Statement"]
            for statement in statements if isinstance(statements, list) else [statements]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                assert not [a for a in actions if a.lower().startswith("cloudwatch:")], name
