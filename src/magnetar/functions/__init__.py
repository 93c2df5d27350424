"""Pulsar Functions for Python (issue 28): functions on topics, run as supervised processes.

A function is a ``pulsar.Function`` subclass (or a plain module with ``process(input)``)
uploaded through the admin API v3 (``/admin/v3/functions/{tenant}/{namespace}/{name}``,
served by ``broker/admin/functions.py``). This package is a *client* of brokers: it stands on
the metadata store, the client layer and the official Python client only (an import-linter
contract; docs/architecture.md), so the broker's admin routes, ``magnetar standalone`` and a
function instance can all use it.

Modules:

* :mod:`.config` -- Pulsar's ``FunctionConfig``: checked, defaulted, and the names derived
  from it (pure).
* :mod:`.registry` -- functions, their packages and their running state (which instances are
  stopped) in the metadata store (``docs/metadata.md``).
* :mod:`.state` -- function state (``put_state``, counters) in the metadata store, counters by
  compare-and-set.
* :mod:`.runtime` -- what the admin API asks of whatever runs instances (a ``Protocol``),
  and the status and stats answers in Pulsar's JSON shapes (pure).
* :mod:`.supervisor` -- instances as child processes of ``magnetar standalone``: started,
  restarted on a crash, stopped, their status read back.
* :mod:`.pod` -- one instance in a pod of the Kubernetes ``Function`` resource: the package
  downloaded from the brokers, then :mod:`.instance`.
* :mod:`.kubernetes` -- function records as ``Function`` resources (the runtime of
  ``magnetar broker --functions-runtime kubernetes``).
* :mod:`.instance` -- one instance: the official client's consumer and producers around the
  user's function (processing guarantees, SerDes, output properties, metrics).
* :mod:`.context` -- the ``pulsar.Context`` the user's function receives.
* :mod:`.trigger` -- ``functions trigger``: a value in, the function's output back (through
  the client layer).

See docs/functions.md.
"""
