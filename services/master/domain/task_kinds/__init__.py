"""What the kinds of task that are not trials bring of their own, below the allocations that run
them: a notebook's idle settings, a shell's key pair, the sources a TensorBoard reads, and the
model definition (context directory) any task may carry."""
