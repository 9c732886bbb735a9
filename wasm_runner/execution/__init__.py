"""Running many executions: batch lanes and the worker processes they (and one-shot runs) go to."""
