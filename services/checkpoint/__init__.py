"""The checkpoint service: storage backends (shared_fs, directory, s3), streamed transfer of
checkpoint files, deletion, and garbage collection by an experiment's policy. It keeps no state:
the storage configuration travels with every call."""
