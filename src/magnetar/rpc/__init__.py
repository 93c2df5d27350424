"""Generated gRPC code for the broker <-> bookie protocol (proto/rpc/bookie.proto).

It sits below both sides: the bookie serves it, the ledger client calls it, and neither
imports the other. Import the messages as ``from magnetar.rpc import bookie_pb2``.
"""

from magnetar.rpc._gen import bookie_pb2, bookie_pb2_grpc

__all__ = ["bookie_pb2", "bookie_pb2_grpc"]
