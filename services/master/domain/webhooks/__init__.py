"""Webhooks (Determined's): receivers' URLs and their triggers (`registry.py`), the events that fire
them (`triggers.py`: an experiment's state, a task's log line, trial code's alert), the payloads and
their signature (`payloads.py`), the durable outbox of posts owed (`outbox.py`), and the sender that
delivers them with retries (`sender.py`).

Events are written to the outbox in the transaction of the change that causes them, so a master
that stops after the commit still sends them; the sender posts outside every unit of work."""
