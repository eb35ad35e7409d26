"""The rules behind the figures Benchsite shows, one copy each, for every side that shows
them: the site (pages, API, demo), the CLI and its gate.

Guarantee: pure. No Django, no HTTP, no file or clock, and nothing else of the project
(its import contract): a rule here is the same sum and the same words wherever a figure is
computed or said.

- ``costs``: USD per 1M output tokens from a rate per hour and a throughput;
- ``gpu_share``: the GPUs a trial's cost per token is priced for;
- ``margins``: the answer's margin in words (the other's extra cost, or a tie);
- ``levels``: a load level's name, short and as the gate keys it;
- ``deltas``: a change between two figures, its interval and its words;
- ``level_results``: the names of a level result's figures;
- ``model_size``: a parameter count as text (``7.0 B``).
"""
