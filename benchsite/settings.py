"""Benchsite settings: one file, driven by environment variables.

With ``DEBUG=true`` (the demo and local development) every service has an embedded default:
SQLite, an in-memory channel layer and a Celery broker in a folder. Without it, the production
variables are required, and a missing or malformed value stops start-up with
``ImproperlyConfigured`` naming the variable.
"""

from __future__ import annotations

from pathlib import Path

from benchsite.env import (
    env_bool,
    env_choice,
    env_database,
    env_demo_receiver_url,
    env_fernet_keys,
    env_int,
    env_list,
    env_redis_url,
    env_str,
    variables_read,
)
from benchsite.queues import worker_queues

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
# Production never falls back to a default for these: a forgotten variable must be loud.
_PRODUCTION = not DEBUG

# The secrets (this, DATABASE_URL, REDIS_URL, CREDENTIALS_ENCRYPTION_KEY and
# BENCHSITE_RUNPOD_PRICE_KEY) may instead be read from the file that <NAME>_FILE names.
SECRET_KEY = env_str(
    "SECRET_KEY", "insecure-demo-key-only-for-debug", required=_PRODUCTION, secret=True
)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"] if DEBUG else [])
if _PRODUCTION and not ALLOWED_HOSTS:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("ALLOWED_HOSTS must be set (comma-separated host names)")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Encrypts the organizations' provider API keys at rest (runs/secrets.py). Losing or changing
# it makes the stored keys unreadable, so it is its own variable, not derived from SECRET_KEY
# (which operators rotate for other reasons) except in the demo.
CREDENTIALS_ENCRYPTION_KEY = env_fernet_keys(
    "CREDENTIALS_ENCRYPTION_KEY", derive_from=None if _PRODUCTION else SECRET_KEY
)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "mozilla_django_oidc",
    "django_celery_beat",
    "runs",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "benchsite.urls"
ASGI_APPLICATION = "benchsite.asgi.application"
AUTH_USER_MODEL = "runs.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on through an OpenID Connect issuer (runs/sso.py), on when a client id is set:
# the issuer's endpoints, this site's client, and which organizations a first sign-in joins
# by the verified e-mail's domain ("acme.example=acme:member,corp.example=corp:viewer"; the
# owner role is never granted this way): only these domains' e-mails create accounts.
# Password sign-in can be turned off.
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET", "", secret=True)
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = "openid email"
OIDC_USE_PKCE = True
OIDC_AUTHENTICATE_CLASS = "frontend.sign_in.SsoStartView"
OIDC_CALLBACK_CLASS = "frontend.sign_in.SsoCallbackView"
BENCHSITE_SSO_DOMAIN_ORGS = env_list("BENCHSITE_SSO_DOMAIN_ORGS", [])
BENCHSITE_PASSWORD_LOGIN = env_bool("BENCHSITE_PASSWORD_LOGIN", True)
AUTHENTICATION_BACKENDS = [
    "runs.sso.SsoBackend",
    "runs.sso.PasswordBackend",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env_database(
        "DATABASE_URL", f"sqlite:///{BASE_DIR / 'demo.sqlite3'}", required=_PRODUCTION
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL", None, required=_PRODUCTION)
# The channel layer's keys on Redis start with this. Site processes must agree on it; another
# prefix keeps deployments (or test runs) that share one Redis apart: a layer's flush()
# deletes every key under its prefix, the groups of every server using it included.
CHANNEL_LAYER_PREFIX = env_str("CHANNEL_LAYER_PREFIX", "asgi")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, which aborts the
                # layer's blocking pop on every idle socket (django/channels_redis#422).
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": CHANNEL_LAYER_PREFIX,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Without Redis (DEBUG only) tasks wait as files under MEDIA_ROOT/broker (set below), where
# every process of the installation finds them: the demo's web server enqueues and its worker,
# another process, takes them. An in-memory broker strands a task in the process that sent it.
CELERY_BROKER_URL = REDIS_URL or "filesystem://localhost/"
CELERY_RESULT_BACKEND = None
# Site, worker and beat must agree on it; another name keeps deployments (or test runs) that
# share one Redis from taking each other's tasks.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
# Notifications go to a queue of their own, "<default>.notifications" (benchsite/queues.py):
# a thousand deliveries never stand before a pod's release. A worker without -Q takes both.
CELERY_TASK_QUEUES = worker_queues(CELERY_TASK_DEFAULT_QUEUE)
CELERY_TASK_ROUTES = ("benchsite.queues.task_route",)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
# Celery's Redis transport redelivers unacked tasks after this; retries back off below it.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(BASE_DIR / "media")))
if not REDIS_URL:
    CELERY_BROKER_TRANSPORT = "benchsite.folder_broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS |= {
        "data_folder_in": str(MEDIA_ROOT / "broker" / "queues"),
        "data_folder_out": str(MEDIA_ROOT / "broker" / "queues"),
        "control_folder": str(MEDIA_ROOT / "broker" / "exchanges"),
        "polling_interval": 0.5,
    }
# ShareGPT-format datasets are uploaded through the API; bound their size.
DATASET_MAX_BYTES = env_int("DATASET_MAX_BYTES", 200 * 1024 * 1024, minimum=1024)
# Every JSON body (the API) and every form: a larger one is refused (413 on the API) before it
# is decoded. The API's own bodies are a few kilobytes; the agents' REST batch is taken up to
# its protocol size (agents.protocol.MAX_BATCH_BYTES) even above this (runs/api/parsers.py).
BENCHSITE_MAX_BODY_BYTES = env_int("BENCHSITE_MAX_BODY_BYTES", 1024 * 1024, minimum=64 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = BENCHSITE_MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "runs.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The API speaks JSON; only dataset upload takes multipart (set on its view).
    "DEFAULT_PARSER_CLASSES": ["runs.api.parsers.StrictJSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "runs.api.pagination.CreatedCursorPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "runs.api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Benchsite API",
    "DESCRIPTION": "Experiments, runs and reports for vLLM serving configurations.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Runs and promotions both have a "state": each enum keeps a name of its own.
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "runs.models.runs.RunState",  # the name it had before promotions came
        "PromotionStateEnum": "runs.models.promotions.PromotionState",
        "NotificationHookKindEnum": "runs.models.notifications.HookKind",
        # Every agent message's "protocol" (the job has its own, one version).
        "AgentProtocolVersionEnum": "runs.inputs.json_schemas.agent_protocol_choices",
        # Every SLO's percentile (ttft_percentile, tpot_percentile, ...).
        "SloPercentileEnum": "runs.inputs.json_schemas.slo_percentile_choices",
        # An SLO check's verdict and a capacity bracket's end (met, missed, too close).
        "SloVerdictEnum": "runs.inputs.json_schemas.slo_verdict_choices",
    },
}

# Benchsite's own knobs.
BENCHSITE_MAX_GRID_TRIALS = env_int("BENCHSITE_MAX_GRID_TRIALS", 64, minimum=1)
# The closest two firings of an experiment's schedule may be: each firing while its last run
# is still under way is refused and recorded (runs/schedule_spec.py).
SCHEDULE_MIN_INTERVAL_MINUTES = env_int("SCHEDULE_MIN_INTERVAL_MINUTES", 15, minimum=1)
# Token last-used times are written at most this often, so reads stay reads.
BENCHSITE_TOKEN_TOUCH_SECONDS = env_int("BENCHSITE_TOKEN_TOUCH_SECONDS", 60, minimum=0)

# Runs: where agents report (the site's address as pods see it), where vLLM runs, and how
# long the reconcile task waits before it calls an agent silent or a cancel unanswered.
BENCHSITE_PUBLIC_URL = env_str("BENCHSITE_PUBLIC_URL", "http://127.0.0.1:8000")
BENCHSITE_PROVIDER = env_choice("BENCHSITE_PROVIDER", "runpod", {"runpod", "local"})
BENCHSITE_AGENT_IMAGE = env_str("BENCHSITE_AGENT_IMAGE", "benchsite/agent:{tag}")
BENCHSITE_LOCAL_PODS_DIR = env_str("BENCHSITE_LOCAL_PODS_DIR", "")  # "": MEDIA_ROOT/pods
BENCHSITE_LOCAL_AGENT_COMMAND = env_str("BENCHSITE_LOCAL_AGENT_COMMAND", "")
BENCHSITE_SIM_SPEED = env_int("BENCHSITE_SIM_SPEED", 1, minimum=1)
BENCHSITE_AGENT_SILENCE_SECONDS = env_int("BENCHSITE_AGENT_SILENCE_SECONDS", 120, minimum=10)
# After a run ends its agent may still deliver what it holds (a spool it could not send
# while the site was down) for this long; the local provider waits as long for it to exit.
BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS = env_int(
    "BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS", 300, minimum=0
)
BENCHSITE_PROVISION_TIMEOUT_SECONDS = env_int(
    "BENCHSITE_PROVISION_TIMEOUT_SECONDS", 1800, minimum=60
)
BENCHSITE_CANCEL_GRACE_SECONDS = env_int("BENCHSITE_CANCEL_GRACE_SECONDS", 60, minimum=0)
# How often a run that loses its pod mid-run (gone, or its agent silent) goes on on a new pod
# for its unfinished trials; frozen into each run when it starts. 0 turns resume off.
BENCHSITE_MAX_RESUMES = env_int("BENCHSITE_MAX_RESUMES", 1, minimum=0)
# The Hugging Face hub the site reads models' config.json files from when a team registers a
# model by its repo ("": huggingface_hub's own, https://huggingface.co or HF_ENDPOINT); a
# mirror where the site cannot reach the hub itself. Each organization's token is its own.
BENCHSITE_HF_ENDPOINT = env_str("BENCHSITE_HF_ENDPOINT", "")
# The operator's Runpod key for reading GPU prices into the catalogue ("" = keep the seeded
# prices); organizations' keys are only ever used for their own runs.
BENCHSITE_RUNPOD_PRICE_KEY = env_str("BENCHSITE_RUNPOD_PRICE_KEY", "", secret=True)
# Outbound calls a tenant chooses the address of (notification webhooks): hosts that resolve
# to private, loopback or link-local addresses are refused unless they match one of these
# patterns (fnmatch: "10.1.2.*", "*.corp.example"), so a tenant cannot make the workers
# probe the operator's own network.
BENCHSITE_OUTBOUND_PRIVATE_HOSTS = env_list("BENCHSITE_OUTBOUND_PRIVATE_HOSTS", [])
# The demo's own webhook receiver (``manage.py demo_run`` sets it, with DEBUG only): hooks may
# name this one loopback address and port, and no other inward one. Unset outside the demo.
BENCHSITE_DEMO_RECEIVER_URL = env_demo_receiver_url("BENCHSITE_DEMO_RECEIVER_URL", debug=DEBUG)
# Where the demo's receiver and mail sink keep what they were sent, for the notifications page
# to show ("": no demo inbox, the default).
BENCHSITE_DEMO_INBOX = env_str("BENCHSITE_DEMO_INBOX", "")
# The hosts an existing endpoint (runs.models.endpoints) may name, fnmatch patterns ("*": any
# public host); empty, the default: none, so no tenant can point the workers anywhere until
# the operator says where. A private address also needs BENCHSITE_OUTBOUND_PRIVATE_HOSTS.
BENCHSITE_ENDPOINT_HOSTS = env_list("BENCHSITE_ENDPOINT_HOSTS", [])
# Notification hooks an organization may keep, and tests (and confirmation rounds of e-mail
# addresses) they may be sent an hour, per hook and per organization: what a tenant can make
# the workers and the mail relay do (runs/services/hook_limits.py).
BENCHSITE_MAX_HOOKS_PER_ORG = env_int("BENCHSITE_MAX_HOOKS_PER_ORG", 20, minimum=1)
BENCHSITE_HOOK_TESTS_PER_HOUR = env_int("BENCHSITE_HOOK_TESTS_PER_HOUR", 5, minimum=1)
BENCHSITE_ORG_HOOK_TESTS_PER_HOUR = env_int("BENCHSITE_ORG_HOOK_TESTS_PER_HOUR", 20, minimum=1)
# Notifications: e-mail goes through Django's e-mail backend (EMAIL_* settings), from here.
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "benchsite@localhost")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "", secret=True)
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
_NOTIFICATIONS_SWEEP_SECONDS = env_int("BENCHSITE_NOTIFICATIONS_SWEEP_SECONDS", 60, minimum=5)
_RECONCILE_SECONDS = env_int("BENCHSITE_RECONCILE_SECONDS", 30, minimum=5)
_PRICE_REFRESH_SECONDS = env_int("BENCHSITE_PRICE_REFRESH_SECONDS", 86400, minimum=60)
# The audit page checks only events newer than its checkpoint; this walks every chain whole.
_AUDIT_VERIFY_SECONDS = env_int("BENCHSITE_AUDIT_VERIFY_SECONDS", 86400, minimum=60)
# Beat keeps its schedule in the database (django-celery-beat): the entries below are written
# there when it starts, and each experiment's schedule is a row of its own that beat reads
# again when it changes (runs.services.schedules). Times are aware; crontabs carry their zone.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
# Each entry expires when the next is due: passes that fall behind are dropped, not queued up.
CELERY_BEAT_SCHEDULE = {
    "runs-reconcile": {
        "task": "runs.tasks.runs_reconcile",
        "schedule": _RECONCILE_SECONDS,
        "options": {"expires": _RECONCILE_SECONDS},
    },
    "gpu-prices-refresh": {
        "task": "runs.tasks.gpu_prices_refresh",
        "schedule": _PRICE_REFRESH_SECONDS,
        "options": {"expires": _PRICE_REFRESH_SECONDS},
    },
    "audit-chains-verify": {
        "task": "runs.tasks.audit_chains_verify",
        "schedule": _AUDIT_VERIFY_SECONDS,
        "options": {"expires": _AUDIT_VERIFY_SECONDS},
    },
    # Deliveries whose retry is due (their own countdown is lost when a worker dies).
    "notifications-sweep": {
        "task": "runs.tasks.notifications_sweep",
        "schedule": _NOTIFICATIONS_SWEEP_SECONDS,
        "options": {"expires": _NOTIFICATIONS_SWEEP_SECONDS},
    },
}

# Behind a TLS-terminating proxy the original scheme arrives in this header.
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _PRODUCTION)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", _PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", _PRODUCTION)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if _PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Joining the browsers' preload list binds every subdomain of the operator's domain for years:
# that is the operator's decision (SECURE_HSTS_PRELOAD=true), not a default we impose.
SILENCED_SYSTEM_CHECKS = ["security.W021"]
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# A redirect loop would be the only outcome of forcing https on health probes over http.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("LOG_LEVEL", "INFO", {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}),
    },
    # The HTTP clients log each request's whole URL at INFO, and a URL can be a credential (a
    # Slack webhook's path is one): only their warnings and errors are kept.
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}

# Last: every variable read above (benchsite.env records each), for the deployment's docs.
ENVIRONMENT_VARIABLES = variables_read()
