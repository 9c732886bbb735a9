"""The core's commands (run, batch, prepare, doctor), with no server import."""
