"""Builds the task image (cairn.task_image says what it holds and how it is tagged) without a
registry: a debootstrap root filesystem imported into Docker, then layers made by running a build
container and committing it. scripts/build_task_image.py is the entry point (`make task-image`)."""
