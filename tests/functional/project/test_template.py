"""template.yaml: cfn-lint, both `sam validate` passes, and the invariants of the translated template.

The SAM translator is what CloudFormation runs on deploy, so the assertions read its output (the
template as CloudFormation will see it) rather than the source: a property the translator drops or
rewrites is caught here. The translator and `sam` live in .venv-sam (their pins clash with the
application's), so they run in subprocesses. Nothing here touches the network: the subprocesses get
a proxy on a closed loopback port, SAM CLI telemetry off and a fresh SAM CLI config directory whose
version check is not due, so an accidental call fails fast instead of leaving the machine.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from workerless._core.model import ActivatedJob
from workerless._heartbeat.ticket import Ticket
from workerless.engines import ENGINE_NAMES
from workerless_devkit.devtools.scaffold import template_route_types
from workerless_devkit.local.extensions import expand_language_extensions
from workerless_devkit.local.template import parse_template_text

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "template.yaml"
SUBPROCESS_TIMEOUT = 120

#: Job type -> its route's name (its directory under functions/ and logical-ID stem, ${Route}), read
#: from the template's route loop: a scaffolded type is checked like the examples.
JOB_TYPES = {t: route for route, t in template_route_types(TEMPLATE.read_text(encoding="utf-8")).items()}
LIBRARY_FUNCTIONS = {"PollerFunction": "poller", "HeartbeatFunction": "heartbeat", "DeadLetterFunction": "deadletter"}
ALL_FUNCTIONS = {**LIBRARY_FUNCTIONS, **{f"{route}Function": route for route in JOB_TYPES.values()}}

# Run by .venv-sam's python: the same translator `sam validate` and CloudFormation use, fed the
# template after AWS::LanguageExtensions (expanded by local mode's expander, which keeps every Ref
# as CloudFormation's transform does; test_template_expansion.py holds it to SAM CLI's own) with
# local code paths replaced by S3 locations (the translator accepts only those).
TRANSLATE = r"""
import json, sys
from boto3.session import Session
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

with open(sys.argv[1], encoding="utf-8") as fh:
    source = json.load(fh)
template = json.loads(json.dumps(source))
for resource in template.get("Resources", {}).values():
    props = resource.setdefault("Properties", {})
    if resource.get("Type") == "AWS::Serverless::Function":
        props["CodeUri"] = "s3://workerless-test/function.zip"
    elif resource.get("Type") == "AWS::Serverless::LayerVersion":
        props["ContentUri"] = "s3://workerless-test/layer.zip"

def managed_policy_map():
    raise RuntimeError("translation asked for the IAM managed-policy map (a network call)")

translated = Translator(
    managed_policy_map=None, sam_parser=Parser(), plugins=[], boto_session=Session(region_name="us-east-1")
).translate(sam_template=template, parameter_values={}, get_managed_policy_map=managed_policy_map)
json.dump({"source": source, "translated": translated}, sys.stdout)
"""


# ----------------------------------------------------------------------------- tools


def _sam_path() -> Path:
    explicit = os.environ.get("WORKERLESS_SAM")
    if explicit:
        path = Path(explicit)
        assert path.is_file(), f"WORKERLESS_SAM={explicit} does not exist"
        return path
    path = ROOT / ".venv-sam" / "bin" / "sam"
    if not path.is_file():
        pytest.skip(f"no SAM CLI at {path} (run `make sam-venv`, or set WORKERLESS_SAM)")
    return path


def _sam_python(sam: Path) -> Path:
    """The interpreter the sam script runs under (its shebang), where samtranslator is importable."""
    first = sam.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    if first.startswith("#!") and Path(first[2:].strip()).is_file():
        return Path(first[2:].strip())
    sibling = sam.parent / "python"
    if not sibling.is_file():
        pytest.skip(f"cannot find the Python that runs {sam}")
    return sibling


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for the sam subprocesses: no telemetry, no version check, no way out."""
    app_dir = tmp_path_factory.mktemp("sam-cli-config")
    # SAM CLI checks PyPI for a newer version once a week; a check made "now" is not due.
    (app_dir / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    env = dict(os.environ)
    env.update(
        {
            "SAM_CLI_TELEMETRY": "0",
            "__SAM_CLI_APP_DIR": str(app_dir),
            "AWS_EC2_METADATA_DISABLED": "true",
            # Nothing listens on port 9: a request that slipped through fails at once, locally.
            "HTTP_PROXY": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "ALL_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "",
        }
    )
    for key in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        env.pop(key, None)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, check=False
    )


@pytest.fixture(scope="module")
def rendered(offline_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    sam = _sam_path()
    source = parse_template_text(TEMPLATE.read_text(encoding="utf-8"), source=str(TEMPLATE))
    expanded = tmp_path_factory.mktemp("expanded") / "template.json"
    expanded.write_text(json.dumps(expand_language_extensions(source, {})), encoding="utf-8")
    result = _run([str(_sam_python(sam)), "-c", TRANSLATE, str(expanded)], offline_env)
    assert result.returncode == 0, f"SAM translation failed:\n{result.stderr}"
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture(scope="module")
def source(rendered: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = rendered["source"]
    return value


@pytest.fixture(scope="module")
def cfn(rendered: dict[str, Any]) -> dict[str, Any]:
    """The translated template: what CloudFormation deploys."""
    value: dict[str, Any] = rendered["translated"]
    return value


# ----------------------------------------------------------------------------- helpers


def _resources(cfn: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in cfn["Resources"].items() if res["Type"] == kind}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _logical_id(ref: Any) -> str:
    """The resource a `Ref` / `Fn::GetAtt [X, Arn]` names."""
    assert isinstance(ref, dict), f"expected an intrinsic naming a resource, got {ref!r}"
    if "Ref" in ref:
        return str(ref["Ref"])
    if "Fn::Sub" in ref:
        # "${Bucket.Arn}/prefix/*": the resource its first reference names.
        found = re.search(r"\$\{([A-Za-z0-9]+)", str(ref["Fn::Sub"]))
        assert found is not None, f"!Sub names no resource: {ref!r}"
        return found.group(1)
    target = ref["Fn::GetAtt"]
    return str(target[0] if isinstance(target, list) else target.split(".")[0])


def _role_of(cfn: dict[str, Any], function: str) -> dict[str, Any]:
    """The function's role, with the AWS::IAM::Policy resources attached to it (a route's grants to
    the shared functions) among its Policies."""
    role_id = _logical_id(cfn["Resources"][function]["Properties"]["Role"])
    role: dict[str, Any] = cfn["Resources"][role_id]
    assert role["Type"] == "AWS::IAM::Role"
    attached = [
        r["Properties"]
        for r in _resources(cfn, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in r["Properties"]["Roles"]
    ]
    properties = {**role["Properties"], "Policies": [*role["Properties"].get("Policies", []), *attached]}
    return {**role, "Properties": properties}


def _statements(role: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for policy in role["Properties"].get("Policies", []):
        yield from _as_list(policy["PolicyDocument"]["Statement"])


def _queues_allowed(cfn: dict[str, Any], function: str, action: str) -> set[str]:
    queues: set[str] = set()
    for statement in _statements(_role_of(cfn, function)):
        if statement["Effect"] == "Allow" and action in _as_list(statement["Action"]):
            queues |= {_logical_id(r) for r in _as_list(statement["Resource"])}
    return {q for q in queues if cfn["Resources"][q]["Type"] == "AWS::SQS::Queue"}


def _event_source_queues(cfn: dict[str, Any], function: str) -> dict[str, dict[str, Any]]:
    """Queue logical ID -> the event source mapping properties, for the function's SQS events."""
    mappings = _resources(cfn, "AWS::Lambda::EventSourceMapping").values()
    return {
        _logical_id(m["Properties"]["EventSourceArn"]): m["Properties"]
        for m in mappings
        if _logical_id(m["Properties"]["FunctionName"]) == function
    }


#: The path the routes' parameters are under, and the one the poller is granted (Fn::Sub text).
ROUTES_PATH = "/workerless/${AWS::StackName}/routes"
ROUTES_PATH_ARN = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter" + ROUTES_PATH


def _sub_route(cfn: dict[str, Any], value: Any) -> dict[str, Any]:
    """Evaluate a route parameter's Value (an Fn::Sub [text, variables]) with each resource's Ref
    shown as `ref:<LogicalId>` and parameters at their defaults."""
    text, variables = value["Fn::Sub"]
    assert isinstance(text, str), "a route's Value must be an Fn::Sub of one string"

    def resolved(item: Any) -> str:
        if isinstance(item, dict) and "Ref" in item:
            return str(cfn["Parameters"][item["Ref"]]["Default"])
        assert isinstance(item, str | int), f"a route variable left unresolved: {item!r}"
        return str(item)

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in variables:
            return resolved(variables[name])
        if name in cfn["Parameters"]:
            return str(cfn["Parameters"][name]["Default"])
        assert name in cfn["Resources"], f"a route names unknown ${{{name}}}"
        return f"ref:{name}"

    route: dict[str, Any] = json.loads(re.sub(r"\$\{([A-Za-z0-9]+)\}", substitute, text))
    return route


# ----------------------------------------------------------------------------- linters


def test_cfn_lint_passes() -> None:
    """GIVEN template.yaml WHEN cfn-lint (CloudFormation properties, ranges, references) checks it THEN no finding."""
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--", str(TEMPLATE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_sam_validate_lint_passes(offline_env: dict[str, str]) -> None:
    result = _run([str(_sam_path()), "validate", "--lint", "--template-file", str(TEMPLATE)], offline_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout


def test_sam_validate_translator_passes(offline_env: dict[str, str]) -> None:
    """The translator pass catches SAM event-property mistakes that cfn-lint does not."""
    result = _run(
        [str(_sam_path()), "validate", "--region", "us-east-1", "--template-file", str(TEMPLATE)], offline_env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout


# ----------------------------------------------------------------------------- functions


def test_functions_follow_the_contract(source: dict[str, Any], cfn: dict[str, Any]) -> None:
    functions = _resources(cfn, "AWS::Lambda::Function")
    assert set(functions) == set(ALL_FUNCTIONS)
    layers = _resources(cfn, "AWS::Lambda::LayerVersion")
    assert len(layers) == 1
    for name, directory in ALL_FUNCTIONS.items():
        props = functions[name]["Properties"]
        assert props["Handler"] == "app.handler", name
        assert props["Runtime"] == "python3.12", name
        assert props["Architectures"] == ["arm64"], name
        # The poller's is a parameter (PollerMemorySize: bench/RESULTS.md's memory sweep), 256 by default.
        memory = props["MemorySize"]
        if memory == {"Ref": "PollerMemorySize"}:
            assert name == "PollerFunction" and cfn["Parameters"]["PollerMemorySize"]["Default"] == 256
        else:
            assert memory == 256, name
        assert [_logical_id(layer) for layer in props["Layers"]] == list(layers), name
        assert source["Resources"][name]["Properties"]["CodeUri"].rstrip("/") == f"functions/{directory}", name
    layer = source["Resources"]["WorkerlessLayer"]
    assert layer["Properties"]["ContentUri"].rstrip("/") == "layers/workerless"
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}


def test_every_function_shares_one_environment(cfn: dict[str, Any]) -> None:
    """Local mode takes the variables as they are: no key may differ between functions."""
    environments = [
        f["Properties"]["Environment"]["Variables"] for f in _resources(cfn, "AWS::Lambda::Function").values()
    ]
    first = environments[0]
    assert all(env == first for env in environments)
    assert {
        "WORKERLESS_ENGINE",
        "WORKERLESS_TABLE",
        "WORKERLESS_SECRET_ARN",
        "WORKERLESS_HEARTBEAT_QUEUE_URL",
        "WORKERLESS_TICKER_QUEUE_URL",
        "WORKERLESS_LEASE_SECONDS",
        "WORKERLESS_TICK_SECONDS",
        "WORKERLESS_ROUTES_PATH",
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_LOG_LEVEL",
    } <= set(first)
    # The routes are SSM parameters; the functions get only where they are (a constant size).
    assert "WORKERLESS_ROUTES" not in first
    assert first["WORKERLESS_ROUTES_PATH"] == {"Fn::Sub": ROUTES_PATH}
    assert first["WORKERLESS_TABLE"] == {"Ref": "JobsTable"}
    assert first["WORKERLESS_HEARTBEAT_QUEUE_URL"] == {"Ref": "HeartbeatQueue"}
    assert first["WORKERLESS_TICKER_QUEUE_URL"] == {"Ref": "TickerQueue"}
    assert first["WORKERLESS_SECRET_ARN"] == {"Ref": "EngineSecretArn"}


def test_routes_are_one_parameter_per_job_type_naming_its_queue(source: dict[str, Any], cfn: dict[str, Any]) -> None:
    """Each route's SSM parameter: under the stack's routes path, named for its type, a free
    (Standard, String) parameter whose value is the route the poller reads: the queue its handler
    consumes, the type's MaxInFlight (Mappings.Routes, else the parameter) and engine queue."""
    parameters = _resources(cfn, "AWS::SSM::Parameter")
    assert set(parameters) == {f"{c}Route" for c in JOB_TYPES.values()}
    default_max = cfn["Parameters"]["MaxInFlight"]["Default"]
    for job_type, camel in JOB_TYPES.items():
        props = parameters[f"{camel}Route"]["Properties"]
        assert props["Name"] == {"Fn::Sub": f"{ROUTES_PATH}/{camel}"}
        assert (props["Type"], props["Tier"]) == ("String", "Standard")
        route = _sub_route(cfn, props["Value"])
        (queue,) = _event_source_queues(cfn, f"{camel}Function")
        assert route == {
            "type": job_type,
            "queue": f"ref:{queue}",
            "max": int(_route_setting(source, job_type, "MaxInFlight", default_max)),
            "engineQueue": _route_setting(source, job_type, "EngineQueue", ""),
            "shard": _route_setting(source, job_type, "PollerShard", ""),
        }


def test_only_the_poller_reads_the_routes_and_only_their_path(cfn: dict[str, Any]) -> None:
    """GetParametersByPath is authorised against the path asked for (not the parameters returned):
    the poller's grant is that one path, and no other function has any ssm: action."""
    for function in ALL_FUNCTIONS:
        granted = [
            s
            for s in _statements(_role_of(cfn, function))
            if any(str(a).startswith("ssm:") for a in _as_list(s["Action"]))
        ]
        if function != "PollerFunction":
            assert granted == [], function
            continue
        assert [(s["Effect"], _as_list(s["Action"]), _as_list(s["Resource"])) for s in granted] == [
            ("Allow", ["ssm:GetParametersByPath"], [{"Fn::Sub": ROUTES_PATH_ARN}])
        ]


# ----------------------------------------------------------------------------- permissions


def test_every_function_has_its_own_role_without_managed_policies(cfn: dict[str, Any]) -> None:
    """SAM's generated role would attach AWSLambdaBasicExecutionRole and AWSLambdaSQSQueueExecutionRole,
    both on Resource "*"; the template writes each role out instead."""
    roles = [_logical_id(f["Properties"]["Role"]) for f in _resources(cfn, "AWS::Lambda::Function").values()]
    assert len(set(roles)) == len(roles) == len(ALL_FUNCTIONS)
    for role_name in roles:
        props = cfn["Resources"][role_name]["Properties"]
        assert not props.get("ManagedPolicyArns"), role_name
        principal = props["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        assert principal == {"Service": "lambda.amazonaws.com"}, role_name


def test_no_allow_statement_has_a_wildcard(cfn: dict[str, Any]) -> None:
    """Every Allow (roles and resource policies) names its actions and its resources."""
    checked = 0
    for name, resource in cfn["Resources"].items():
        props = resource.get("Properties", {})
        documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
        if "PolicyDocument" in props:
            documents.append(props["PolicyDocument"])
        for document in documents:
            for statement in _as_list(document["Statement"]):
                if statement["Effect"] != "Allow":
                    continue
                checked += 1
                for action in _as_list(statement["Action"]):
                    assert isinstance(action, str), f"{name}: action {action!r}"
                    assert "*" not in action, f"{name} allows {action!r}"
                for resource_ref in _as_list(statement["Resource"]):
                    # Intrinsics naming one resource or parameter, never a literal string ("*").
                    assert isinstance(resource_ref, dict), f"{name} allows Resource {resource_ref!r}"
                    if resource_ref == {"Fn::Sub": ROUTES_PATH_ARN}:
                        continue  # the routes' path (the poller's GetParametersByPath): no wildcard
                    target = _logical_id(resource_ref)
                    assert target in cfn["Resources"] or target in cfn["Parameters"], f"{name}: {resource_ref}"
    assert checked >= 6 * 3


#: The queue a function drains itself, on its schedule (no event source).
DRAINED = {"DeadLetterFunction": "JobDeadLetterQueue"}


@pytest.mark.parametrize("function", sorted(ALL_FUNCTIONS))
def test_function_reads_only_its_event_queues(cfn: dict[str, Any], function: str) -> None:
    """Each function receives from, and deletes in, its event source's queue, or the queue it
    drains itself (the dead-letter function's); the heartbeat also deletes settled job messages."""
    sources = set(_event_source_queues(cfn, function)) | ({DRAINED[function]} if function in DRAINED else set())
    assert len(sources) == 1, f"{function} reads {sources or 'no queue'}"
    assert _queues_allowed(cfn, function, "sqs:ReceiveMessage") == sources, function
    # The heartbeat also deletes a job message whose owed report it settled (SettleOwedReports).
    settles = {f"{c}Queue" for c in JOB_TYPES.values()} if function == "HeartbeatFunction" else set()
    assert _queues_allowed(cfn, function, "sqs:DeleteMessage") == sources | settles, function


def test_heartbeat_may_only_delete_job_messages_and_requeue_its_own_tickets(cfn: dict[str, Any]) -> None:
    """The owed-report path: DeleteMessage on each job queue (no receive, send or visibility change
    there); a failed ticket's ChangeMessageVisibility on the heartbeat queue only."""
    route_queues = {f"{c}Queue" for c in JOB_TYPES.values()}
    for statement in _statements(_role_of(cfn, "HeartbeatFunction")):
        targets = {_logical_id(r) for r in _as_list(statement["Resource"])}
        if targets & route_queues:
            # One statement per route (its HeartbeatPolicy), delete only.
            assert len(targets) == 1 and _as_list(statement["Action"]) == ["sqs:DeleteMessage"], statement
    assert _queues_allowed(cfn, "HeartbeatFunction", "sqs:ChangeMessageVisibility") == {"HeartbeatQueue"}
    for function in set(LIBRARY_FUNCTIONS) - {"HeartbeatFunction"}:
        assert _queues_allowed(cfn, function, "sqs:ChangeMessageVisibility") == set(), function
    # A handler hands back the jobs its batch has no time left to finish, on its own queue only.
    for route in JOB_TYPES.values():
        assert _queues_allowed(cfn, f"{route}Function", "sqs:ChangeMessageVisibility") == {f"{route}Queue"}, route


@pytest.mark.parametrize("function", sorted(ALL_FUNCTIONS))
def test_function_uses_the_table_and_the_secret(cfn: dict[str, Any], function: str) -> None:
    statements = list(_statements(_role_of(cfn, function)))
    table = [s for s in statements if any(_logical_id(r) == "JobsTable" for r in _as_list(s["Resource"]))]
    assert table, f"{function} cannot reach JobsTable"
    # Which table actions: exactly what the code calls, measured under local mode's IAM check by
    # tests/functional/devkit/local/test_iam_drift.py (not read from the template's comments here).
    secret = [s for s in statements if {"Ref": "EngineSecretArn"} in _as_list(s["Resource"])]
    assert [a for s in secret for a in _as_list(s["Action"])] == ["secretsmanager:GetSecretValue"]
    logs = [s for s in statements if any(str(a).startswith("logs:") for a in _as_list(s["Action"]))]
    assert [_logical_id(r) for s in logs for r in _as_list(s["Resource"])] == [f"{function}LogGroup"]
    log_group = cfn["Resources"][function]["Properties"]["LoggingConfig"]["LogGroup"]
    assert _logical_id(log_group) == f"{function}LogGroup"


@pytest.mark.parametrize("function", sorted(ALL_FUNCTIONS))
def test_function_logs_json_with_lambdas_levels_from_the_parameters(cfn: dict[str, Any], function: str) -> None:
    # SAM merges Globals' LoggingConfig with the function's own (its LogGroup): what is deployed.
    config = cfn["Resources"][function]["Properties"]["LoggingConfig"]
    assert config["LogFormat"] == "JSON"  # Lambda filters by level only in the JSON format
    assert config["SystemLogLevel"] == {"Ref": "SystemLogLevel"}
    assert config["ApplicationLogLevel"] == {"Fn::FindInMap": ["ApplicationLogLevels", {"Ref": "LogLevel"}, "Level"]}


def test_log_levels_drop_lambdas_report_lines_and_never_an_emf_line(cfn: dict[str, Any]) -> None:
    # By default Lambda's START/REPORT lines (INFO) are not sent; INFO brings them back.
    system = cfn["Parameters"]["SystemLogLevel"]
    assert system["Default"] == "WARN" and system["AllowedValues"] == ["DEBUG", "INFO", "WARN"]
    # Lambda takes a line without a "level" key (every EMF metric line) as INFO: for every LogLevel
    # the application level lets INFO through, and lets through every line the LogLevel writes.
    order = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"]
    python = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "ERROR": "ERROR", "CRITICAL": "FATAL"}
    levels = cfn["Mappings"]["ApplicationLogLevels"]
    assert set(levels) == set(cfn["Parameters"]["LogLevel"]["AllowedValues"])
    for log_level, row in levels.items():
        applied = order.index(row["Level"])
        assert applied <= order.index("INFO"), log_level
        assert applied <= order.index(python[log_level]), log_level
    assert levels["DEBUG"]["Level"] == "DEBUG"  # DEBUG lines still reach CloudWatch


def test_poller_sends_to_routes_heartbeat_and_ticker(cfn: dict[str, Any]) -> None:
    route_queues = {f"{c}Queue" for c in JOB_TYPES.values()}
    assert _queues_allowed(cfn, "PollerFunction", "sqs:SendMessage") == route_queues | {"HeartbeatQueue", "TickerQueue"}
    assert route_queues <= _queues_allowed(cfn, "PollerFunction", "sqs:GetQueueAttributes")
    assert _queues_allowed(cfn, "HeartbeatFunction", "sqs:SendMessage") == {"HeartbeatQueue"}
    for function in ("DeadLetterFunction", *(f"{c}Function" for c in JOB_TYPES.values())):
        assert _queues_allowed(cfn, function, "sqs:SendMessage") == set(), function


# ----------------------------------------------------------------------------- loops and events


@pytest.mark.parametrize("function", sorted(ALL_FUNCTIONS))
def test_recursive_loop_allowed_exactly_where_a_function_feeds_itself(cfn: dict[str, Any], function: str) -> None:
    """Lambda stops a function→queue→same-function loop after ~16 rounds unless RecursiveLoop is Allow."""
    loops = _queues_allowed(cfn, function, "sqs:SendMessage") & set(_event_source_queues(cfn, function))
    setting = cfn["Resources"][function]["Properties"].get("RecursiveLoop", "Terminate")
    assert (setting == "Allow") == bool(loops), (function, setting, loops)
    if function in ("PollerFunction", "HeartbeatFunction"):
        assert setting == "Allow"


def test_poller_runs_on_a_watchdog_schedule_and_on_ticks(cfn: dict[str, Any]) -> None:
    rules = [
        r["Properties"]
        for r in _resources(cfn, "AWS::Events::Rule").values()
        if any(_logical_id(t["Arn"]) == "PollerFunction" for t in r["Properties"]["Targets"])
    ]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(1 minute)"]
    assert set(_event_source_queues(cfn, "PollerFunction")) == {"TickerQueue"}


def test_a_failed_watchdog_tick_is_not_retried(cfn: dict[str, Any]) -> None:
    """EventBridge invokes the poller asynchronously: by default Lambda retries a failed invocation
    twice and EventBridge retries delivery for a day. Either retry is a whole extra poller run racing
    the next tick, which does the same work a minute later."""
    (config,) = [
        r["Properties"]
        for r in _resources(cfn, "AWS::Lambda::EventInvokeConfig").values()
        if _logical_id(r["Properties"]["FunctionName"]) == "PollerFunction"
    ]
    assert (config["MaximumRetryAttempts"], config["MaximumEventAgeInSeconds"]) == (0, 60)
    (rule,) = [
        r["Properties"]
        for r in _resources(cfn, "AWS::Events::Rule").values()
        if any(_logical_id(t["Arn"]) == "PollerFunction" for t in r["Properties"]["Targets"])
    ]
    (target,) = rule["Targets"]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}


def _route_setting(source: dict[str, Any], job_type: str, name: str, default: Any) -> Any:
    """A route's setting in Mappings.Routes (keyed by the route's name), else ``default``."""
    return ((source.get("Mappings") or {}).get("Routes") or {}).get(JOB_TYPES[job_type], {}).get(name, default)


@pytest.mark.parametrize("job_type", sorted(JOB_TYPES))
def test_handler_event_source(source: dict[str, Any], cfn: dict[str, Any], job_type: str) -> None:
    camel = JOB_TYPES[job_type]
    mappings = _event_source_queues(cfn, f"{camel}Function")
    assert list(mappings) == [f"{camel}Queue"]
    props = mappings[f"{camel}Queue"]
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # A route's own line sets its batch size (generate-report: one job per invocation, up to 900 s).
    expected = _route_setting(source, job_type, "BatchSize", cfn["Parameters"]["HandlerBatchSize"]["Default"])
    assert _default(cfn, props["BatchSize"]) == expected
    concurrency = _route_setting(
        source, job_type, "MaximumConcurrency", cfn["Parameters"]["HandlerMaximumConcurrency"]["Default"]
    )
    assert _default(cfn, props["ScalingConfig"]["MaximumConcurrency"]) == concurrency
    assert cfn["Parameters"]["HandlerMaximumConcurrency"]["MinValue"] == 2


def test_every_route_dead_letters_to_the_one_queue_the_dead_letter_function_drains(cfn: dict[str, Any]) -> None:
    """One job dead-letter queue for every route, and no event source on it (each idles at Lambda's
    long polls, about $0.26 a month): the dead-letter function drains it on a one-minute schedule,
    told the queue by WORKERLESS_DEAD_LETTER_QUEUE_URL. The message names its job type, so no queue
    per route is needed to tell them apart."""
    for camel in JOB_TYPES.values():
        redrive = cfn["Resources"][f"{camel}Queue"]["Properties"]["RedrivePolicy"]
        assert _logical_id(redrive["deadLetterTargetArn"]) == "JobDeadLetterQueue", camel
    assert _event_source_queues(cfn, "DeadLetterFunction") == {}
    function = cfn["Resources"]["DeadLetterFunction"]["Properties"]
    assert function["Environment"]["Variables"]["WORKERLESS_DEAD_LETTER_QUEUE_URL"] == {"Ref": "JobDeadLetterQueue"}
    rules = [
        r["Properties"]
        for r in _resources(cfn, "AWS::Events::Rule").values()
        if any(_logical_id(t["Arn"]) == "DeadLetterFunction" for t in r["Properties"]["Targets"])
    ]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(1 minute)"]
    # A failed drain is not retried (asynchronously, or by EventBridge): the next one does the same.
    assert [r["Targets"][0]["RetryPolicy"]["MaximumRetryAttempts"] for r in rules] == [0]
    configs = [
        c["Properties"]
        for c in _resources(cfn, "AWS::Lambda::EventInvokeConfig").values()
        if _logical_id(c["Properties"]["FunctionName"]) == "DeadLetterFunction"
    ]
    assert [c["MaximumRetryAttempts"] for c in configs] == [0]
    # The drain's two calls, on that queue only, in the role's own policy.
    assert _queues_allowed(cfn, "DeadLetterFunction", "sqs:ReceiveMessage") == {"JobDeadLetterQueue"}
    assert _queues_allowed(cfn, "DeadLetterFunction", "sqs:DeleteMessage") == {"JobDeadLetterQueue"}
    assert _queues_allowed(cfn, "DeadLetterFunction", "sqs:GetQueueAttributes") == set()
    assert not [
        name
        for name, r in _resources(cfn, "AWS::IAM::Policy").items()
        if {"Ref": "DeadLetterFunctionRole"} in r["Properties"]["Roles"]
    ]


# ----------------------------------------------------------------------------- queues and table


def _default(cfn: dict[str, Any], value: Any) -> int:
    """A number (SAM CLI's expansion resolves parameters to their defaults), or a parameter Ref
    resolved to its Default."""
    if isinstance(value, int | str):
        return int(value)
    return int(cfn["Parameters"][value["Ref"]]["Default"])


def test_visibility_timeout_is_at_least_six_times_the_consumer_timeout(cfn: dict[str, Any]) -> None:
    """At the template's defaults: Lambda's guidance (6 x: time to retry a throttled batch), but for
    the heartbeat, whose queue's visibility must fit in a lease (the next test) and which is not
    throttled (its concurrency is reserved). Every timeout and its queue's visibility are parameters
    (tests run shorter ones); Lambda itself refuses visibility < timeout, and so does local mode
    (tests/unit/devkit/local/test_local_rules.py)."""
    pairs = 0
    for function in ALL_FUNCTIONS:
        timeout = _default(cfn, cfn["Resources"][function]["Properties"]["Timeout"])
        for queue in _event_source_queues(cfn, function):
            visibility = _default(cfn, cfn["Resources"][queue]["Properties"]["VisibilityTimeout"])
            assert visibility >= (timeout if function == "HeartbeatFunction" else 6 * timeout), (queue, function)
            pairs += 1
    # One event queue each, but the dead-letter function's (it drains its queue on a schedule).
    assert pairs == len(ALL_FUNCTIONS) - len(DRAINED)
    resources = cfn["Resources"]
    assert _default(cfn, resources["generatereportFunction"]["Properties"]["Timeout"]) == 900
    assert _default(cfn, resources["generatereportQueue"]["Properties"]["VisibilityTimeout"]) == 5400
    # The largest HandlerTimeout still has 6 x under the job queues' default visibility (720).
    assert cfn["Parameters"]["HandlerTimeout"]["MaxValue"] * 6 <= _default(
        cfn, resources["chargepaymentQueue"]["Properties"]["VisibilityTimeout"]
    )


def test_a_heartbeat_invocation_that_fails_as_a_whole_costs_no_lease(cfn: dict[str, Any]) -> None:
    """A ticket arrives with two thirds of its shortest lease left (it is sent delayed a third of
    it). An invocation killed or timed out, or a batch whose invocation is throttled, brings its
    tickets back only after the heartbeat queue's visibility timeout: at the defaults that must end
    with time left for the next round's extends (a call's timeout) before any lease in it lapses."""
    resources, params = cfn["Resources"], cfn["Parameters"]
    lease = int(params["LeaseSeconds"]["Default"])
    visibility = _default(cfn, resources["HeartbeatQueue"]["Properties"]["VisibilityTimeout"])
    timeout = _default(cfn, resources["HeartbeatFunction"]["Properties"]["Timeout"])
    arrives_with = lease - lease / 3  # the ticket's delay is a third of the remaining lease
    assert timeout <= visibility, "Lambda refuses a visibility under the function's timeout"
    assert visibility + 10 <= arrives_with, (visibility, arrives_with)


@pytest.mark.parametrize(
    ("function", "reserved"),
    [("HeartbeatFunction", "HeartbeatConcurrency"), ("PollerFunction", "PollerReservedConcurrency")],
)
def test_the_functions_that_hold_leases_have_concurrency_reserved(
    cfn: dict[str, Any], function: str, reserved: str
) -> None:
    """A burst of handlers cannot throttle the poller or the heartbeat: each has concurrency reserved
    (unless ReserveConcurrency is false: an account whose quota cannot spare it), and no event source
    of it invokes more at once than its reservation (Lambda's event source mappings do not look at
    reserved concurrency: past it they would throttle the function themselves)."""
    props = cfn["Resources"][function]["Properties"]
    condition, value, otherwise = props["ReservedConcurrentExecutions"]["Fn::If"]
    assert condition == "ReservesConcurrency" and value == {"Ref": reserved} and otherwise == {"Ref": "AWS::NoValue"}
    assert cfn["Conditions"]["ReservesConcurrency"] == {"Fn::Equals": [{"Ref": "ReserveConcurrency"}, "true"]}
    assert cfn["Parameters"]["ReserveConcurrency"]["Default"] == "true"
    mappings = _event_source_queues(cfn, function)
    assert mappings
    limit = int(cfn["Parameters"][reserved]["Default"])
    for queue, mapping in mappings.items():
        if function == "PollerFunction":
            continue  # its reservation alone caps it (the next test)
        maximum = _default(cfn, mapping["ScalingConfig"]["MaximumConcurrency"])
        assert maximum <= limit, (queue, maximum, limit)


def test_the_poller_is_capped_by_its_reservation_or_else_by_its_event_source(cfn: dict[str, Any]) -> None:
    """ReserveConcurrency true (the default): the ticker event source sets no MaximumConcurrency (AWS
    scales such a mapping down to 2 pollers when traffic is low, an optimisation "not available when
    you enable the maximum concurrency setting"), and PollerReservedConcurrency (3: two ticker
    batches and the watchdog schedule) caps the poller, Lambda throttling past it. False: nothing
    reserved, and PollerConcurrency (Lambda's minimum 2) caps the event source instead, through the
    same condition."""
    params = cfn["Parameters"]
    (mapping,) = _event_source_queues(cfn, "PollerFunction").values()
    assert mapping["ScalingConfig"] == {
        "Fn::If": ["ReservesConcurrency", {"Ref": "AWS::NoValue"}, {"MaximumConcurrency": {"Ref": "PollerConcurrency"}}]
    }
    reserved = cfn["Resources"]["PollerFunction"]["Properties"]["ReservedConcurrentExecutions"]
    assert reserved == {
        "Fn::If": ["ReservesConcurrency", {"Ref": "PollerReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }
    assert params["ReserveConcurrency"]["Default"] == "true"
    assert params["PollerReservedConcurrency"]["Default"] == 3
    # Lambda's event source takes 2 batches at least: with the watchdog beside them, 3.
    assert params["PollerReservedConcurrency"]["MinValue"] == 3
    assert params["PollerConcurrency"]["Default"] == 2 and params["PollerConcurrency"]["MinValue"] == 2


def test_every_queue_sets_sqs_maximum_message_size(cfn: dict[str, Any]) -> None:
    """1 MiB: SQS's default and maximum since 2025, written out so the library reads one value."""
    for name, queue in _resources(cfn, "AWS::SQS::Queue").items():
        assert queue["Properties"]["MaximumMessageSize"] == 1_048_576, name


def test_every_queue_has_a_dead_letter_queue(cfn: dict[str, Any]) -> None:
    queues = _resources(cfn, "AWS::SQS::Queue")
    dead_letter = {
        _logical_id(q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"])
        for q in queues.values()
        if "RedrivePolicy" in q["Properties"]
    }
    assert dead_letter == {"JobDeadLetterQueue", "HeartbeatDeadLetterQueue", "TickerDeadLetterQueue"}
    for name, queue in queues.items():
        if name in dead_letter:
            continue
        redrive = queue["Properties"]["RedrivePolicy"]
        assert redrive["maxReceiveCount"] == {"Ref": "MaxReceiveCount"}, name
    assert cfn["Parameters"]["MaxReceiveCount"]["Default"] == 5
    # A message keeps its original enqueue time in the DLQ: the DLQ must keep it longer (SQS's maximum).
    assert cfn["Resources"]["JobDeadLetterQueue"]["Properties"]["MessageRetentionPeriod"] == 1_209_600


def test_queues_are_encrypted_and_refuse_plain_http(cfn: dict[str, Any]) -> None:
    queues = _resources(cfn, "AWS::SQS::Queue")
    policies = _resources(cfn, "AWS::SQS::QueuePolicy").values()
    by_queue = {_logical_id(q): p["Properties"]["PolicyDocument"] for p in policies for q in p["Properties"]["Queues"]}
    assert set(by_queue) == set(queues)
    for name, queue in queues.items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True, name
        deny = [s for s in _as_list(by_queue[name]["Statement"]) if s["Effect"] == "Deny"]
        assert len(deny) == 1, name
        assert deny[0]["Principal"] == "*"
        assert deny[0]["Action"] in ("sqs:*", ["sqs:*"])
        assert deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert _logical_id(deny[0]["Resource"]) == name


def test_jobs_table(cfn: dict[str, Any]) -> None:
    props = cfn["Resources"]["JobsTable"]["Properties"]
    assert cfn["Resources"]["JobsTable"]["Type"] == "AWS::DynamoDB::Table"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": "pk", "AttributeType": "S"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    # Encrypted at rest either way; the AWS managed key (KMS requests billed) only when asked for.
    assert props["SSESpecification"]["SSEEnabled"] == {"Fn::If": ["HasManagedTableKey", True, False]}
    assert cfn["Parameters"]["TableKey"]["Default"] == "aws-owned"
    assert cfn["Conditions"]["HasManagedTableKey"] == {"Fn::Equals": [{"Ref": "TableKey"}, "aws-managed"]}


def test_job_records_and_dead_letters_outlive_the_stack(cfn: dict[str, Any]) -> None:
    """The job table keeps redelivered jobs from running twice and holds results still owed; a
    dead-letter queue may hold the only trace of a job. Neither goes with a stack deletion or a
    replacing update, and the table refuses a DeleteTable."""
    table = cfn["Resources"]["JobsTable"]
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert table["Properties"]["DeletionProtectionEnabled"] is True
    dead_letter_queues = {
        q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for q in _resources(cfn, "AWS::SQS::Queue").values()
        if "RedrivePolicy" in q["Properties"]
    }
    assert dead_letter_queues == {"JobDeadLetterQueue", "HeartbeatDeadLetterQueue", "TickerDeadLetterQueue"}
    for name in dead_letter_queues:
        queue = cfn["Resources"][name]
        assert (queue.get("DeletionPolicy"), queue.get("UpdateReplacePolicy")) == ("Retain", "Retain"), name


def test_claim_check_bucket_is_private_encrypted_tls_only_and_expires_with_the_records(cfn: dict[str, Any]) -> None:
    """The claim check's bucket: SSE, every public-access block, objects owned by the bucket owner, a
    policy refusing plain HTTP, and a lifecycle expiring objects after the job record's TTL (the
    settings default: WORKERLESS_RECORD_TTL_SECONDS, which the template does not override)."""
    from workerless._core.settings import Settings

    bucket = cfn["Resources"]["PayloadBucket"]
    assert bucket["Type"] == "AWS::S3::Bucket"
    props = bucket["Properties"]
    [rule] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    [expiry] = [r for r in props["LifecycleConfiguration"]["Rules"] if "ExpirationInDays" in r]
    assert expiry["Status"] == "Enabled" and "Prefix" not in expiry and "Filter" not in expiry
    ttl = Settings.model_fields["record_ttl_seconds"].default
    assert expiry["ExpirationInDays"] * 86400 == ttl
    env = cfn["Resources"]["PollerFunction"]["Properties"]["Environment"]["Variables"]
    assert "WORKERLESS_RECORD_TTL_SECONDS" not in env
    assert env["WORKERLESS_PAYLOAD_BUCKET"] == {"Ref": "PayloadBucket"}
    [policy] = _resources(cfn, "AWS::S3::BucketPolicy").values()
    assert policy["Properties"]["Bucket"] == {"Ref": "PayloadBucket"}
    [deny] = _as_list(policy["Properties"]["PolicyDocument"]["Statement"])
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert {_logical_id(r) for r in deny["Resource"]} == {"PayloadBucket"} and len(deny["Resource"]) == 2


def _sub_text(value: Any, function: str) -> str:
    """An ``Fn::Sub``'s text with its own variables (a route's Type) put in."""
    text = value["Fn::Sub"]
    if isinstance(text, list):  # [text, {variable: value}]: a route's own prefix (its Type)
        text, variables = text
        for name, bound in variables.items():
            assert isinstance(bound, str), f"{function}: ${{{name}}} left unresolved: {bound!r}"
            text = text.replace(f"${{{name}}}", bound)
    assert isinstance(text, str)
    return text


def _s3_grants(cfn: dict[str, Any], function: str) -> set[tuple[str, str]]:
    """(action, resource suffix after the bucket ARN) of the function's S3 statements; for
    s3:ListBucket (on the bucket itself), ("s3:ListBucket", "?<s3:prefix pattern>") per pattern."""
    grants: set[tuple[str, str]] = set()
    for policy in _role_of(cfn, function)["Properties"]["Policies"]:
        for statement in _as_list(policy["PolicyDocument"]["Statement"]):
            actions = [a for a in _as_list(statement["Action"]) if a.startswith("s3:")]
            if not actions:
                continue
            assert statement["Sid"].startswith("ClaimCheck"), statement
            if actions == ["s3:ListBucket"]:
                # Held to the prefixes the function reads: the whole bucket is never listable.
                assert statement["Resource"] == {"Fn::GetAtt": ["PayloadBucket", "Arn"]}, statement
                assert list(statement["Condition"]) == ["StringLike"], statement
                assert list(statement["Condition"]["StringLike"]) == ["s3:prefix"], statement
                for pattern in _as_list(statement["Condition"]["StringLike"]["s3:prefix"]):
                    text = pattern if isinstance(pattern, str) else _sub_text(pattern, function)
                    grants.add(("s3:ListBucket", f"?{text}"))
                continue
            for resource in _as_list(statement["Resource"]):
                text = _sub_text(resource, function)
                assert text.startswith("${PayloadBucket.Arn}/"), text
                grants |= {(a, text.removeprefix("${PayloadBucket.Arn}")) for a in actions}
    return grants


def test_each_function_is_granted_only_its_claim_check_prefixes(cfn: dict[str, Any]) -> None:
    """The poller writes jobs/; a handler reads its own type's jobs/ and writes and reads its own
    results/; the heartbeat and the dead-letter function read results/ (to re-report). Each reader
    may list exactly the prefixes it reads (so S3 answers a missing object NoSuchKey, not
    AccessDenied); the poller, which reads nothing, may list nothing."""
    assert _s3_grants(cfn, "PollerFunction") == {("s3:PutObject", "/jobs/*")}
    for function in ("HeartbeatFunction", "DeadLetterFunction"):
        assert _s3_grants(cfn, function) == {("s3:GetObject", "/results/*"), ("s3:ListBucket", "?results/*")}, function
    for job_type, camel in JOB_TYPES.items():
        assert _s3_grants(cfn, f"{camel}Function") == {
            ("s3:GetObject", f"/jobs/{job_type}/*"),
            ("s3:PutObject", f"/results/{job_type}/*"),
            ("s3:GetObject", f"/results/{job_type}/*"),
            ("s3:ListBucket", f"?jobs/{job_type}/*"),
            ("s3:ListBucket", f"?results/{job_type}/*"),
        }, job_type


def _table_grants(cfn: dict[str, Any], function: str) -> set[tuple[str, str]]:
    """(action, dynamodb:LeadingKeys pattern) of the function's DynamoDB statements; each must be held
    by ForAllValues:StringLike on dynamodb:LeadingKeys and nothing else."""
    grants: set[tuple[str, str]] = set()
    for statement in _statements(_role_of(cfn, function)):
        actions = [a for a in _as_list(statement["Action"]) if a.startswith("dynamodb:")]
        if not actions:
            continue
        assert statement["Effect"] == "Allow", statement
        assert [_logical_id(r) for r in _as_list(statement["Resource"])] == ["JobsTable"], statement
        condition = statement.get("Condition")
        assert condition is not None and list(condition) == ["ForAllValues:StringLike"], (function, statement)
        tests = condition["ForAllValues:StringLike"]
        assert list(tests) == ["dynamodb:LeadingKeys"], (function, statement)
        for pattern in _as_list(tests["dynamodb:LeadingKeys"]):
            if isinstance(pattern, dict):  # !Sub [text, {Type: value}]: a route's own type
                text, variables = pattern["Fn::Sub"]
                for name, value in variables.items():
                    assert isinstance(value, str), f"{function}: ${{{name}}} left unresolved: {value!r}"
                    text = text.replace(f"${{{name}}}", value)
                pattern = text
            grants |= {(a, pattern) for a in actions}
    return grants


def test_each_role_reaches_only_its_own_items_of_the_job_table(cfn: dict[str, Any]) -> None:
    """Isolation between routes (issue 26, 2.10): a handler's role reaches its own type's records
    (job#<type>#*) and the engine's shared session, never another type's record nor the poller lock
    (state#poller-lock, which holds the intent batches); the heartbeat and the dead-letter function
    every route's records (job#*) but no state# item beyond the session; the poller its state# items
    and, of records, only the batch read and the fence's put. No role may Scan or Query: ForAllValues
    holds on a request without a leading key."""
    session = {("dynamodb:GetItem", "state#stagenext-session#*"), ("dynamodb:PutItem", "state#stagenext-session#*")}
    assert _table_grants(cfn, "PollerFunction") == {
        ("dynamodb:GetItem", "state#*"),
        ("dynamodb:PutItem", "state#*"),
        ("dynamodb:BatchGetItem", "job#*"),  # MaxInFlight's exact count of the jobs it activated
        ("dynamodb:PutItem", "job#*"),  # the fence before an abandoned batch is handed back
    }
    assert _table_grants(cfn, "HeartbeatFunction") == session | {
        ("dynamodb:BatchGetItem", "job#*"),
        ("dynamodb:GetItem", "job#*"),  # an owed report's whole record
        ("dynamodb:UpdateItem", "job#*"),
    }
    assert _table_grants(cfn, "DeadLetterFunction") == session | {
        (a, "job#*") for a in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
    }
    for job_type, camel in JOB_TYPES.items():
        own = {(a, f"job#{job_type}#*") for a in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")}
        assert _table_grants(cfn, f"{camel}Function") == own | session, job_type


# ----------------------------------------------------------------------------- parameters and outputs


def test_parameters_match_the_contract(cfn: dict[str, Any]) -> None:
    params = cfn["Parameters"]
    defaults = {
        "EngineName": "sheptra",
        "LeaseSeconds": 60,
        "MaxInFlight": 10,
        "HandlerBatchSize": 5,
        "HandlerMaximumConcurrency": 10,
        "HandlerTimeout": 120,
        "MaxReceiveCount": 5,
        "TickSeconds": 20,
        "LogLevel": "INFO",
        "AlarmTopicArn": "",
    }
    assert {name: params[name]["Default"] for name in defaults} == defaults
    assert params["EngineName"]["AllowedValues"] == list(ENGINE_NAMES)
    assert "Default" not in params["EngineSecretArn"]
    assert re.fullmatch(
        params["EngineSecretArn"]["AllowedPattern"],
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:workerless/sheptra-AbCdEf",
    )
    # A partial ARN (no random suffix) deploys, then every GetSecretValue is AccessDenied: the roles
    # grant the ARN as given and IAM matches it literally. Refused at deploy instead.
    for partial in (
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:workerless/sheptra",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:workerless/sheptra-AbCd",
    ):
        assert not re.fullmatch(params["EngineSecretArn"]["AllowedPattern"], partial), partial
    # The job queues' visibility (720) is 6 x the largest HandlerTimeout allowed.
    assert params["HandlerTimeout"]["MaxValue"] * 6 <= params["JobQueueVisibilityTimeout"]["Default"] == 720
    timings = {
        "JobQueueVisibilityTimeout": 720,
        "HeartbeatTimeout": 20,
        "HeartbeatVisibilityTimeout": 30,
    }
    assert {name: params[name]["Default"] for name in timings} == timings, "the template's timings"


def test_no_parameter_is_named_after_a_job_type_and_a_long_route_sets_its_own_timings(
    source: dict[str, Any], cfn: dict[str, Any]
) -> None:
    """`sam deploy --guided` asks every deployment each parameter: none is one route's (an example
    type an application may not have). generate-report's long timings and batch size are its own
    Mappings.Routes line's, and they hold Lambda's rule (visibility 6 x its timeout, at most 900 s)."""
    stems = {camel.lower() for camel in JOB_TYPES.values()} | {t.replace("-", "") for t in JOB_TYPES}
    named = [p for p in cfn["Parameters"] if any(stem in p.lower() for stem in stems)]
    assert named == [], f"parameters named after a job type: {named}"
    assert [p for p in source["Parameters"] if "timing" in p.lower()] == []
    line = source["Mappings"]["Routes"]["generatereport"]
    assert {k: line[k] for k in ("Timeout", "VisibilityTimeout", "BatchSize")} == {
        "Timeout": 900,
        "VisibilityTimeout": 5400,
        "BatchSize": 1,
    }
    assert "Timing" not in line
    function = cfn["Resources"]["generatereportFunction"]["Properties"]
    assert _default(cfn, function["Timeout"]) == 900
    assert _default(cfn, cfn["Resources"]["generatereportQueue"]["Properties"]["VisibilityTimeout"]) == 5400


def test_outputs_name_the_table_queues_and_functions(cfn: dict[str, Any]) -> None:
    referenced = {_logical_id(o["Value"]) for o in cfn["Outputs"].values() if isinstance(o["Value"], dict)}
    queues = set(_resources(cfn, "AWS::SQS::Queue"))
    assert {"JobsTable", *ALL_FUNCTIONS, *queues} <= referenced


# ----------------------------------------------------------------------------- code, build and events


@pytest.mark.parametrize(("function", "directory"), sorted(LIBRARY_FUNCTIONS.items()))
def test_library_entry_points_are_one_import(function: str, directory: str) -> None:
    """functions/<dir>/app.py is a docstring and `from workerless.entrypoints import <dir> as handler`."""
    path = ROOT / "functions" / directory / "app.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    assert ast.get_docstring(tree), path
    assert len(body) == 1, path
    node = body[0]
    assert isinstance(node, ast.ImportFrom), path
    assert node.module == "workerless.entrypoints"
    assert [(a.name, a.asname) for a in node.names] == [(directory, "handler")]
    # No requirements.txt: `sam build` copies the directory without needing python3.12.
    requirements = path.parent / "requirements.txt"
    assert not requirements.exists() or not requirements.read_text(encoding="utf-8").strip()


def test_layer_requirements_pin_the_tested_versions_without_boto3() -> None:
    lines = (ROOT / "layers" / "workerless" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    pins = dict(line.split("==") for line in lines if line.strip() and not line.startswith("#"))
    assert set(pins) == {"aws-lambda-powertools", "httpx", "pydantic", "python-dotenv", "opentelemetry-api"}
    assert {name: version(name) for name in pins} == pins


def test_layer_build_asks_pip_for_lambda_wheels(tmp_path: Path) -> None:
    """GIVEN a stand-in for pip WHEN make builds the layer THEN pip is asked for arm64/cp312 binary wheels
    into python/, and the package is copied beside them with Python 3.12's bytecode only."""
    recorder = tmp_path / "fake-python"
    log = tmp_path / "pip-args.json"
    recorder.write_text(
        f'#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, "w").write(json.dumps(sys.argv[1:]))\n'
    )
    recorder.chmod(0o755)
    artifacts = tmp_path / "artifacts"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        ["make", "--no-print-directory", "build-WorkerlessLayer", f"ARTIFACTS_DIR={artifacts}", f"PYTHON={recorder}"],
        cwd=ROOT / "layers" / "workerless",
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    args = json.loads(log.read_text())
    assert args[:3] == ["-m", "pip", "install"]
    joined = " ".join(args)
    for expected in (
        "--platform manylinux2014_aarch64",
        "--implementation cp",
        "--python-version 3.12",
        "--only-binary=:all:",
        f"--target {artifacts / 'python'}",
        "--requirement requirements.txt",
    ):
        assert expected in joined
    package = artifacts / "python" / "workerless"
    assert (package / "__init__.py").is_file()
    assert (package / "_core" / "model.py").is_file()
    pycs = list(package.rglob("*.pyc"))
    assert {p.name.rsplit(".", 2)[1] for p in pycs} == {"cpython-312"}
    assert len(pycs) == len(list(package.rglob("*.py")))


def _records(name: str) -> list[dict[str, Any]]:
    data = json.loads((ROOT / "events" / name).read_text(encoding="utf-8"))
    records: list[dict[str, Any]] = data["Records"]
    for record in records:
        assert record["eventSource"] == "aws:sqs"
        assert record["md5OfBody"] == hashlib.md5(record["body"].encode(), usedforsecurity=False).hexdigest()
    return records


def test_sample_events_carry_workerless_messages() -> None:
    schedule = json.loads((ROOT / "events" / "schedule.json").read_text(encoding="utf-8"))
    assert schedule["source"] == "aws.events"
    assert schedule["detail-type"] == "Scheduled Event"

    jobs = [ActivatedJob.from_message(r["body"]) for r in _records("sqs-charge-payment.json")]
    assert jobs
    assert {j.ref.engine for j in jobs} == {"sheptra"}
    assert {j.ref.job_type for j in jobs} == {"charge-payment"}
    assert all(j.lease_expires_at > j.activated_at for j in jobs)

    (ticket_record,) = _records("sqs-heartbeat.json")
    ticket = Ticket.from_json(ticket_record["body"])
    assert ticket.engine == "sheptra"
    assert [e.ref for e in ticket.entries] == [j.ref for j in jobs]
    assert [e.lease_expires_at for e in ticket.entries] == [j.lease_expires_at for j in jobs]
    assert ticket.first_seen >= max(j.activated_at for j in jobs)

    dead = [ActivatedJob.from_message(r["body"]) for r in _records("sqs-deadletter.json")]
    assert dead
    # Several types in one batch, from the one job dead-letter queue: the type is in each body.
    assert {j.ref.job_type for j in dead} >= {"charge-payment", "send-receipt"}
    assert all(":workerless-JobDeadLetterQueue-" in r["eventSourceARN"] for r in _records("sqs-deadletter.json"))
