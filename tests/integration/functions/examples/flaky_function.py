"""The exclamation function failing the first time it sees "boom" (its state counts the
attempts), to show what a raising function does under each guarantee."""

from pulsar import Function


class FlakyFunction(Function):
    def process(self, input, context):
        if input == "boom":
            context.incr_counter("attempts", 1)
            if context.get_counter("attempts") == 1:
                raise RuntimeError("the first attempt fails")
        return input + "!"
