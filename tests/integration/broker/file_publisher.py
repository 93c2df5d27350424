"""The replayable-source publisher of the effectively-once pattern (docs/architecture.md,
"Deduplication"): publish every line of a file with the line's byte offset as the sequence
id, under a fixed producer name; on start, resume after the offset the broker reports as the
last stored (``last_sequence_id``). Run as a program by the tests, which SIGKILL it midway.

Usage: python file_publisher.py SERVICE_URL TOPIC FILE
"""

from __future__ import annotations

import sys
import threading

import pulsar


def main(service_url: str, topic: str, path: str) -> None:
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    producer = client.create_producer(
        topic,
        producer_name="file-publisher",
        batching_enabled=False,
        send_timeout_millis=0,  # never give up: a resend is dropped by deduplication
        block_if_queue_full=True,
        max_pending_messages=200,
    )
    last = producer.last_sequence_id()
    pending = 0
    failed = False
    cond = threading.Condition()

    def sent(res: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        nonlocal pending, failed
        with cond:
            pending -= 1
            failed = failed or res != pulsar.Result.Ok
            cond.notify_all()

    with open(path, "rb") as source:
        offset = 0
        for line in source:
            if offset > last:
                with cond:
                    pending += 1
                producer.send_async(line.rstrip(b"\n"), sent, sequence_id=offset)
            offset += len(line)
    with cond:
        if not cond.wait_for(lambda: pending == 0, timeout=120):
            failed = True
    producer.close()
    client.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(*sys.argv[1:4])
