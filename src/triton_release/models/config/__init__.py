"""config.pbtxt: Triton's model config schema (`schema`, tritonclient's `model_config_pb2` without gRPC)
and the hints a parse error adds (`hints`)."""
