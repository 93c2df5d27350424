"""The broker: Pulsar binary protocol over managed ledgers (docs/architecture.md)."""
