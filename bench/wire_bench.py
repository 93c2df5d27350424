"""Pulsar codec throughput: SEND frames (1 KiB payload) encoded and decoded per second.

Why this exists: every published message is decoded by ``frames.FrameDecoder`` and every
dispatched one encoded by ``frames.encode_payload_command*``, in Python, on the broker's event
loop; this bounds messages/s per core before any storage work. Prints figures only.

    .venv/bin/python bench/wire_bench.py [--frames 100000] [--payload 1024] [--chunk 65536]
"""

from __future__ import annotations

import argparse
import time

from magnetar.wire import commands, frames, pb
from magnetar.wire.ids import MessageId


def metadata(seq: int) -> pb.MessageMetadata:
    md = pb.MessageMetadata(
        producer_name="standalone-0-17", sequence_id=seq, publish_time=1_700_000_000_000 + seq
    )
    md.properties.add(key="trace", value="abc123")
    return md


def best(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--payload", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=64 * 1024, help="bytes per feed()")
    args = parser.parse_args()
    n, payload = args.frames, b"x" * args.payload

    def encode_send() -> list[bytes]:
        return [
            frames.encode_message(commands.send(producer_id=1, sequence_id=i), metadata(i), payload)
            for i in range(n)
        ]

    sends = encode_send()
    blob = b"".join(sends)
    chunks = [blob[i : i + args.chunk] for i in range(0, len(blob), args.chunk)]

    def decode(verify: bool) -> None:
        decoder = frames.FrameDecoder(verify_checksum=verify)
        count = 0
        for chunk in chunks:
            for _ in decoder.feed(chunk):
                count += 1
        assert count == n

    stored = [f.headers_and_payload for f in frames.FrameDecoder().feed(blob)]

    def encode_dispatch() -> None:
        for i, hp in enumerate(stored):
            assert hp is not None
            frames.encode_payload_command_parts(
                commands.message(consumer_id=1, message_id=MessageId(7, i)), hp
            )

    flows = frames.encode_command(commands.flow(consumer_id=1, permits=500)) * n

    def decode_simple() -> None:
        assert sum(1 for _ in frames.FrameDecoder().feed(flows)) == n

    print(f"{n} SEND frames, {args.payload} B payload, {len(sends[0])} B per frame")
    rows = [
        ("encode SEND (client side, +crc32c)", best(encode_send, 1)),
        ("decode SEND, crc32c verified", best(lambda: decode(True))),
        ("decode SEND, crc32c not verified", best(lambda: decode(False))),
        ("encode MESSAGE (dispatch, zero-copy)", best(encode_dispatch)),
        ("decode FLOW (simple command)", best(decode_simple)),
    ]
    for name, seconds in rows:
        print(f"  {name:40s} {n / seconds:>12,.0f} frames/s  {seconds / n * 1e6:6.2f} us/frame")
    print(f"  decode throughput (verified): {len(blob) / rows[1][1] / 2**20:,.0f} MiB/s")


if __name__ == "__main__":
    main()
