"""CI's stand-in for vLLM (docker/standin/vllm.Dockerfile): its version and nothing else."""

import importlib.metadata

__version__ = importlib.metadata.version("vllm")
