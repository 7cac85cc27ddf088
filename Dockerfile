# Production image: the Slack bot over HTTP with an embedded worker, as a non-root user.
# Build: docker build -t deckhand .   Run: docker run -e SLACK_BOT_TOKEN=... -e
# SLACK_SIGNING_SECRET=... -e REDIS_URL=redis://redis:6379/0 -e DECKHAND_CONFIG=/config/deckhand.yml
#   -v ./config:/config:ro -p 3000:3000 deckhand
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PORT=3000 \
    MPLCONFIGDIR=/tmp/matplotlib DECKHAND_LOG_FORMAT=json

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin deckhand
WORKDIR /app

COPY pyproject.toml README.md ./
COPY agents ./agents
COPY tools ./tools
COPY bot ./bot
COPY examples ./examples
RUN pip install --no-cache-dir . && chown -R deckhand:deckhand /app

USER deckhand
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '3000'), timeout=2)"
CMD ["deckhand", "serve", "--http"]
