"""Artifacts: files published out of a session on purpose, immutable and content-addressed, kept in
a store that outlives the session under their own retention."""
