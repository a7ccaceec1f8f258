"""Kafka's transaction coordinator, as plain Python (no Ray).

* ``log_records``: the ``__transaction_state`` key/value formats.
* ``metadata``: a transactional id's state machine (TransactionMetadata).
* ``state_manager``: the owned partitions' metadata, load, append, expiry.
* ``markers``: getting COMMIT/ABORT markers written (TransactionMarkerChannelManager).
* ``coordinator``: the requests (TransactionCoordinator).
* ``producer_ids``: producer id blocks from ZooKeeper.

The actor shell is actors/transaction_coordinator.py.
"""
