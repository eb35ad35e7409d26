"""Every durable fact of Benchsite. Each tenant-owned row carries its organization."""

from runs.models.agent import AgentMessageRecord
from runs.models.audit import AuditChainCheckpoint, AuditEvent
from runs.models.budgets import Budget
from runs.models.calibrations import Calibration
from runs.models.catalogue import GpuPriceOverride, GpuType, ModelSpec
from runs.models.credentials import CredentialProvider, ProviderCredential
from runs.models.endpoints import Endpoint
from runs.models.evaluations import EvaluationSet, TrialEvaluation
from runs.models.experiments import Experiment, WorkloadDataset
from runs.models.figures import TrialLevelFigures
from runs.models.ingest import IngestProbe
from runs.models.notifications import (
    ConfirmedRecipient,
    DeliveryStatus,
    HookKind,
    Notification,
    NotificationDelivery,
    NotificationEvent,
    NotificationHook,
)
from runs.models.promotions import Promotion, PromotionState
from runs.models.runs import Measurement, Run, Trial
from runs.models.schedules import ExperimentSchedule, GateVerdict, ScheduleFiring
from runs.models.sso import SsoIdentity
from runs.models.tenancy import ApiToken, Membership, Organization, Role, User

__all__ = [
    "AgentMessageRecord",
    "ApiToken",
    "AuditChainCheckpoint",
    "AuditEvent",
    "Budget",
    "Calibration",
    "ConfirmedRecipient",
    "CredentialProvider",
    "DeliveryStatus",
    "Endpoint",
    "EvaluationSet",
    "Experiment",
    "ExperimentSchedule",
    "GateVerdict",
    "GpuPriceOverride",
    "GpuType",
    "HookKind",
    "IngestProbe",
    "Measurement",
    "Membership",
    "ModelSpec",
    "Notification",
    "NotificationDelivery",
    "NotificationEvent",
    "NotificationHook",
    "Organization",
    "Promotion",
    "PromotionState",
    "ProviderCredential",
    "Role",
    "Run",
    "ScheduleFiring",
    "SsoIdentity",
    "Trial",
    "TrialEvaluation",
    "TrialLevelFigures",
    "User",
    "WorkloadDataset",
]
