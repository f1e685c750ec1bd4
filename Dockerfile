# partsync's container image.
#
#   docker build -t partsync .                    # the default target, `runtime`
#   docker build -t partsync:spark --target spark .   # + PySpark and a JRE for --engine spark
#   docker run --rm partsync --help
#
# Stages: `build` makes the wheel (build tools stay there); `base` is the Python runtime with an
# empty venv and the non-root user; `spark` and `runtime` install the wheel into that venv with
# only its runtime dependencies (no test brokers, no dev tools). `runtime` is last, so a build
# without --target gives it. docs/deploy.md says what was verified on which builder.

ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm

# --- build: the wheel, from the same sources `python -m build` uses --------------------------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
RUN python -m pip install --no-cache-dir "build>=1.2"
COPY pyproject.toml README.md ./
COPY partsync ./partsync
RUN python -m build --wheel --outdir /dist .

# --- base: Python, an empty venv on PATH, the user partsync runs as ------------------------
FROM ${PYTHON_IMAGE} AS base
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/partsync \
    PATH=/opt/partsync/bin:$PATH
RUN python -m venv /opt/partsync \
 && groupadd --system --gid 10001 partsync \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/partsync \
      --shell /usr/sbin/nologin partsync
WORKDIR /home/partsync
# Follow mode's --metrics-port (metrics, /healthz, /readyz) in the examples and the chart.
EXPOSE 9464

# --- spark: partsync[spark] and a JRE (Java 17) for --engine spark ------------------------
FROM base AS spark
# Debian's slim images drop the man directories that the JRE's postinst writes into.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /dist/ /tmp/dist/
RUN set -- /tmp/dist/partsync-*.whl && pip install "$1[spark]" && rm -rf /tmp/dist
USER 10001:10001
ENTRYPOINT ["partsync"]
CMD ["--help"]

# --- runtime (default): partsync and its runtime dependencies only -------------------------
FROM base AS runtime
COPY --from=build /dist/ /tmp/dist/
RUN set -- /tmp/dist/partsync-*.whl && pip install "$1" && rm -rf /tmp/dist
USER 10001:10001
ENTRYPOINT ["partsync"]
CMD ["--help"]
