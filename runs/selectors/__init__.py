"""Reads that more than one caller needs, one module per job. Every read takes an
organization (or a membership, or a row of one) so that no read can wander into another
tenant's rows. Selectors never write: they import no service, task, API or consumer.
Importers import the module they use; this package re-exports nothing."""
