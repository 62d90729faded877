"""The master's HTTP side: health, Prometheus metrics, REST gateway and WebUI files."""
