"""What each container costs the machine, measured by the agent for every task kind (trials,
notebooks, shells, commands, TensorBoards), not by the task's code: CPU, resident memory, block
I/O, network and GPUs, sampled every --system-metrics-interval and sent on the agent's stream.

proc.py reads the processes (one pass over /proc for all containers), gpus.py asks NVML,
collector.py turns two readings into a sample's rates and hands batches to the session.
"""
