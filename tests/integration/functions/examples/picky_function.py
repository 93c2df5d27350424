"""A function that logs each input and raises on the ones starting with "bad" (for retries,
the dead-letter topic and the log topic)."""

from pulsar import Function


class PickyFunction(Function):
    def process(self, input, context):
        context.get_logger().info("got %s", input)
        context.record_metric("length", len(input))
        if input.startswith("bad"):
            raise ValueError(f"refusing {input}")
        return input.upper()
