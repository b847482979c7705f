"""The OpenAPI document states everything a route can answer: each status, its headers, its media
types, and for errors the `Error` body and the codes it may carry (docs/api.md).

A route declares what kind of thing it serves with `responses=answers(KIND, ...)`; the kinds say
which statuses, headers and error codes follow (a tensor's bytes: 200, 206, 304, 406, 416, 503
with Accept-Ranges, Content-Range, ETag, X-Tensor-*; an archive's: 404/410/502/503, ...). The
statuses of every error code come from app/errors.py's ERROR_CODES, the only list of codes.
`install` adds what holds for every route by the app's own rules: 401/403 where the token gate
applies (app/security.py), 422 where there are parameters to validate.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from .errors import ERROR_CODES
from .routing import app_routes
from .security import is_open

ERROR_SCHEMA_NAME = "Error"
ERROR_REF = {"$ref": f"#/components/schemas/{ERROR_SCHEMA_NAME}"}
CODES_KEY = "x-error-codes"  # on each error response: the codes it may carry (tests read it too)
JSON = "application/json"
OBJECT = {"type": "object"}


def error_schema() -> dict[str, Any]:
    """`{"error": {"code", "message"}}`; 404/410 for a version also name the current one."""
    return {
        "title": ERROR_SCHEMA_NAME,
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {
                        "type": "string",
                        "enum": sorted(ERROR_CODES),
                        "description": "; ".join(f"{c}: {e.meaning}" for c, e in sorted(ERROR_CODES.items())),
                    },
                    "message": {"type": "string"},
                    "current_version": {
                        "type": ["string", "null"],
                        "description": "version_not_found, version_gone: the version served now",
                    },
                    "current_url": {"type": "string", "description": "version_gone: the URL at that version"},
                },
            }
        },
    }


def header(description: str, *, pattern: str | None = None, required: bool = False, **schema: Any) -> dict:
    return {
        "description": description,
        "required": required,
        "schema": {"type": "string", **({"pattern": pattern} if pattern else {}), **schema},
    }


ETAG = header("strong validator of this representation", pattern=r'^(W/)?"[^"]*"$', required=True)
CACHE_CONTROL = header("immutable under a versioned URL, no-cache otherwise (docs/edge-delivery.md)")
CONTENT_LOCATION = header("the versioned URL of what an unversioned URL sent")
ACCEPT_RANGES = header("byte ranges are served", required=True, enum=["bytes"])
CONTENT_RANGE = header("the range sent, of the whole length", pattern=r"^bytes [0-9]+-[0-9]+/[0-9]+$")
UNSATISFIED_RANGE = header("the body's length", pattern=r"^bytes \*/[0-9]+$", required=True)
REPR_DIGEST = header(
    "SHA-256 of the whole representation (RFC 9530), when known", pattern=r"^sha-256=:[A-Za-z0-9+/]+=*:$"
)
RETRY_AFTER = header("seconds to wait before retrying", pattern=r"^[0-9]+$", required=True)
WWW_AUTHENTICATE = header("the scheme to authenticate with", required=True, enum=["Bearer"])
LOCATION = header("the versioned URL", required=True)
VARY = header("the representation varies with Accept-Encoding")
CONTENT_DISPOSITION = header("the file name to save as", required=True)
TENSOR_HEADERS = {
    "X-Tensor-Dtype": header("the tensor's dtype (torch name)", required=True),
    "X-Tensor-Shape": header("sizes, comma-separated", pattern=r"^([0-9]+(,[0-9]+)*)?$", required=True),
    "X-Tensor-Dim-Order": header(
        "the order of the dimensions in memory", pattern=r"^([0-9]+(,[0-9]+)*)?$", required=True
    ),
    "Repr-Digest": REPR_DIGEST,
}
STALE = header(
    "only from a cached version opened because its origin could not be reached: the version, and "
    "seconds since the origin last confirmed it (docs/cache.md, stale-if-error)",
    pattern=r"^[^;]+; age=[0-9]+$",
)
SKIPPED = {"X-Pt2serve-Skipped": header("tensors left out (percent-encoded names, comma-separated)")}
# headers every answer with a given status carries, whatever the route
STATUS_HEADERS = {
    401: {"WWW-Authenticate": WWW_AUTHENTICATE},
    416: {"Content-Range": UNSATISFIED_RANGE},
    429: {"Retry-After": RETRY_AFTER},
    503: {"Retry-After": RETRY_AFTER},
}


@dataclass(frozen=True)
class Kind:
    """What a kind of route can answer: error codes (their statuses are ERROR_CODES'), and the
    other responses (status → OpenAPI response object)."""

    codes: frozenset[str] = frozenset()
    responses: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)


def kind(*codes: str, **responses: Mapping[str, Any]) -> Kind:
    """A Kind from its codes and its responses given as `_200=...` (keyword names are identifiers)."""
    unknown = set(codes) - set(ERROR_CODES)
    if unknown:
        raise ValueError(f"error codes not in app/errors.py's ERROR_CODES: {sorted(unknown)}")
    return Kind(frozenset(codes), {int(status.lstrip("_")): value for status, value in responses.items()})


def _binary(media_types: Iterable[str]) -> dict[str, Any]:
    return {media_type: {"schema": {"type": "string", "format": "binary"}} for media_type in media_types}


@dataclass(frozen=True)
class Listing:
    """A JSON body that lists resources: the routes below it get OpenAPI links from it, which
    generated clients and stateful testers follow (GET /archives → /archives/{archive_id}/...)."""

    items: str  # JSON pointer of the list in the body: "/archives"
    key: str  # the field of an item that is the path parameter's value: "id"
    query: Mapping[str, str] = field(default_factory=dict)  # query parameter → item field


LISTING_KEY = "x-pt2serve-listing"  # carried from the route to `document`, which removes it


def json_resource(description: str, listing: Listing | None = None) -> Kind:
    """JSON with an ETag of its bytes, revalidated (304 on If-None-Match)."""
    headers = {
        "ETag": ETAG,
        "Cache-Control": CACHE_CONTROL,
        "Content-Location": CONTENT_LOCATION,
        "Vary": VARY,
        "X-Pt2serve-Stale": STALE,
    }
    ok: dict[str, Any] = {
        "description": description,
        "headers": headers,
        "content": {JSON: {"schema": OBJECT}},
    }
    if listing is not None:
        ok[LISTING_KEY] = listing
    return kind(_200=ok, _304={"description": "If-None-Match matched the ETag", "headers": {"ETag": ETAG}})


def json_body(description: str) -> Kind:
    """JSON made for this request (no ETag)."""
    return kind(_200={"description": description, "content": {JSON: {"schema": OBJECT}}})


def byte_body(description: str, media_types: Iterable[str], headers: Mapping[str, Any] | None = None) -> Kind:
    """A body served by app/responses.py's BodyResponse: Range (206, multipart/byteranges for
    several ranges, 416), If-Range, If-None-Match (304), and a bound on concurrent streams (503)."""
    media_types = list(media_types)
    described = {
        **(headers or {}),
        "ETag": ETAG,
        "Accept-Ranges": ACCEPT_RANGES,
        "Cache-Control": CACHE_CONTROL,
        "X-Pt2serve-Stale": STALE,
    }
    return kind(
        "range_not_satisfiable",
        "too_many_streams",
        _200={"description": description, "headers": described, "content": _binary(media_types)},
        _206={
            "description": "the ranges the Range header asked for (several: multipart/byteranges); "
            "If-Range, when sent, must match the ETag",
            "headers": {**described, "Content-Range": CONTENT_RANGE},
            "content": _binary([*media_types, "multipart/byteranges"]),
        },
        _304={"description": "If-None-Match matched the ETag", "headers": {"ETag": ETAG}},
    )


# --- the kinds routes declare --------------------------------------------------------------------

ARCHIVE = kind(  # every route under an archive (the default one, or /archives/{archive_id})
    "archive_not_found",
    "version_not_found",
    "version_gone",
    "archive_unavailable",
    "archive_changed",
    "upstream_error",
    "integrity_error",
    "archive_format_error",
    _307={
        "description": "?redirect=1 on an unversioned URL: to its versioned twin",
        "headers": {"Location": LOCATION},
    },
)
MODEL = kind("model_not_found")  # takes a model name
TENSOR = kind("tensor_not_found", "model_not_found", "unsupported_payload")  # names a tensor
FILE = kind("file_not_found")  # names a file the archive carries
TENSOR_BYTES = byte_body(
    "the tensor's bytes (raw: memory or row-major order; npy: an .npy file)",
    ["application/octet-stream", "application/x-npy"],
    TENSOR_HEADERS,
)
NOT_ACCEPTABLE = kind("not_acceptable")
SLICE = kind("bad_slice", "slice_out_of_range")  # takes ?slice=
BUNDLE = byte_body(
    "the selected tensors as one file",
    ["application/octet-stream"],
    {**SKIPPED, "Content-Disposition": CONTENT_DISPOSITION},
)
PROGRAM = byte_body(
    "the program's bytes", ["application/octet-stream"], {"Content-Disposition": CONTENT_DISPOSITION}
)
METRICS = kind(
    _200={
        "description": "Prometheus text exposition",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
)
SELECTION = kind("tensor_not_found", "model_not_found", "unsupported_payload", "invalid_request")


def answers(*kinds: Kind) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route of these kinds."""
    responses: dict[int | str, dict[str, Any]] = {}
    for each in kinds:
        for status, response in each.responses.items():
            _merge(responses.setdefault(status, {}), response)
    codes = {code for each in kinds for code in each.codes}
    for status, response in error_responses(codes).items():
        _merge(responses.setdefault(status, {}), response)
    return responses


def error_responses(codes: Iterable[str]) -> dict[int, dict[str, Any]]:
    """One response per status of `codes`: the Error body, its codes, the status's headers."""
    by_status: dict[int, list[str]] = {}
    for code in sorted(set(codes)):
        status = ERROR_CODES[code].status
        if status is None:
            raise ValueError(f"{code!r} has no fixed status: a route cannot declare it")
        by_status.setdefault(status, []).append(code)
    return {
        status: {
            "description": _described(found),
            "content": {JSON: {"schema": ERROR_REF}},
            CODES_KEY: found,
            **({"headers": STATUS_HEADERS[status]} if status in STATUS_HEADERS else {}),
        }
        for status, found in sorted(by_status.items())
    }


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Merge response objects: error codes united (and described again), nested objects merged,
    any other value already there kept."""
    for key, value in extra.items():
        old = into.get(key)
        if old is None:
            into[key] = copy.deepcopy(value)  # the kinds' objects stay unshared
        elif key == CODES_KEY:
            into[key] = sorted({*old, *value})
            into["description"] = _described(into[key])
        elif isinstance(old, dict) and isinstance(value, Mapping):
            _merge(old, value)


def _described(codes: Iterable[str]) -> str:
    return "; ".join(f"`{code}`: {ERROR_CODES[code].meaning}" for code in codes)


# --- the whole document --------------------------------------------------------------------------


def document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with what holds for every route added and the Error schema."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=DESCRIPTION,
        routes=app.routes,
    )
    gated = getattr(app.state, "gate", None) is not None
    for route in app_routes(app):
        if not isinstance(getattr(route, "original_route", route), APIRoute) or not route.include_in_schema:
            continue
        operations = schema["paths"].get(route.path_format, {})
        for method in route.methods:
            operation = operations.get(method.lower())
            if operation is not None:
                _complete(operation, route, gated)
    for operations in schema["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                parameter["schema"] = _not_null(parameter["schema"])
    _link(schema["paths"])
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas[ERROR_SCHEMA_NAME] = error_schema()
    if gated:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return schema


def _complete(operation: dict[str, Any], route: Any, gated: bool) -> None:
    """The operation's responses: those its route declared with answers() (FastAPI's own rendering
    of them adds an application/json content to every one, 304 and 206 included), else FastAPI's
    without its 422; and the gate's 401/403 and the 422 of validated parameters."""
    if route.responses:
        responses = {str(status): copy.deepcopy(r) for status, r in route.responses.items()}
    else:
        responses = operation.get("responses", {})
        responses.pop("422", None)  # FastAPI's HTTPValidationError: the service answers Error
    codes = []
    if not is_open(route.path_format):
        codes += ["unauthorized", "bad_signature", "signature_expired"]
        if gated:
            operation["security"] = [{"bearer": []}]
    if operation.get("parameters"):
        codes.append("invalid_request")
    for status, response in error_responses(codes).items():
        _merge(responses.setdefault(str(status), {}), response)
    operation["responses"] = dict(sorted(responses.items()))


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`X | None` as X: a parameter's absence is its None (no query string or path says null), and
    client generators and testers read a plain type better than `anyOf [X, null]`."""
    options = schema.get("anyOf")
    if not options or {"type": "null"} not in options or len(options) != 2:
        return schema
    other = next(option for option in options if option != {"type": "null"})
    return {**{k: v for k, v in schema.items() if k != "anyOf"}, **other}


def _link(paths: dict[str, Any]) -> None:
    """Links from each listing (a GET whose 200 declared a Listing) to every operation whose path
    continues it with a parameter: `/archives` → `/archives/{archive_id}/...`."""
    listings = {}
    for path, operations in paths.items():
        ok = operations.get("get", {}).get("responses", {}).get("200", {})
        listing = ok.pop(LISTING_KEY, None)
        if listing is not None:
            listings[path] = (listing, ok)
    for path, operations in paths.items():
        for prefix, (listing, ok) in listings.items():
            rest = path[len(prefix) :]
            if not (path.startswith(prefix + "/{") and "}" in rest):
                continue
            parameter = rest[2 : rest.index("}")]
            for method, operation in operations.items():
                names = {p["name"]: p["in"] for p in operation.get("parameters", ())}
                values = {f"path.{parameter}": f"$response.body#{listing.items}/0/{listing.key}"}
                values |= {f"path.{p}": f"$request.path.{p}" for p in _path_parameters(prefix)}
                values |= {
                    f"query.{q}": f"$response.body#{listing.items}/0/{f}"
                    for q, f in listing.query.items()
                    if names.get(q) == "query"
                }
                ok.setdefault("links", {})[operation["operationId"]] = {
                    "operationId": operation["operationId"],
                    "parameters": values,
                    "description": f"{method.upper()} {path} for the first item listed",
                }


def _path_parameters(path: str) -> list[str]:
    return [segment[1:-1] for segment in path.split("/") if segment.startswith("{") and segment.endswith("}")]


DESCRIPTION = """\
Every error is JSON `{"error": {"code", "message"}}` (the `Error` schema; each error response
lists its codes in `x-error-codes`). Every path answers `OPTIONS` with 204 and an `Allow` header
naming its methods; a method a path does not have gets 405 with the same `Allow`. Byte bodies
honour `Range` (206; several ranges: multipart/byteranges; none satisfiable: 416), `If-Range`
and `If-None-Match` (304). With an API token set, every route but /healthz needs
`Authorization: Bearer <token>` or a signed URL (GET /sign)."""


def install(app: FastAPI) -> None:
    """Serve `document(app)` as the app's OpenAPI document (built on first request, kept)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
