# syntax=docker/dockerfile:1
# The site's one image: web (daphne, the default command), worker (celery worker) and beat
# (celery beat), chosen by the command (docker/compose.yaml shows all three).
#   docker build -f docker/site.Dockerfile -t benchsite/site .      (from the repository root)
# PYTHON_IMAGE is the base of both stages; only CI sets it, to a stand-in built where Docker
# Hub cannot be reached (scripts/images/standins.sh): the default is the image users build on.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: every locked dependency as a wheel, hashes checked against the lock ----------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /build
COPY requirements/runtime.lock.txt ./
# --only-binary: a wheel built here from an sdist would carry a hash the lock does not list.
RUN python -m pip wheel --require-hashes --only-binary=:all: --wheel-dir /wheels \
        -r runtime.lock.txt

# ---- runtime: a virtualenv from those wheels (offline), the source, collected static ------
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=benchsite.settings \
    MEDIA_ROOT=/data/media PORT=8000
RUN groupadd --system --gid 10001 benchsite \
    && useradd --system --uid 10001 --gid benchsite --home-dir /app --shell /usr/sbin/nologin benchsite
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --no-deps /wheels/*.whl
WORKDIR /app
COPY manage.py ./
COPY benchsite ./benchsite
COPY runs ./runs
COPY agents ./agents
COPY frontend ./frontend
# The site runs the CLI's regression gate on scheduled runs (runs/services/schedule_gate.py).
COPY benchsite_cli ./benchsite_cli
# The rules behind the figures the pages and the CLI show (a cost per token, the margin).
COPY figures ./figures
COPY docker/healthcheck.py /usr/local/bin/benchsite-healthcheck
# collectstatic imports the production settings, which refuse to start without their
# secrets: these values are dummies that live only in this RUN's environment, so they never
# reach a container (the real ones come from .env or *_FILE at run time).
RUN SECRET_KEY=build-only-not-a-secret \
    ALLOWED_HOSTS=build.invalid \
    DATABASE_URL=sqlite:////tmp/build-only.sqlite3 \
    REDIS_URL=redis://build.invalid:6379/0 \
    CREDENTIALS_ENCRYPTION_KEY=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= \
    python manage.py collectstatic --noinput -v0 \
    && python -m compileall -q benchsite runs agents frontend benchsite_cli \
    && install -d -o benchsite -g benchsite /data/media
USER 10001:10001
VOLUME ["/data/media"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=6s --start-period=30s --retries=3 \
    CMD ["python", "/usr/local/bin/benchsite-healthcheck"]
# web; a worker runs `celery -A benchsite worker`, beat `celery -A benchsite beat`.
CMD ["daphne", "--bind", "0.0.0.0", "--port", "8000", "--proxy-headers", "benchsite.asgi:application"]
