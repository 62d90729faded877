"""Allocations: the slots a task holds while it runs, their lifecycle and every container state on
the way, what an agent is told to run (task_spec.py for trials, command_spec.py for other tasks),
how an allocation's containers meet (rendezvous.py), and the services tasks serve through the
master's proxy (task_services.py, proxy_access.py), each as its kind's description says, and the
ports a trial's experiment lists for it (trial_proxy_ports.py)."""
