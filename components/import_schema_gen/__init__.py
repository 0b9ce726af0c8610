"""ImportSchemaGen that leaves out the features the pipeline never stores."""
