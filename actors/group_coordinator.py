"""Group coordinator actor (one per __consumer_offsets partition).

Not built yet: consumer groups, committed offsets and the __consumer_offsets
topic are the consumer-groups issue. Until then the edge does not advertise
FindCoordinator/JoinGroup/OffsetCommit, so clients use assign() without
committed offsets.
"""
