"""Magnetar: a Pulsar-compatible, Kubernetes-native messaging system."""

from magnetar import native as _native

__version__ = "0.1.0"

# Before any module of the compiled build is imported (magnetar/native.py).
_native.install()
