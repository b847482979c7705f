# syntax=docker/dockerfile:1
# pt2serve service image: `docker build -t pt2serve .`, then
#   docker run -p 8000:8000 -e PT2SERVE_ARCHIVES=demo=s3://bucket/demo.pt2 -e AWS_... pt2serve
# With no PT2SERVE_ARCHIVES it serves the bundled demo archive.
#
# BASE_IMAGE: any image with Python 3.11, `python` and `pip` on PATH, and `useradd` (a Debian base).
# Build secret `pip.conf` (optional): a pip configuration file for the build's pip installs, for a
# private index or a proxy's CA (`--secret id=pip.conf,src=FILE`, plus any file it names, such as
# `--secret id=pip-ca.pem,src=CA_FILE` mounted at /run/secrets/pip-ca.pem). Never copied into the image.
ARG BASE_IMAGE=python:3.11-slim
# checkov:skip=CKV_DOCKER_7: FROM ${BASE_IMAGE} is python:3.11-slim, a version tag, unless the build names another; checkov does not expand build arguments

# -- builder: turn the source tree into a wheel (build tools stay in this stage) ----------------------
FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# a stub of the project from pyproject.toml alone (no code): the runtime stage installs its
# dependencies in a layer that only a change of pyproject.toml rebuilds
WORKDIR /stub
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf --mount=type=secret,id=pip-ca.pem \
    mkdir reader app && touch README.md && python -m pip wheel --no-deps --wheel-dir /stub/wheel .
WORKDIR /src
COPY pyproject.toml README.md ./
COPY reader ./reader
COPY app ./app
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf --mount=type=secret,id=pip-ca.pem \
    python -m pip wheel --no-deps --wheel-dir /wheels .

# -- runtime: the wheel and its runtime dependencies only, run as a non-root user ---------------------
FROM ${BASE_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# EXTRAS: the extras installed (the cloud SDKs of gs:// and az://; `--build-arg EXTRAS=` builds the
# image without them)
ARG EXTRAS=all
# the dependencies, through the stub (then uninstalled; a stale layer only leaves the next step more
# to install), then the README's service install (`pip install .`) from the wheel built above
RUN --mount=type=bind,from=builder,source=/stub/wheel,target=/stub \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf --mount=type=secret,id=pip-ca.pem \
    pip install "$(ls /stub/*.whl)${EXTRAS:+[$EXTRAS]}" && pip uninstall --yes pt2serve
COPY --from=builder /wheels /wheels
RUN --mount=type=secret,id=pip.conf,target=/etc/pip.conf --mount=type=secret,id=pip-ca.pem \
    pip install "$(ls /wheels/*.whl)${EXTRAS:+[$EXTRAS]}" && rm -rf /wheels
RUN useradd --system --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin pt2serve
USER pt2serve
# The one writable path: the image runs with a read-only root filesystem (`docker run --read-only`,
# compose's read_only, Kubernetes' readOnlyRootFilesystem), each mounting a volume here.
WORKDIR /tmp
VOLUME ["/tmp"]
# archives: PT2SERVE_ARCHIVES="id=LOCATION,id=LOCATION" (path, http(s) URL or s3://bucket/key);
# S3 credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION / AWS_ENDPOINT_URL.
ENV PT2SERVE_ARCHIVES=""
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["pt2serve", "serve", "--host", "0.0.0.0"]
