"""Every route of the app answers only what its OpenAPI operation documents (docs/api.md).

The walk iterates the app's routes (app/routing.py's `app_routes`, so a route added later is
walked too) and drives each operation with requests that provoke each class of answer: unknown
archive, version, tensor, model and file; parameters out of their enum, of the wrong type, or
repeated; Range (one, several, unsatisfiable), If-None-Match, Accept; no token, a wrong one, a bad
signed URL; ?redirect=1. Every status must be documented for the operation, with its required
headers (matching their schemas) and a documented media type; every error body must match the
`Error` schema with a code the response lists, whose status in app/errors.py is the one answered.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import zipfile
from collections import defaultdict

import jsonschema
import pytest
from fastapi.routing import APIRoute
from starlette.testclient import TestClient

from app.errors import ERROR_CODES
from app.openapi import CODES_KEY, ERROR_SCHEMA_NAME
from app.routing import app_routes
from testing.paths import ARCHIVES
from testing.service import make_app

pytestmark = pytest.mark.unit

TOKEN = "walk-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
PROGRAM = b"\x00program bytes\xff" * 20
APP_ROOT = pathlib.Path(__file__).resolve().parent.parent / "app"


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    """The app (token set) over layouts, pickled and an archive carrying an ExecuTorch program."""
    carry = tmp_path_factory.mktemp("walk") / "carry.pt2"
    shutil.copy(ARCHIVES / "layouts.pt2", carry)
    with zipfile.ZipFile(carry, "a") as archive:
        archive.writestr("layouts/data/executorch/model.pte", PROGRAM)
    specs = [f"carry={carry}", f"pickled={ARCHIVES / 'pickled.pt2'}"]
    app = make_app(specs, api_token=TOKEN, allow_open=(f"{ARCHIVES}/*",), open_burst=10_000)
    with TestClient(app, follow_redirects=False) as client:
        document = client.get("/openapi.json", headers=AUTH).json()
        versions = {a["id"]: a["version"] for a in client.get("/archives", headers=AUTH).json()["archives"]}
        yield app, client, document, versions


def operations(app):
    """(route path template as the document writes it, method) of every documented route."""
    for route in app_routes(app):
        original = getattr(route, "original_route", route)
        if isinstance(original, APIRoute) and route.include_in_schema:
            for method in sorted(route.methods):
                yield route.path_format, method


def path_values(parameter: str, versions: dict[str, str]) -> list[str]:
    """Values to put in a path parameter: real ones first, then unknown ones. A parameter named
    otherwise than today's gets every kind of value."""
    archives = ["carry", f"carry@{versions['carry']}", "nope", "carry@0000000000000000"]
    names = ["transposed", "model.pte", "strided", "missing/x"]
    if "archive" in parameter:
        return archives
    if parameter == "name":
        return names
    return [*archives[:1], *names[:2], "missing"]


# the JSON body of an operation that takes one (POST /archives/open)
REAL_BODY = {"location": str(ARCHIVES / "layouts.pt2")}

# a real value for string query parameters of these names ("model" for any other)
REAL_STRINGS = {"path": "/archives/carry/tensors", "prefix": "lin", "redirect": "1"}


def query_variants(operation: dict) -> list[dict[str, object]]:
    """Query strings: the required parameters alone; then each parameter valid, out of its schema,
    repeated. Required parameters are in every one."""
    base: dict[str, object] = {}
    variants: list[dict[str, object]] = []
    for parameter in operation.get("parameters", ()):
        if parameter["in"] != "query":
            continue
        name, schema = parameter["name"], parameter["schema"]
        if "enum" in schema:
            valid, invalid = schema["enum"][-1], "not-in-enum"
        elif schema.get("type") == "array":
            valid, invalid = ["transposed", "strided"], ["missing"]
        elif schema.get("type") == "integer":
            valid, invalid = "1", "x"
        else:
            valid, invalid = REAL_STRINGS.get(name, "model"), "missing"
        if parameter.get("required"):
            base[name] = valid
        variants += [{name: valid}, {name: invalid}]
        if schema.get("type") != "array":
            variants.append({name: [str(valid), str(valid)]})
    return [{**base, **variant} for variant in [{}, *variants]]


HEADER_VARIANTS = [
    {"range": "bytes=0-0"},
    {"range": "bytes=0-1,4-5"},
    {"range": "bytes=999999999-"},
    {"if-none-match": "*"},
    {"accept": "text/html"},
]


def check(document: dict, template: str, method: str, response, seen: dict) -> None:
    """The answer is one the operation documents, as it documents it."""
    operation = document["paths"][template][method.lower()]
    status = str(response.status_code)
    what = f"{method} {response.request.url} -> {status}: {response.content[:300]!r}"
    assert status in operation["responses"], f"undocumented status: {what}"
    documented = operation["responses"][status]
    seen[template, method].add(response.status_code)
    for name, header in documented.get("headers", {}).items():
        value = response.headers.get(name)
        if header.get("required"):
            assert value is not None, f"required header {name} missing: {what}"
        if value is not None:
            jsonschema.validate(value, header["schema"])
    content_type = response.headers.get("content-type")
    if content_type is not None and response.status_code not in (304, 307):
        media_type = content_type.split(";")[0].strip()
        documented_types = [t.split(";")[0] for t in documented.get("content", {})]
        assert media_type in documented_types, f"{media_type} not in {documented_types}: {what}"
    if response.status_code >= 400:
        assert content_type == "application/json", what
        if method == "HEAD":
            assert response.content == b"", what
            return
        body = response.json()
        jsonschema.validate(body, document["components"]["schemas"][ERROR_SCHEMA_NAME])
        code = body["error"]["code"]
        assert code in documented[CODES_KEY], f"{code} not listed for {status}: {what}"
        assert ERROR_CODES[code].status == response.status_code, f"{code} is not a {status}: {what}"


def test_every_route_answers_only_documented_statuses(walked) -> None:
    app, client, document, versions = walked
    seen: dict[tuple[str, str], set[int]] = defaultdict(set)
    walked_operations = list(operations(app))
    assert len(walked_operations) >= 27
    for template, method in walked_operations:
        operation = document["paths"][template][method.lower()]
        parameters = [p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"]
        options = [path_values(p, versions) for p in parameters]
        body = {"json": REAL_BODY} if "requestBody" in operation else {}
        # each value of each parameter, the others at their first (real) value
        real = tuple(o[0] for o in options)
        fillings = {real}
        for index, values in enumerate(options):
            fillings |= {tuple(v if i == index else o[0] for i, o in enumerate(options)) for v in values}
        for filling in sorted(fillings):
            path = template
            for parameter, value in zip(parameters, filling):
                path = path.replace("{" + parameter + "}", value)
            plain = query_variants(operation)[0]
            response = client.request(method, path, params=plain, headers=AUTH, **body)
            check(document, template, method, response, seen)
            if filling != real:
                continue
            # the real resource: every query, conditional, range and credential variant
            requests = [(q, {}) for q in query_variants(operation)] + [({}, h) for h in HEADER_VARIANTS]
            for query, headers in requests:
                response = client.request(method, path, params=query, headers={**AUTH, **headers}, **body)
                check(document, template, method, response, seen)
                etag = response.headers.get("etag")
                if response.status_code == 200 and etag:  # and its validator: 304
                    validated = {**AUTH, "if-none-match": etag}
                    again = client.request(method, path, params=query, headers=validated)
                    check(document, template, method, again, seen)
            for credentials in ({}, {"authorization": "Bearer wrong"}):  # the token gate
                check(document, template, method, client.request(method, path, headers=credentials), seen)
            signed = client.request(method, path, params={"exp": "1", "sig": "00"})
            check(document, template, method, signed, seen)
    statuses = set().union(*seen.values())
    assert {200, 206, 304, 307, 401, 403, 404, 406, 416, 422} <= statuses, sorted(statuses)
    assert all(status < 500 for status in statuses), sorted(statuses)
    assert {(t, m) for t, m in walked_operations} == set(seen)
    for (template, method), answered in seen.items():  # every operation reached something real
        assert answered & {200, 206, 304}, f"{method} {template} never succeeded: {sorted(answered)}"


def test_options_and_unknown_methods_name_the_methods_of_the_path(walked) -> None:
    app, client, document, _ = walked
    templates = {template for template, _ in operations(app)}
    for template in sorted(templates):
        path = template.replace("{archive_id}", "carry").replace("{name}", "transposed")
        methods = {m.upper() for m in document["paths"][template]} | {"OPTIONS"}
        options = client.options(path)
        assert options.status_code == 204, (path, options.text)
        assert set(options.headers["allow"].split(", ")) == methods, (path, options.headers)
        refused = client.delete(path, headers=AUTH)
        assert refused.status_code == 405, (path, refused.text)
        assert refused.headers["allow"] == options.headers["allow"]
        assert refused.json()["error"]["code"] == "method_not_allowed"


def test_cors_preflight_still_answered_by_the_cors_layer() -> None:
    app = make_app([f"layouts={ARCHIVES / 'layouts.pt2'}"], cors_origins=("https://app.example",))
    with TestClient(app) as client:
        preflight = client.options(
            "/tensors/transposed/data",
            headers={"origin": "https://app.example", "access-control-request-method": "GET"},
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        refused = client.options(
            "/tensors/transposed/data",
            headers={"origin": "https://evil.example", "access-control-request-method": "GET"},
        )
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "cors_refused"
        plain = client.options("/tensors/transposed/data")
        assert plain.status_code == 204 and plain.headers["allow"] == "GET, HEAD, OPTIONS"


def test_the_document_lists_the_codes_of_app_errors(walked) -> None:
    _, _, document, _ = walked
    error = document["components"]["schemas"][ERROR_SCHEMA_NAME]
    assert error["properties"]["error"]["properties"]["code"]["enum"] == sorted(ERROR_CODES)
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for template, operations_ in document["paths"].items():
        for method, operation in operations_.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": f"#/components/schemas/{ERROR_SCHEMA_NAME}"
                    }, (method, template, status)
                    assert response[CODES_KEY], (method, template, status)
    alignment = next(
        p
        for p in document["paths"]["/archives/{archive_id}/ptd"]["get"]["parameters"]
        if p["name"] == "alignment"
    )
    assert alignment["schema"]["enum"] == [1 << n for n in range(3, 21)]


def literal_codes() -> set[str]:
    """The codes app/ passes as literals to error_response, ApiError and SignatureRefused."""
    found = set()
    for path in APP_ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            position = {"error_response": 1, "ApiError": 1, "SignatureRefused": 0}.get(name)
            if position is not None and len(node.args) > position:
                argument = node.args[position]
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    found.add(argument.value)
    return found


def test_every_code_app_answers_is_listed() -> None:
    codes = literal_codes()
    assert len(codes) > 10
    assert codes <= set(ERROR_CODES), sorted(codes - set(ERROR_CODES))
