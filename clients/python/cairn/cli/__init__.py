"""The `cairn` command-line client (click), built on the generated gRPC stubs of cairn.api.v1.

Entry point: cairn.cli.main:main. One module per command group; rendering in `output`."""
