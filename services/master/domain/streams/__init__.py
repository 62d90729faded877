"""Determined's streaming updates (`/stream`, behind the `streaming_updates` feature switch): a
client subscribes to projects, models and model versions with filters, is sent what it may read of
them (a sync between two markers), then every change as it commits.

- `keysets.py`: the range-encoded id sets of the wire ("1,3-5"), kept as intervals so that a
  client's `known` set is never expanded id by id.
- `specs.py`: the client's startup message (sync_id, known, subscribe), checked and bounded.
- `entities.py`: what is streamed of each kind (its wire message, its filter fields, who may read).
- `changes.py`: which streamed rows each unit of work changed, learned from its database session,
  numbered (`seq`) and handed to the publisher once the unit commits.
- `publisher.py`: the subscribers of this process and their bounded queues; a client that falls
  behind is dropped, never buffered without end.
- `sync.py`: a subscription's first messages (what the client lacks, what it knows that is gone).
- `session.py`: one connection's conversation, independent of the websocket that carries it.
"""
