# CI's stand-in for vllm/vllm-openai:${VLLM_VERSION}, which cannot be pulled here
# (scripts/images/standins.sh builds it; docs/testing.md, "The images"). Its contract is the
# one docker/agent.Dockerfile relies on: `python3` and `pip` of a virtualenv first on PATH
# (vLLM's image has /opt/venv), the libraries vLLM brings that the agent imports without
# declaring them (brings.txt), and a `vllm` distribution with its `vllm` entry point. It
# serves no model: the agent's simulated engine is what runs in it. BASE_IMAGE is an Ubuntu
# 24.04 root whose CPython is 3.12, the Python of vLLM's image (standins.sh makes it).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG VLLM_VERSION
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1
COPY brings.txt /tmp/standin/brings.txt
COPY vllm_stub /tmp/standin/vllm_stub
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir -r /tmp/standin/brings.txt \
    && sed -i "s/^version = .*/version = \"${VLLM_VERSION#v}+standin\"/" /tmp/standin/vllm_stub/pyproject.toml \
    && pip install --no-cache-dir /tmp/standin/vllm_stub \
    && rm -rf /tmp/standin
WORKDIR /vllm-workspace
ENTRYPOINT ["vllm", "serve"]
