"""A function answering, as JSON, what every ``pulsar.Context`` method tells it about the
current message and itself, and exercising state, metrics and publish."""

import base64
import json

from pulsar import Function


class ContextProbe(Function):
    def process(self, input, context):
        context.incr_counter("calls", 2)
        context.incr_counter("calls", -1)
        context.put_state("last", input)
        context.record_metric("probe", 1)
        context.publish(context.get_user_config_value("side"), input, properties={"p": "1"})
        msg_id = context.get_message_id()
        answer = {
            "message_id": base64.b64encode(msg_id.serialize()).decode(),
            "key": context.get_message_key(),
            "event_time": context.get_message_eventtime(),
            "properties": context.get_message_properties(),
            "topic": context.get_current_message_topic_name(),
            "partition_key": context.get_partition_key(),
            "tenant": context.get_function_tenant(),
            "namespace": context.get_function_namespace(),
            "name": context.get_function_name(),
            "function_id": context.get_function_id(),
            "instance_id": context.get_instance_id(),
            "version": context.get_function_version(),
            "logger": context.get_logger().name,
            "user_config": context.get_user_config_map(),
            "secret": context.get_secret("password"),
            "inputs": context.get_input_topics(),
            "output": context.get_output_topic(),
            "output_serde": context.get_output_serde_class_name(),
            "counter": context.get_counter("calls"),
            "state": context.get_state("last").decode(),
            "missing_state": context.get_state("nothing"),
        }
        context.del_counter("calls")
        answer["counter_after_delete"] = context.get_counter("calls")
        return json.dumps(answer)
