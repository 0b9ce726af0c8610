"""The serving side: a local model server that speaks TensorFlow Serving's REST and gRPC
APIs over the Pusher's `<base>/<model>/<version>/` layout, its models.config, the pre-push
serving check and rollback."""
