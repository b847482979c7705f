"""The secrets the leak tests plant in a service's configuration, a sweep of every route of it, and the
check that none of them shows in a response, an error, a log record or the metrics."""

from __future__ import annotations

import traceback

import httpx

from testing.service import assert_json_error

SECRET_KEY = "super-secret-value"
SESSION_TOKEN = "session-token-leak-check"
SIGNATURE = "secret-sig-9f8e7d"
PRESIGNED_CREDENTIAL = "AKIDPRESIGNED0002"
USERINFO_PASSWORD = "hunter2-userinfo"
SECRETS = (SECRET_KEY, SESSION_TOKEN, SIGNATURE, PRESIGNED_CREDENTIAL, USERINFO_PASSWORD, "X-Amz-Signature")


async def sweep(
    client: httpx.AsyncClient, archive_ids: list[str], light: bool = False
) -> list[httpx.Response]:
    paths = ["/healthz", "/archives", "/metrics", "/tensors", "/openapi.json", "/docs", "/stats"]
    if light:  # each request for a failed archive re-opens it (5 attempts): one request per archive
        return [await client.get(p) for p in paths[:3]] + [
            await client.get(f"/archives/{a}/tensors/scalar/data") for a in archive_ids
        ]
    for archive_id in archive_ids:
        paths += [f"/archives/{archive_id}/tensors", f"/archives/{archive_id}/tensors/scalar/layout",
                  f"/archives/{archive_id}/tensors/scalar/data", f"/archives/{archive_id}/tensors/nope/data",
                  f"/archives/{archive_id}/safetensors"]  # fmt: skip
    responses = [await client.get(path) for path in paths]
    responses.append(await client.get("/metrics"))  # after the traffic
    return responses


def assert_no_secret(responses: list[httpx.Response], caplog, extra: str = "") -> None:
    texts = [extra]
    for response in responses:
        texts.append(response.text)
        texts.extend(f"{k}: {v}" for k, v in response.headers.items())
        if response.status_code >= 400:
            assert_json_error(response)
    for record in caplog.records:
        texts.append(record.getMessage())
        if record.exc_info:
            texts.append("".join(traceback.format_exception(*record.exc_info)))
    texts.append(caplog.text)
    blob = "\n".join(texts)
    leaks = {secret for secret in SECRETS if secret in blob}
    lines = [line for line in blob.splitlines() if any(secret in line for secret in leaks)]
    assert not leaks, f"secrets {sorted(leaks)} leaked: {lines[:5]}"
