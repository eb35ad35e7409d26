"""The vLLM performance simulator: an OpenAI-compatible server whose timing comes from a
model of vLLM's continuous batching on a given GPU (see docs/simulator.md).

``scheduler`` (V1-style scheduler and KV blocks), ``server`` (the engine loop on its
simulated clock), ``http`` (framing and routes), ``completions`` (the OpenAI request and
response shapes, streaming), ``metrics`` (/metrics), ``command`` (the command line and the
simulated start-up log), ``startup`` (simulated start-up phases). The GPU and model facts,
the start check and the step-time roofline it runs on are ``agents.hardware``'s, shared with
the site. Everything it serves is labelled simulated.
"""

from agents.engines.sim.scheduler import Scheduler, SimRequest, closed_loop, simulate

__all__ = ["Scheduler", "SimRequest", "closed_loop", "simulate"]
