"""Route tables of the API proper: meta, sessions, execution, files, batch."""
