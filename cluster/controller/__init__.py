"""The controller's logic (Kafka's KafkaController), with its I/O behind interfaces.
No Ray here.

- controller.py: Controller, the event queue, election and failover, broker and
  topic changes, ISR notifications, the partition state machine's elections,
  LeaderAndIsr / UpdateMetadata rounds; it composes the parts below.
- configs.py, topic_deletion.py, partition_operations.py (partition growth,
  elections and controlled shutdown, reassignment): its parts.
- channel.py: requests to replicas, edges and coordinators, and death watches
  (actors/controller_channel.py over Ray; a fake in the unit tests).
- zk.py: ZooKeeper calls awaited off the event loop.
"""
