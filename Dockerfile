# syntax=docker/dockerfile:1

# The runtime image of function-inference-cluster, after crossplane/function-template-python.
# Release CI builds it per architecture with `docker buildx build --platform linux/<arch>
# --output type=docker,dest=runtime-<arch>.tar .` and embeds it in the package with
# `crossplane xpkg build --package-root=package --ignore='configuration/*'
# --embed-runtime-image-tarball=runtime-<arch>.tar` (see `make package`).

# Debian 13 on both sides: the venv made here links to this stage's /usr/bin/python3 (3.13 on
# trixie) and its compiled wheels (grpcio, pydantic-core) are built for CPython 3.13, so the runtime
# must carry the same minor version: gcr.io/distroless/python3-debian13 ships Python 3.13
# (python3-debian12 had 3.11 and is deprecated upstream). pyproject allows >=3.11,<3.14.
# Unlike the template, no --platform=${BUILDPLATFORM}: pip must fetch the *target* architecture's
# binary wheels, so this stage runs on the target platform (emulated when cross-building).
# The workload CRDs a registry publishes as files (hack/crds/fetch.sh): from the pinned Go module,
# checked against hack/crds/go.sum, never from the build context.
FROM golang:1.26-trixie AS crds
WORKDIR /src
COPY hack/crds/ hack/crds/
RUN --mount=type=cache,target=/go/pkg/mod hack/crds/fetch.sh /crds

FROM debian:13-slim AS build

RUN --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,target=/var/cache/apt,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install --no-install-recommends --yes python3-venv

# No .pyc files: they would never persist across container restarts anyway.
ENV PYTHONDONTWRITEBYTECODE=true

# Build the wheel with hatch (the pyproject build backend) in a throwaway venv: Debian has no hatch
# package and refuses global pip installs. The context is trimmed by .dockerignore.
WORKDIR /build
COPY . .
COPY --from=crds /crds/ function/serving/crds/
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /venv/build \
    && /venv/build/bin/pip install hatch \
    && /venv/build/bin/hatch build -t wheel /whl

# A fresh venv holding only the function wheel and its runtime dependencies.
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /venv/fn \
    && /venv/fn/bin/pip install /whl/*.whl

# Same path as in the build stage so the venv's shebangs and python symlink keep working.
FROM gcr.io/distroless/python3-debian13 AS image
WORKDIR /
COPY --from=build --chown=nonroot /venv/fn /venv/fn
# Crossplane runs functions as a Deployment behind a Service on 9443 (gRPC, mTLS certs from
# TLS_SERVER_CERTS_DIR).
EXPOSE 9443
USER nonroot:nonroot
ENTRYPOINT ["/venv/fn/bin/function"]
