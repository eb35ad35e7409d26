"""OpenAPI description of our bearer-token authentication and of the JSON fields whose
structure comes from ``agents.protocol`` (drf-spectacular extensions)."""

import copy

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.plumbing import ResolvedComponent


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "runs.api.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An organization API token: `Authorization: Bearer bsk_…`.",
        }


class RunTokenScheme(OpenApiAuthenticationExtension):
    target_class = "runs.api.views_agent.RunTokenAuthentication"
    name = "runToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A run token (`bsr_…`), valid for its one run until the run ends; for "
                "delivering messages, also for BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS after."
            ),
        }


class StrictJSONFieldSchema(OpenApiSerializerFieldExtension):
    """A JSON field shows the structure it was given (``runs.inputs.json_schemas``), its
    components and its example, instead of ``{}``."""

    target_class = "runs.inputs.strict_fields.StrictJSONField"

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        if field.json_schema is None:
            return {}
        register_components(auto_schema, field.json_components)
        # Copies: spectacular's post-processing edits what it is given, in place.
        schema = copy.deepcopy(field.json_schema)
        if field.json_example is not None:
            schema["example"] = copy.deepcopy(field.json_example)
        return schema


class ProtocolBodySchema(OpenApiSerializerExtension):
    """A body that is a protocol model's JSON shows that model's schema."""

    target_class = "runs.inputs.json_schemas.ProtocolBody"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        register_components(auto_schema, self.target.json_components)
        return copy.deepcopy(self.target.json_schema)


def register_components(auto_schema, components: dict[str, dict]) -> None:
    """Adds schema components generated from the protocol, refusing a name that a
    serializer's component already has with another shape (it would be shadowed)."""
    for name, schema in components.items():
        schema = copy.deepcopy(schema)
        component = ResolvedComponent(
            name=name, type=ResolvedComponent.SCHEMA, object=name, schema=schema
        )
        if component in auto_schema.registry:
            existing = auto_schema.registry[component].schema
            if existing != schema:
                raise ImproperlyConfigured(f"Two different schema components named {name!r}.")
            continue
        auto_schema.registry.register(component)
