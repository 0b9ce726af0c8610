"""ServingCheck: the candidate must serve, correctly and fast enough, before it is pushed."""
