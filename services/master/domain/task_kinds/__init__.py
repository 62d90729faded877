"""The kinds of task that are not trials, each a small description (kind.py says what one holds) in
a module of its own: command.py, generic.py, notebook.py, shell.py, tensorboard.py, listed once in
registry.py. Beside them what the kinds bring of their own (a shell's key pair, the trials a
TensorBoard shows) and the model definition (context directory) any task may carry.

The room sits below the allocations that launch a task and the proxy that serves it, so both read a
kind's launch and proxy facts from its description, and above nothing of the lifecycle: the one
generic lifecycle (tasks/tasks.py) creates, kills, pauses, reprioritises, lists and ends a task of
any kind through the registry. Adding a fifth kind touches this folder only: its module and its
line in registry.py (plus, when Determined gives it routes of its own, one row in
servicers/api/task_kinds.py and one in the CLI's family)."""
