"""Launch latency: the first thing the user's code does is say when it started."""

import time

print(f"FIRST-LINE {time.time():.6f}", flush=True)
