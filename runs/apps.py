from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Benchsite"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs.api import schema  # noqa: F401 - registers the OpenAPI auth extension
