"""Numbers as people read them: ``{% load numbers %}`` then ``{{ model.parameter_count|params }}``.

The rule is ``figures.model_size``'s, shared with the CLI: a model's size is one text
wherever it is shown.
"""

from __future__ import annotations

from django import template

from figures.model_size import parameter_count_text

register = template.Library()


@register.filter
def params(count) -> str:
    """``{{ 7000000000|params }}`` → ``7.0 B`` (``figures.model_size.parameter_count_text``)."""
    return parameter_count_text(count)
