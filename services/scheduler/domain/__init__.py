"""The scheduling decision itself: plain data in, plain data out, nothing of gRPC."""
