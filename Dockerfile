# syntax=docker/dockerfile:1
#
# One image per Islet executable, chosen by a build argument:
#
#   docker build --build-arg SERVICE=token-registry -t islet/token-registry .
#
# SERVICE is an executable product of Package.swift: token-registry, apns-dispatcher,
# content-service, apns-simulator, analytics-ingest, analytics-consumer.
# docker-compose.yml builds each service this way; docs/deployment.md explains the result.
#
# The build stage is Ubuntu 24.04 (noble) because Islet needs librdkafka >= 2.3: noble ships
# 2.3.0, Debian 12's 2.0.2 cannot talk to current brokers. The Swift standard library and
# Foundation are linked statically (SWIFT_STATIC_STDLIB=1, the default); the C libraries
# (librdkafka, libgd, OpenSSL, zlib) stay the distribution's shared libraries, installed again
# in the runtime stage. With SWIFT_STATIC_STDLIB=0 the Swift runtime's shared libraries are
# copied next to the binary instead.

ARG SWIFT_IMAGE=swift:6.3.1-noble
ARG RUNTIME_IMAGE=ubuntu:24.04

# ---- build ---------------------------------------------------------------------------------------
FROM ${SWIFT_IMAGE} AS build
ARG SERVICE
ARG SWIFT_STATIC_STDLIB=1

RUN test -n "${SERVICE}" || { echo "give the product to build: --build-arg SERVICE=token-registry" >&2; exit 1; }

# The C libraries Shared/CRdKafka and Shared/CGD find through pkg-config, and what they link.
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      pkg-config \
      librdkafka-dev \
      libgd-dev \
      libssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
RUN pkg-config --atleast-version=2.3 rdkafka \
 || { echo "librdkafka >= 2.3 is required; this base image has $(pkg-config --modversion rdkafka)" >&2; exit 1; }

WORKDIR /src
# Every target's folder must exist for SwiftPM to load the manifest, tests and benchmarks included;
# .dockerignore keeps build output, tools, keys and git out of the context.
COPY . .

# The build folder is a cache shared by every service's build (locked: one SwiftPM at a time),
# so the second service reuses the first one's compiled dependencies.
RUN --mount=type=cache,target=/src/.build,sharing=locked \
    set -eu; \
    if [ "${SWIFT_STATIC_STDLIB}" = 1 ]; then static=--static-swift-stdlib; else static=; fi; \
    swift build -c release --product "${SERVICE}" ${static}; \
    bin=$(swift build -c release --show-bin-path); \
    mkdir -p /out/bin /out/lib /out/templates; \
    cp "${bin}/${SERVICE}" /out/bin/islet-service; \
    strip /out/bin/islet-service; \
    if [ "${SWIFT_STATIC_STDLIB}" != 1 ]; then \
      ldd /out/bin/islet-service | awk '/\/usr\/lib\/swift\// {print $3}' | xargs -r -I{} cp -L {} /out/lib/; \
    fi; \
    cp Services/ContentService/Templates/*.yaml /out/templates/

# ---- runtime -------------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
ARG SERVICE

# Runtime libraries only: librdkafka (2.3.0 on noble) with its own dependencies, libgd for
# content-service's thumbnails, CA roots for APNs, curl for the health check.
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      librdkafka1 \
      libgd3 \
      libstdc++6 zlib1g \
      ca-certificates \
      curl \
 && rm -rf /var/lib/apt/lists/*

# An unprivileged user. /var/lib/islet exists in the image, owned by it, so that a named volume
# mounted below it (the APNs simulator's certificate in the dev profile) is writable.
RUN groupadd --system --gid 10001 islet \
 && useradd --system --uid 10001 --gid islet --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin islet \
 && mkdir -p /var/lib/islet/simulator-tls \
 && chown -R islet:islet /var/lib/islet

COPY --from=build /out/bin/islet-service /usr/local/bin/islet-service
COPY --from=build /out/lib/ /usr/local/lib/islet/
# content-service's example templates; mount your own over /etc/islet/templates.
COPY --from=build /out/templates/ /etc/islet/templates/

ENV LD_LIBRARY_PATH=/usr/local/lib/islet \
    ISLET_TEMPLATES_DIR=/etc/islet/templates

# Fails the build when a shared library the binary needs is missing from this stage.
RUN if ldd /usr/local/bin/islet-service | grep 'not found'; then echo "missing shared libraries" >&2; exit 1; fi

LABEL org.opencontainers.image.title="islet-${SERVICE}" \
      org.opencontainers.image.description="Islet ${SERVICE}: the server side of iOS Live Activities"

USER islet:islet
WORKDIR /var/lib/islet
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/islet-service"]
