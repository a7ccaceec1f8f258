"""The controller's logic (Kafka's KafkaController), with its I/O behind interfaces.
No Ray here.

- controller.py: Controller, the event queue, election and failover, broker and
  topic changes, ISR notifications, the partition state machine's elections;
  it composes the parts below.
- broker_requests.py: LeaderAndIsr / UpdateMetadata rounds (Kafka's
  ControllerBrokerRequestBatch) and what a replica is created with.
- configs.py, topic_deletion.py, partition_operations.py (partition growth,
  elections and controlled shutdown, reassignment): its parts.
- controller_context.py: what the active controller knows (brokers, topics,
  partition states), rebuilt from ZooKeeper on failover.
- replica_state_machine.py, partition_state_machine.py: Kafka's two state
  machines; leader_election.py: the four election strategies;
  leader_imbalance.py: the preferred-leader imbalance the auto rebalance reads;
  reassignment.py: the reassignment model (targets, adding/removing replicas).
- channel.py: requests to replicas, edges and coordinators, and death watches
  (actors/controller_channel.py over Ray; a fake in the unit tests).
- zk.py: ZooKeeper calls awaited off the event loop.
"""
