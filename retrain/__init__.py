"""The `retrain` product: CLI, span layout and the node-by-node TFX runner."""
