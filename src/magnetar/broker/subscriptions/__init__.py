"""Subscriptions of a topic: dispatchers, consumers, acknowledgements, readers, seek.

The broker core hands each topic's SUBSCRIBE commands to :class:`TopicSubscriptionsImpl`
(the :class:`~magnetar.broker.contracts.TopicSubscriptions` seam) and drives the consumers it
returns; this package never sees a socket -- it answers through ``ServerCnx``.

Modules: ``topic_subscriptions`` (the per-topic entry point, positions), ``subscription`` (one
subscription: consumers, seek, stats) and its parts ``dispatch`` (the dispatch loop),
``acknowledgements`` (what an ACK changes), ``redelivery`` (replay set, redelivery counts,
rewind), ``delayed`` (delayed delivery); ``dispatchers`` (Exclusive/Failover, Shared, Key_Shared
policies), ``selectors`` (pure consumer-selection policies), ``consumer`` (per-consumer state),
``entries`` (entry metadata read once per entry), ``acks`` (ack-set arithmetic), ``hashing``
(Pulsar's sticky-key Murmur3), ``stats``; ``nonpersistent`` (non-persistent topics'
subscriptions: hand out or drop, nothing kept).
"""

from magnetar.broker.subscriptions.nonpersistent import NonPersistentSubscriptions
from magnetar.broker.subscriptions.topic_subscriptions import TopicSubscriptionsImpl

__all__ = ["NonPersistentSubscriptions", "TopicSubscriptionsImpl"]
