"""The exclamation function taking a few milliseconds per message, so that a test can kill
its instance mid-stream."""

import time

from pulsar import Function


class SlowExclamationFunction(Function):
    def process(self, input, context):
        time.sleep(0.005)
        return input + "!"
