"""supercluster."""
