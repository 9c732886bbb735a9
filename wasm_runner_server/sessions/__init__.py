"""Sessions: their manager and metadata store, execution admission and back-pressure."""
