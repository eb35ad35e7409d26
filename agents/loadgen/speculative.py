"""Speculative decoding's figures over a level, from vLLM's counters: pure arithmetic, shared
by the scrape of a live server (``server_metrics``) and the offline simulator's report."""

from __future__ import annotations


def spec_decode_acceptance(report: dict) -> dict:
    """Speculative decoding over the level: the share of proposed tokens accepted, and the
    tokens each engine step yields per draft (accepted + the one the model adds); None when
    nothing was proposed (no speculative decoding, or a server without these counters)."""
    drafts = report["spec_decode_num_drafts"]
    proposed = report["spec_decode_num_draft_tokens"]
    accepted = report["spec_decode_num_accepted_tokens"]
    return {
        "spec_decode_acceptance_rate": accepted / proposed
        if accepted is not None and proposed
        else None,
        "spec_decode_mean_acceptance_length": 1 + accepted / drafts
        if accepted is not None and drafts
        else None,
    }
