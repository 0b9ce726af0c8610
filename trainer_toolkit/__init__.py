"""The trainer toolkit a pipeline's run_fn calls: hardware, tf.distribute strategy, mixed precision,
training budgets, datasets, task heads, warm start, fault tolerance, export and provenance."""
