"""What the checkpoint service does, apart from gRPC: transfers, deletion, the GC policy."""
