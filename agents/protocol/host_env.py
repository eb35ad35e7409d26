"""The environment variables an agent reads on the machine it runs on, named once for the agent
(which reads them) and the site (which starts agents as local processes).

Guarantees:

- ``AGENT_HOST_SETTINGS`` names every variable by which a host tells its agent how to run
  engines there, and none that carries a secret: the site's local provider passes exactly
  these, and what a Python process needs, from a worker's environment to the agents it
  starts (``runs.providers.local.AGENT_ENV_ALLOWLIST``).
- What one run gives its agent (``AGENT_POD_ENV``: its job and run token, the organization's
  Hugging Face token, an endpoint's API key and checked addresses, a judge's API key and
  checked addresses) is never a host setting: it comes with the pod, from the site, for
  that run alone.
"""

from __future__ import annotations

VLLM_COMMAND_ENV = "BENCHSITE_VLLM_COMMAND"
VLLM_CPU_ENV = "BENCHSITE_VLLM_CPU"
VLLM_ENV_ENV = "BENCHSITE_VLLM_ENV"
WEIGHTS_DIR_ENV = "BENCHSITE_WEIGHTS_DIR"
DISK_RESERVE_ENV = "BENCHSITE_DISK_RESERVE_GB"
ENGINE_RESTARTS_ENV = "BENCHSITE_ENGINE_RESTARTS"
HANG_SECONDS_ENV = "BENCHSITE_HANG_SECONDS"
SIM_OVER_HTTP_ENV = "BENCHSITE_SIM_OVER_HTTP"
HUB_OFFLINE_ENV = "HF_HUB_OFFLINE"
HUB_ENDPOINT_ENV = "HF_ENDPOINT"

JOB_ENV = "BENCHSITE_JOB"
TOKEN_ENV = "BENCHSITE_TOKEN"
HF_TOKEN_ENV = "HF_TOKEN"
ENDPOINT_API_KEY_ENV = "BENCHSITE_ENDPOINT_API_KEY"
# The judge endpoint's API key, for an evaluation scored by a judge (docs/quality.md).
JUDGE_API_KEY_ENV = "BENCHSITE_JUDGE_API_KEY"
# The addresses the site checked for an endpoint's host: the agent connects to no other.
ENDPOINT_ADDRESSES_ENV = "BENCHSITE_ENDPOINT_ADDRESSES"
# The same for an evaluation judge's host.
JUDGE_ADDRESSES_ENV = "BENCHSITE_JUDGE_ADDRESSES"

AGENT_HOST_SETTINGS = (
    VLLM_COMMAND_ENV,
    VLLM_CPU_ENV,
    VLLM_ENV_ENV,
    WEIGHTS_DIR_ENV,
    DISK_RESERVE_ENV,
    ENGINE_RESTARTS_ENV,
    HANG_SECONDS_ENV,
    SIM_OVER_HTTP_ENV,
    HUB_OFFLINE_ENV,
    HUB_ENDPOINT_ENV,
)
AGENT_POD_ENV = (
    JOB_ENV,
    TOKEN_ENV,
    HF_TOKEN_ENV,
    ENDPOINT_API_KEY_ENV,
    ENDPOINT_ADDRESSES_ENV,
    JUDGE_API_KEY_ENV,
    JUDGE_ADDRESSES_ENV,
)
