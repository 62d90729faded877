"""The master's ground floor: its settings (flags and environment), the config file and the resource
pools it declares, read once at start and handed down as one Settings object. It imports nothing
else of the master."""
