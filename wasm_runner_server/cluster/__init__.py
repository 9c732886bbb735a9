"""A service node among others: sessions' leases and their moves between nodes."""
