"""Node agent daemon and its backends (built by the gRPC and real-execution issues)."""
