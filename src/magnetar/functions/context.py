"""The ``pulsar.Context`` a function receives: every method of the official client's abstract
class (``pulsar.functions.context``), over the instance's client, producers and state.

State goes to the broker's state endpoints (``/admin/v3/functions/.../state/{key}``, served
from the metadata store by :mod:`.state`) through the client layer's admin client; a counter
is incremented by compare-and-set there (read the version, write with it, again on a
conflict). When the state cannot be reached the call raises :class:`StateUnavailableError`,
which the instance counts as the function's exception (the message is not acknowledged):
state writes are never dropped silently.
"""

from __future__ import annotations

import base64
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any, Final

import pulsar

from magnetar.client import admin

STATE_ATTEMPTS: Final = 100


class StateUnavailableError(RuntimeError):
    """The function's state could not be read or written (the reason says why)."""


class StateClient:
    """Function state over the admin API v3 (the broker keeps it in the metadata store)."""

    def __init__(self, http: admin.AdminClient, fqfn: str) -> None:
        self.http = http
        self.base = "/admin/v3/functions/" + "/".join(
            urllib.parse.quote(p, safe="") for p in fqfn.split("/")
        )

    def _path(self, key: str) -> str:
        return f"{self.base}/state/{urllib.parse.quote(key, safe='')}"

    def _call(self, method: str, key: str, body: Any = admin.NO_BODY) -> Any:
        try:
            return self.http.call(method, self._path(key), body)
        except admin.AdminError as err:
            if err.status == 404 and method == "GET":
                return None
            if err.status == 409:
                raise
            raise StateUnavailableError(
                f"function state {method} {key!r}: {err.status} {err.reason}"
            ) from None
        except (admin.AdminUnreachable, admin.AdminConfigError) as err:
            raise StateUnavailableError(f"function state {method} {key!r}: {err}") from None

    def get(self, key: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._call("GET", key)
        return found

    def put(self, key: str, value: bytes | str) -> None:
        if isinstance(value, str):
            self._call("POST", key, {"key": key, "stringValue": value})
            return
        self._call("POST", key, {"key": key, "byteValue": base64.b64encode(value).decode()})

    def incr(self, key: str, amount: int) -> int:
        for _ in range(STATE_ATTEMPTS):
            found = self.get(key)
            current = 0 if found is None else int(found.get("numberValue") or 0)
            version = 0 if found is None else int(found["version"])
            body = {"key": key, "numberValue": current + amount, "version": version}
            try:
                self._call("POST", key, body)
            except admin.AdminError:  # 409: another instance moved it first
                continue
            return current + amount
        raise StateUnavailableError(f"counter {key!r}: changed concurrently too often")

    def delete(self, key: str) -> None:
        try:
            self.http.call("DELETE", self._path(key))
        except admin.AdminError as err:
            if err.status != 404:
                raise StateUnavailableError(f"function state DELETE {key!r}: {err}") from None
        except admin.AdminUnreachable as err:
            raise StateUnavailableError(f"function state DELETE {key!r}: {err}") from None


class ContextImpl(pulsar.Context):  # type: ignore[misc]
    """One instance's context; the current message is set before each ``process`` call."""

    def __init__(
        self,
        *,
        config: dict[str, Any],
        instance_id: int,
        function_id: str,
        function_version: str,
        logger: logging.Logger,
        state: StateClient | None,
        producer_for: Callable[[str], Any],
        serde_for: Callable[[str], Any],
        consumer: Callable[[], Any],
        record_metric: Callable[[str, float], None],
    ) -> None:
        self.config = config
        self.instance_id = instance_id
        self.function_id = function_id
        self.function_version = function_version
        self.logger = logger
        self.state = state
        self.producer_for = producer_for
        self.serde_for = serde_for
        self.consumer = consumer
        self._record_metric = record_metric
        self.message: Any = None

    # --- the current message ---------------------------------------------------------------

    def get_message_id(self) -> Any:
        return self.message.message_id()

    def get_message_key(self) -> Any:
        return self.message.partition_key()

    def get_message_eventtime(self) -> Any:
        return self.message.event_timestamp()

    def get_message_properties(self) -> Any:
        return self.message.properties()

    def get_current_message_topic_name(self) -> Any:
        return self.message.topic_name()

    def get_partition_key(self) -> Any:
        return self.message.partition_key()

    def get_ordering_key(self) -> Any:
        return self.message.ordering_key()

    # --- the function ------------------------------------------------------------------------

    def get_function_tenant(self) -> str:
        return str(self.config["tenant"])

    def get_function_namespace(self) -> str:
        return str(self.config["namespace"])

    def get_function_name(self) -> str:
        return str(self.config["name"])

    def get_function_id(self) -> str:
        return self.function_id

    def get_instance_id(self) -> int:
        return self.instance_id

    def get_function_version(self) -> str:
        return self.function_version

    def get_logger(self) -> logging.Logger:
        return self.logger

    def get_user_config_value(self, key: str) -> Any:
        return self.config.get("userConfig", {}).get(key)

    def get_user_config_map(self) -> dict[str, Any]:
        return dict(self.config.get("userConfig", {}))

    def get_secret(self, secret_name: str) -> Any:
        """Pulsar's clear-text secrets provider: the value the function's ``secrets`` map
        gives the name (None when absent)."""
        return self.config.get("secrets", {}).get(secret_name)

    def get_input_topics(self) -> list[str]:
        topics = list(self.config.get("inputs", []))
        topics += [t for t in self.config.get("customSerdeInputs", {}) if t not in topics]
        if self.config.get("topicsPattern"):
            topics.append(self.config["topicsPattern"])
        return topics

    def get_output_topic(self) -> Any:
        return self.config.get("output")

    def get_output_serde_class_name(self) -> Any:
        return self.config.get("outputSerdeClassName")

    def record_metric(self, metric_name: str, metric_value: float) -> None:
        self._record_metric(metric_name, float(metric_value))

    # --- messages ------------------------------------------------------------------------------

    def publish(
        self,
        topic_name: str,
        message: Any,
        serde_class_name: str = "serde.IdentitySerDe",
        properties: dict[str, str] | None = None,
        compression_type: Any = None,
        callback: Callable[..., None] | None = None,
        message_conf: dict[str, Any] | None = None,
    ) -> None:
        """Serialize ``message`` with ``serde_class_name`` and send it to ``topic_name``
        (asynchronously; ``callback(result, message_id)`` when the broker answers)."""
        data = self.serde_for(serde_class_name).serialize(message)
        conf = dict(message_conf or {})
        if properties:
            conf["properties"] = {**conf.get("properties", {}), **properties}

        def done(result: Any, msg_id: Any) -> None:
            if result != pulsar.Result.Ok:
                self.logger.error("publish to %s failed: %s", topic_name, result)
            if callback is not None:
                callback(result, msg_id)

        self.producer_for(topic_name).send_async(data, done, **conf)

    def ack(self, msgid: Any, topic: str) -> None:
        self.consumer().acknowledge(msgid)

    # --- state ---------------------------------------------------------------------------------

    def _state(self) -> StateClient:
        if self.state is None:
            raise StateUnavailableError("function state is not configured for this instance")
        return self.state

    def incr_counter(self, key: str, amount: int) -> None:
        self._state().incr(key, int(amount))

    def get_counter(self, key: str) -> int:
        found = self._state().get(key)
        return 0 if found is None else int(found.get("numberValue") or 0)

    def del_counter(self, key: str) -> None:
        self._state().delete(key)

    def put_state(self, key: str, value: bytes | str) -> None:
        self._state().put(key, value)

    def get_state(self, key: str) -> bytes | None:
        found = self._state().get(key)
        if found is None:
            return None
        if found.get("numberValue") is not None:
            return int(found["numberValue"]).to_bytes(8, "big", signed=True)
        if found.get("stringValue") is not None:
            return str(found["stringValue"]).encode()
        return base64.b64decode(found.get("byteValue") or "")
