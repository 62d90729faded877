"""The GPU check's system-metrics part (issue 46): the trial the check ran on the GPU reads back,
through Determined's profiler API on the master's HTTP port, with GPU series for its slot's GPU and
a GPU utilisation above zero while it trained. Prints what it found; exits 1 when it is not so.

    python scripts/gpu_check/system_metrics.py HTTP_URL TRIAL_ID
"""

from __future__ import annotations

import json
import sys
import urllib.request


def call(url: str, token: str = "", body: dict[str, object] | None = None) -> list[dict[str, object]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as reply:
        return [json.loads(line) for line in reply.read().decode().splitlines() if line.strip()]


def main() -> int:
    base, trial = sys.argv[1].rstrip("/"), int(sys.argv[2])
    (login,) = call(f"{base}/api/v1/auth/login", body={"username": "determined", "password": ""})
    token = str(login["token"])
    series = [
        label
        for line in call(f"{base}/api/v1/trials/{trial}/profiler/available_series", token)
        for label in line["result"]["labels"]  # type: ignore[index]
    ]
    print("SERIES", sorted({(s["name"], s.get("gpuUuid", "")) for s in series}))
    utilisation = [
        value
        for line in call(f"{base}/api/v1/trials/{trial}/profiler/metrics?labels.name=gpu_util", token)
        for value in line["result"]["batch"]["values"]  # type: ignore[index]
    ]
    print("GPU_UTIL", utilisation)
    ok = bool(utilisation) and max(utilisation) > 0
    print("SYSTEM METRICS", "OK" if ok else "MISSING: no GPU utilisation above zero")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
