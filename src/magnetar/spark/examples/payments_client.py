"""The host side of the payments example (payments.py): produce payment events to the
source topic and read the per-merchant totals back from the results topic with the official
client -- what the tests and the e2e job on Kubernetes do, and what a user runs by hand:

    python -m magnetar.spark.examples.payments_client produce --service-url pulsar://... \\
        --topic persistent://public/default/payments --count 1000
    python -m magnetar.spark.examples.payments_client totals --service-url pulsar://... \\
        --topic persistent://public/default/merchant-totals
    python -m magnetar.spark.examples.payments_client consume --service-url pulsar://... \\
        --topic persistent://public/default/payments --count 1000

``produce`` writes ``--count`` payments of ``--merchants`` merchants spread over
``--minutes`` minutes of event time from ``--start``, then one payment ``--close-after``
minutes later whose event time moves the pipeline's watermark past them (so their windows
are complete and written). ``totals`` prints one JSON result per line; ``--expect`` compares
them with what the produced payments add up to and exits 1 on any difference. ``consume``
(no Spark needed: the example's round trip alone) subscribes from the earliest message,
receives the payments ``produce`` wrote with the same arguments, acknowledges them, prints
what they add up to per merchant and exits 1 when one is missing or differs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pulsar

MINUTE = "%Y-%m-%dT%H:%M:%SZ"
Payment = dict[str, Any]
Totals = dict[tuple[str, str], tuple[int, int]]
RESULT_KEYS = {"merchant", "windowStart", "windowEnd", "totalCents", "payments"}


def sample(
    count: int, *, seed: int, start: datetime, minutes: int = 3, merchants: int = 4
) -> list[Payment]:
    """``count`` payments over ``minutes`` minutes from ``start``, in random (event-time)
    order, reproducible from ``seed``."""
    rng = random.Random(seed)  # noqa: S311 (sample data, reproducible by seed)
    out = []
    for i in range(count):
        when = start + timedelta(milliseconds=rng.randrange(0, minutes * 60_000))
        out.append(
            {
                "paymentId": f"s{seed}-{i}",
                "merchant": f"m{rng.randrange(merchants)}",
                "amountCents": rng.randrange(1, 50_000),
                "eventTime": int(when.timestamp() * 1000),
            }
        )
    return out


def closing(at: datetime, merchant: str = "m0") -> Payment:
    """A one-cent payment at ``at``: its event time moves the watermark."""
    return {
        "paymentId": f"close-{int(at.timestamp())}",
        "merchant": merchant,
        "amountCents": 1,
        "eventTime": int(at.timestamp() * 1000),
    }


def expected_totals(payments: Iterable[Payment]) -> Totals:
    """(merchant, window start) -> (total cents, payments), as the pipeline computes them."""
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for p in payments:
        minute = datetime.fromtimestamp(p["eventTime"] / 1000, UTC).replace(second=0, microsecond=0)
        acc = sums[(p["merchant"], minute.strftime(MINUTE))]
        acc[0] += int(p["amountCents"])
        acc[1] += 1
    return {k: (v[0], v[1]) for k, v in sums.items()}


def as_totals(results: Iterable[dict[str, Any]]) -> Totals:
    return {(r["merchant"], r["windowStart"]): (r["totalCents"], r["payments"]) for r in results}


def produce(client: pulsar.Client, topic: str, payments: Iterable[Payment]) -> int:
    """Publish the payments keyed by merchant with their event time; returns how many."""
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    n = 0
    try:
        for p in payments:
            producer.send_async(
                json.dumps(p).encode(),
                None,
                partition_key=str(p["merchant"]),
                event_timestamp=int(p["eventTime"]),
            )
            n += 1
        producer.flush()
    finally:
        producer.close()
    return n


def read_results(client: pulsar.Client, topic: str, *, timeout_ms: int = 10_000) -> list[Any]:
    """Every result stored on the results topic, oldest first (a reader from the earliest)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    try:
        while reader.has_message_available():
            msg = reader.read_next(timeout_millis=timeout_ms)
            result = json.loads(msg.data())
            if not isinstance(result, dict) or not RESULT_KEYS <= result.keys():
                raise ValueError(f"{topic} holds a message that is not a total: {result!r:.200}")
            if msg.partition_key() != result["merchant"]:
                raise ValueError(f"result keyed {msg.partition_key()!r}: {result}")
            out.append(result)
    finally:
        reader.close()
    return out


def consume(
    client: pulsar.Client, topic: str, wanted: Sequence[Payment], *, timeout_ms: int = 30_000
) -> dict[str, Payment]:
    """Receive (and acknowledge) from the earliest message until every payment of ``wanted``
    came or nothing came for ``timeout_ms``; returns what came, by paymentId."""
    consumer = client.subscribe(
        topic, "payments-check", initial_position=pulsar.InitialPosition.Earliest
    )
    ids = {str(p["paymentId"]) for p in wanted}
    got: dict[str, Payment] = {}
    try:
        while not ids <= got.keys():
            try:
                msg = consumer.receive(timeout_millis=timeout_ms)
            except pulsar.Timeout:
                break
            payment = json.loads(msg.data())
            got[str(payment["paymentId"])] = payment
            consumer.acknowledge(msg)
    finally:
        consumer.close()
    return got


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="payments_client", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    prod = sub.add_parser("produce", help="publish sample payments and a closing payment")
    tot = sub.add_parser("totals", help="print the results topic's totals")
    con = sub.add_parser("consume", help="receive the payments `produce` wrote and check them")
    for p in (prod, tot, con):
        p.add_argument("--service-url", required=True)
        p.add_argument("--topic", required=True)
    for p in (prod, tot, con):
        p.add_argument("--count", type=int, default=1000)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--start", default="2026-01-01T12:00:00Z", help="first minute (UTC)")
        p.add_argument("--minutes", type=int, default=3)
        p.add_argument("--merchants", type=int, default=4)
        p.add_argument("--close-after", type=int, default=10, help="minutes")
    tot.add_argument("--expect", action="store_true", help="compare with `produce`'s sums")
    con.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for a next message"
    )
    args = ap.parse_args(argv)
    start = datetime.fromisoformat(args.start.replace("Z", "+00:00"))
    payments = sample(
        args.count, seed=args.seed, start=start, minutes=args.minutes, merchants=args.merchants
    )
    client = pulsar.Client(
        args.service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(
            pulsar.LoggerLevel.Warn
        ),  # the results, not the client's chatter
    )
    try:
        if args.cmd == "produce":
            n = produce(client, args.topic, payments)
            produce(client, args.topic, [closing(start + timedelta(minutes=args.close_after))])
            print(f"produced {n} payments and 1 closing payment to {args.topic}")
            return
        if args.cmd == "consume":
            received = consume(client, args.topic, payments, timeout_ms=int(args.timeout * 1000))
            _report_consumed(payments, received)
            return
        try:
            results = read_results(client, args.topic)
        except ValueError as e:
            print(f"payments_client: {e}", file=sys.stderr)
            sys.exit(2)
    finally:
        client.close()
    for r in results:
        print(json.dumps(r, sort_keys=True))
    if args.expect:
        got, want = as_totals(results), expected_totals(payments)
        if got != want:
            missing = sorted(set(want) - set(got))
            wrong = sorted(k for k in set(want) & set(got) if want[k] != got[k])
            print(f"totals differ: missing {missing}, wrong {wrong}", file=sys.stderr)
            sys.exit(1)
        print(f"{len(got)} totals match the {len(payments)} payments produced")


def _report_consumed(payments: Sequence[Payment], got: dict[str, Payment]) -> None:
    per_merchant: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p in payments:
        acc = per_merchant[str(p["merchant"])]
        acc[0] += int(p["amountCents"])
        acc[1] += 1
    missing = [p["paymentId"] for p in payments if p["paymentId"] not in got]
    differ = [p["paymentId"] for p in payments if got.get(p["paymentId"], p) != p]
    for merchant, (cents, n) in sorted(per_merchant.items()):
        print(f"{merchant}: {n} payments, {cents / 100:.2f} in all")
    if missing or differ:
        print(f"payments missing: {missing[:10]}, differing: {differ[:10]}", file=sys.stderr)
        sys.exit(1)
    print(f"consumed all {len(payments)} payments, each as produced")


if __name__ == "__main__":
    main()
