"""OpenAPI description of our bearer-token authentication (drf-spectacular extension)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


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
