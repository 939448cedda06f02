"""The outbox: notifications derived from the journal and delivered at least once.

One outbox for every kind (docs/notifications.md): A2A push notifications (a task's state
changes, to the client's webhook) and approval notifications (a request that waits for people,
to the operator's channels). `ingest.py` folds the journal's total order from a durable cursor
into lanes of entries (`store.py`, an LMDB environment of its own); `dispatch.py` delivers each
lane's head in order, with retries, backoff and a deadline, through `webhooks.py` (guarded HTTP:
`addresses.py`) or Apprise (`channels.py`); `progress.py` journals which deliveries ended, so
the node that takes a journal over resumes the rest. `service.py` is the facade the API uses.
"""
