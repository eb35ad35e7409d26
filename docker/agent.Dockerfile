# syntax=docker/dockerfile:1
# The agent's image: the official vLLM image plus the `agents` package and the pure `figures`
# its protocol names a result's figures by (no Django), with the agent runner as the
# entrypoint; the runner starts `vllm serve` itself for each trial.
# The vLLM version is a build argument, so one image per tag puts the engine on the grid:
#   docker build -f docker/agent.Dockerfile --build-arg VLLM_VERSION=v0.11.0 \
#       -t benchsite/agent:v0.11.0 .          (BENCHSITE_AGENT_IMAGE=benchsite/agent:{tag})
ARG VLLM_VERSION=v0.11.0
# The bases: only CI sets these, to stand-ins built where Docker Hub cannot be reached
# (scripts/images/standins.sh); the defaults are the images users build on.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG VLLM_IMAGE=vllm/vllm-openai

# ---- build: a wheel of the agent alone (docker/agent.pyproject.toml + agents/, figures/) ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY docker/agent.pyproject.toml ./pyproject.toml
COPY agents ./agents
# The pure rules its protocol names a level result's figures by (stdlib only).
COPY figures ./figures
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

# ---- runtime: vLLM's image, the agent installed into vLLM's own Python ---------------------
FROM ${VLLM_IMAGE}:${VLLM_VERSION}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1
# The agent's lower bounds are already met by what vLLM ships (pydantic, httpx, …), and pip
# leaves satisfied packages alone: vLLM's pins never move. No hash lock here: the base image's
# environment, not ours, decides those versions.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python3 -m pip install --no-cache-dir /wheels/*.whl \
    && benchsite-agent --help > /dev/null
# Runpod mounts the pod's volume here; each run writes its results, spool and logs under it.
WORKDIR /workspace
# The job arrives as BENCHSITE_JOB (base64 JSON) and the run token as BENCHSITE_TOKEN.
ENTRYPOINT ["benchsite-agent", "run"]
