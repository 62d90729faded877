"""The audit trail: every call that changes something (or tried to), recorded with who, what, on
which objects, from where, when and how it ended (`events.py`, `targets.py`); written in batches
off the calls' path, not in the change's own transaction (`recorder.py` says why: durability
against cost), read by admins (`queries.py`), kept within the settings' bounds of age and rows
(`retention.py`).

Which calls are changes is the edge's knowledge, not this room's: the servicers' audit interceptor
(servicers/audit_interceptor.py) classifies every RPC from the proto's http rules and hands this
room one AuditRecord per audited call.
"""
