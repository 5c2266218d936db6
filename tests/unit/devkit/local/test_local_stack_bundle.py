"""local/stack's refusals, without a stack: a bundle it cannot run, a layer that does not ship the
runtime this process imports, a created value still holding a ${Name} as text."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import workerless
from workerless_devkit.local.stack import BundleError, CodeMismatchError, load_bundle
from workerless_devkit.local.stack.code import check_layer, extract_code
from workerless_devkit.local.stack.read import _check_resolved

PACKAGE = Path(workerless.__file__).parent


def _layer(overrides: dict[str, bytes] | None = None, drop: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(PACKAGE.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name = path.relative_to(PACKAGE.parent).as_posix()
            if name == drop:
                continue
            archive.writestr(f"python/{name}", (overrides or {}).get(name, path.read_bytes()))
    return buffer.getvalue()


def _bundle(tmp_path: Path, **changes: object) -> Path:
    data = {
        "stack_name": "workerless-rehearsal",
        "region": "us-east-1",
        "account_id": "123456789012",
        "sam_cli_version": "1.170.0",
        "artifact_bucket": "artifacts",
        "parameters": {"EngineName": "sheptra"},
        **changes,
    }
    (tmp_path / "bundle.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "transformed.json").write_text('{"Resources": {}}', encoding="utf-8")
    return tmp_path


def test_a_layer_with_the_imported_runtime_passes_and_counts_its_files() -> None:
    assert check_layer(_layer(), "layer L") == len([p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts])


def test_a_layer_whose_runtime_differs_is_refused_naming_the_files() -> None:
    with pytest.raises(
        CodeMismatchError,
        match=r"layer L: .*differ: workerless/_core/retry.py.*only in the imported package: workerless/_core/ports.py",
    ):
        check_layer(_layer({"workerless/_core/retry.py": b"# changed\n"}, drop="workerless/_core/ports.py"), "layer L")


def test_a_layer_without_the_runtime_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("python/other.py", b"")
    with pytest.raises(CodeMismatchError, match="does not ship the workerless runtime"):
        check_layer(buffer.getvalue(), "layer L")


def test_a_code_zip_entry_outside_its_root_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../escape.py", b"")
    with pytest.raises(BundleError, match="outside its root"):
        extract_code(buffer.getvalue(), tmp_path / "fn", "Fn")


def test_a_bundle_is_read_and_its_parameters_are_text(tmp_path: Path) -> None:
    bundle = load_bundle(_bundle(tmp_path, parameters={"LeaseSeconds": 5}))
    assert (bundle.stack_name, bundle.parameters) == ("workerless-rehearsal", {"LeaseSeconds": "5"})


def test_a_bundle_of_another_region_and_account_runs_there(tmp_path: Path) -> None:
    bundle = load_bundle(_bundle(tmp_path, region="eu-west-1", account_id="210987654321"))
    assert bundle.place.queue_url("q") == "https://sqs.eu-west-1.amazonaws.com/210987654321/q"
    assert bundle.place.function_arn("f") == "arn:aws:lambda:eu-west-1:210987654321:function:f"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"stack_name": ""}, "stack_name must be a non-empty string"),
        ({"region": "US East"}, "region 'US East' is not an AWS region name"),
        ({"region": "cn-north-1"}, "not in the aws partition"),
        ({"account_id": "1234"}, "not a 12-digit AWS account id"),
        ({"parameters": ["x"]}, "parameters must be a mapping"),
    ],
)
def test_a_bundle_local_mode_cannot_run_is_refused_naming_why(
    tmp_path: Path, changes: dict[str, object], expected: str
) -> None:
    with pytest.raises(BundleError, match=expected):
        load_bundle(_bundle(tmp_path, **changes))


def test_a_directory_without_a_bundle_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"bundle\.json"):
        load_bundle(tmp_path)


def test_a_created_value_holding_a_reference_as_text_is_refused() -> None:
    _check_resolved(["arn:aws:s3:::bucket/jobs/*", "$5 {not a ref}"], "role R")
    with pytest.raises(BundleError, match=r"role R holds \$\{PayloadBucket.Arn\} as text"):
        _check_resolved(["${PayloadBucket.Arn}/jobs/*"], "role R")
