"""The process runtime: a supervisor process per container (shim.py) and the agent's side of the
files and signals it exchanges with it. Kept light on imports: the supervisor loads this package."""
