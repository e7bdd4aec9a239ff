# One image for every service in services/: the framework installed with pip, plus the
# services and the Avro schemas. docker-compose.yml picks the pipeline per container:
#     command: ["fw", "run", "services.<name>.pipeline:pipeline"]
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The dependencies first, in a layer that only pyproject.toml decides (installed with an
# empty framework package, then that is removed): editing the framework or a service does
# not install them again. Then the framework, without its dependencies.
COPY pyproject.toml README.md ./
RUN mkdir framework && touch framework/__init__.py \
    && pip install . && pip uninstall --yes kstreamflow && rm -rf framework build *.egg-info
COPY framework ./framework
RUN pip install --no-deps . && rm -rf build

# Services import as services.<name>.pipeline from the working directory; their Avro
# schemas are found through FW_SCHEMAS_DIR.
COPY schemas ./schemas
COPY services ./services

RUN useradd --system --uid 10001 --home-dir /app fw \
    && mkdir -p /var/lib/fw/state \
    && chown -R fw /var/lib/fw
USER fw

ENV FW_SCHEMAS_DIR=/app/schemas \
    FW_STATE_DIR=/var/lib/fw/state

# `fw run` takes the checkpoint and leaves the group on SIGTERM (what `docker stop` sends).
CMD ["fw", "--help"]
