"""The TF Serving-compatible model server: one data plane (manager, batching, tensors, api) with
REST and gRPC as adapters over it, request logs and the canary split."""
