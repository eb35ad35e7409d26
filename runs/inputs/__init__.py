"""The input contract: what a request may carry, shared by the API and the web pages.

Every serializer that parses what a client sends (an experiment, a model, a budget, a
member, a token, a provider key, a run to start or stop), the strict fields they are built
from, the JSON shapes those fields take (from ``agents.protocol``) and the flattening of
their errors into field paths live here, once. The API (``runs.api``) and the pages
(``frontend``) both validate with these classes, so a value the one refuses the other
refuses too, with the same message under the same path. Nothing here knows about HTTP:
``runs.inputs`` imports neither ``runs.api`` nor views nor tasks.
"""
