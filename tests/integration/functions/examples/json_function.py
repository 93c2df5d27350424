"""A function with its own SerDe (JSON), given by --custom-serde-inputs and
--output-serde-classname: it receives a dict and returns one."""

import json

from pulsar import Function, SerDe


class JsonSerDe(SerDe):
    def serialize(self, input):
        return json.dumps(input, sort_keys=True).encode()

    def deserialize(self, input_bytes):
        return json.loads(input_bytes)


class Total(Function):
    def process(self, input, context):
        return {"total": sum(input["values"]), "instance": context.get_instance_id()}
