"""``magnetar proxy``: one entry point in front of a cluster's brokers, as Pulsar's proxy.

Why: a client outside Kubernetes cannot reach each broker pod's address, but it can reach
one Service. The proxy answers lookups itself (asking the brokers, following their
redirects) with ``proxy_through_service_url``, so the official clients open their topic
connections to the proxy again, naming the owning broker in CONNECT's
``proxy_to_broker_url``; the proxy then forwards that connection's bytes to that broker
unchanged. The admin REST API is forwarded too (redirects to the owner followed inside).

Modules: ``config`` (the knobs), ``brokers`` (which brokers exist, and the proxy's own
protocol connections to them), ``connection`` (one client connection), ``http`` (admin
forwarding), ``server`` (listeners and the process).
"""
