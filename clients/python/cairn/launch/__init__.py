"""Launch layers: start one worker process per slot of a trial's container and tag their output
with their rank (`python3 -m cairn.launch.torch_distributed ...`, `python3 -m cairn.launch.wrap_rank`)."""
