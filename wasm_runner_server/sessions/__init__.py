"""Sessions: their manager and metadata store, the service that holds them, execution admission,
back-pressure and the listing cursor."""
