"""Things every layer may use: errors, config, logging, small async helpers."""
