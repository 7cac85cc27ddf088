# syntax=docker/dockerfile:1
# Production image: a target per role (an image each), non-root, tini as PID 1, JSON logs.
#   docker build -t deckhand .                       # `serve` (the last stage, the default)
#   docker build --target worker -t deckhand-worker .
#   docker build --build-arg EXTRAS= -t deckhand-slim .   # no pictures: ~170 MB smaller
# Run: docker run -e SLACK_BOT_TOKEN_FILE=/run/secrets/slack_bot_token … -e REDIS_URL=…
#   -e DECKHAND_CONFIG=/config/deckhand.yml -v ./config:/config:ro -v deckhand-state:/var/lib/deckhand
#   --read-only --tmpfs /tmp -p 3000:3000 deckhand
# Secret files must be readable by uid 10001 (deploy/compose.yml says how).
# deploy/compose.yml runs both roles with Redis and Sentinel; tests/unit/test_deployment.py
# checks this file (digest pin, dependencies before code, non-root, a health check per role).

# python:3.11-slim-bookworm, pinned by digest so two builds of one commit start from the
# same bytes. Refresh (and verify) with:
#   docker buildx imagetools inspect python:3.11-slim-bookworm --format '{{json .Manifest.Digest}}'
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

# -- 1. wheels: every dependency (pinned in deploy/requirements/), then deckhand itself ------
FROM ${PYTHON_IMAGE} AS wheels
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY deploy/requirements/ ./requirements/
RUN pip wheel --wheel-dir /wheels/deps -r requirements/base.txt -r requirements/charts.txt
COPY pyproject.toml README.md ./
COPY agents ./agents
COPY tools ./tools
COPY bot ./bot
RUN pip wheel --no-deps --wheel-dir /wheels/app .

# -- 2. runtime: dependencies in a layer of their own, then the code --------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=charts
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PORT=3000 MPLCONFIGDIR=/tmp/matplotlib \
    DECKHAND_LOG_FORMAT=json DECKHAND_STATE_DIR=/var/lib/deckhand \
    DECKHAND_METRICS_HOST=0.0.0.0 DECKHAND_HEALTH_FILE=/tmp/deckhand-health
RUN apt-get update && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin deckhand \
    && install -d -o deckhand -g deckhand /var/lib/deckhand
COPY deploy/requirements/ /tmp/requirements/
RUN --mount=type=bind,from=wheels,source=/wheels/deps,target=/wheels \
    pip install --no-index --find-links /wheels -r /tmp/requirements/base.txt \
      $(case ",${EXTRAS}," in *,charts,*) echo -r /tmp/requirements/charts.txt;; esac) \
    && rm -rf /tmp/requirements
COPY --from=wheels /wheels/app /tmp/app
RUN pip install --no-index --no-deps /tmp/app/*.whl && rm -rf /tmp/app && pip check
COPY --chown=deckhand:deckhand examples /app/examples
WORKDIR /app
VOLUME /var/lib/deckhand
USER deckhand
ENTRYPOINT ["/usr/bin/tini", "--"]

# -- roles: each checks GET /healthz where it serves it: `serve --http` on PORT (or --port),
# a worker on its --metrics-port. The process writes that URL to $DECKHAND_HEALTH_FILE once it
# listens, and bot.healthcheck reads it: no port is written here, so changing one changes
# the check too (a worker without --metrics-port has no /healthz: the check fails).
FROM runtime AS worker
EXPOSE 9100
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-m", "bot.healthcheck"]
CMD ["deckhand", "worker", "--metrics-port", "9100"]

FROM runtime AS serve
EXPOSE 3000 9102
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-m", "bot.healthcheck"]
CMD ["deckhand", "serve", "--http"]
