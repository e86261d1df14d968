# The relay alone (sapo-relay): relay/ and wire/ on a slim Python, with only the relay's own
# dependencies (deploy/requirements-relay.txt; no torch, llama.cpp or Qt). See docs/DEPLOY.md.
#
#   docker build -t sapo-relay .
#   docker run -p 8765:8765 -v sapo-relay:/data sapo-relay [--token ... | --redis redis://HOST:6379/0 ...]
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --home-dir /data --create-home sapo
WORKDIR /app

COPY deploy/requirements-relay.txt /app/requirements-relay.txt
RUN pip install --no-cache-dir -r /app/requirements-relay.txt
COPY wire/ /app/wire/
COPY relay/ /app/relay/

USER sapo
VOLUME /data
EXPOSE 8765
# A replica whose Redis is unreachable answers 503 here, so an orchestrator sees it too.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=2)"]
# Arguments given to `docker run` (or compose's `command:`) are appended: --redis, --token, --tls-cert ...
ENTRYPOINT ["python", "-m", "relay", "--host", "0.0.0.0", "--port", "8765", "--data-dir", "/data"]
