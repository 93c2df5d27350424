"""Autorecovery: the auditor that marks under-replicated ledgers and the workers that
re-replicate them (docs/operations.md, "Autorecovery and decommission")."""
