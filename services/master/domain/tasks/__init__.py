"""Tasks that are not trials (commands, notebooks, shells, TensorBoards, generic tasks): their one
lifecycle on top of allocations (tasks.py), for every kind the registry describes
(task_kinds/registry.py); what only a notebook does once it runs (notebook_idle.py); and an
experiment's TensorBoard files, deleted with it (tensorboard_files.py)."""
