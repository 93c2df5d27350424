"""Magnetar: a Pulsar-compatible, Kubernetes-native messaging system."""

__version__ = "0.1.0"
