"""Magnetar's client side of the Pulsar protocol: the one place that opens a connection to a
broker as a client.

Why this package exists: the proxy, the Spark source's executors, a broker's transaction
coordinator (calling the brokers of other topics), and later replicators and function
instances are all Pulsar clients. They share the pure pieces of ``magnetar.wire`` (protocol
version, ``urls``, ``matching``, ``lookup``, ``session``) and the connections here:

* ``connection``: one asyncio connection (framing, handshake, keepalive, backpressure,
  request ids, frames routed to the producer or consumer they are for; TLS through an
  ``ssl.SSLContext``, credentials through a ``wire.session.AuthProvider``);
* ``pool``: connections shared by address, opened once, replaced when lost; the lookup;
* ``blocking``: the same on a blocking socket, for synchronous callers (Spark's executors),
  with a frame reader a caller may replace (the Spark reader's copy-free one);
* ``handles``: producer and consumer handles (sequence ids and receipts; subscribe, flow,
  ack), reconnecting after ``common.backoff`` (growing, with jitter), as the Spark reader does.
"""
