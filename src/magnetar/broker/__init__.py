"""The broker: Pulsar binary protocol over managed ledgers (DESIGN.md §1, §6, §7)."""
