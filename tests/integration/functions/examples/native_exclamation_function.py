"""Pulsar's Python example of a native function: a module with ``process(input)``."""


def process(input):
    return f"{input}!"
