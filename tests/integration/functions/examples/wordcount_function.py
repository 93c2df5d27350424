"""Pulsar's Python example: count words in the function's state, pass the line on."""

from pulsar import Function


class WordCountFunction(Function):
    def __init__(self):
        pass

    def process(self, item, context):
        for word in item.split():
            context.incr_counter(word, 1)
        return item + "!"
