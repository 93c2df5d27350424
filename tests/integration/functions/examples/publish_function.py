"""Pulsar's Python example: publish to another topic, with properties, and return nothing."""

from pulsar import Function


class PublishFunction(Function):
    def __init__(self):
        self.publish_topic = "publishtopic"

    def process(self, input, context):
        publish_topic = self.publish_topic
        if "publish-topic" in context.get_user_config_map():
            publish_topic = context.get_user_config_value("publish-topic")
        context.publish(
            publish_topic, input + "!", properties={"test-property-key": "test-property-value"}
        )
        return None
