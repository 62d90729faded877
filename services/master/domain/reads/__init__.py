"""The master's read model: every read the API, the gateway and the agents' stream make, as named
query functions over one session (`with ctx.db.read() as s`). They return rows or small dataclasses;
the servicers turn those into messages. Writes never live here: they go through the lifecycle
modules' transition functions."""
