"""Providers run an execution in some isolation and return an ExecResult."""
