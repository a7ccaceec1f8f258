"""Client quotas (Kafka's ClientQuotaManager, KIP-13/55/124/219), no Ray.

model.py: quota entities and their 8-level precedence, Kafka's sampled rate
and its throttle time. zk_store.py: the /config/users and /config/clients
znodes, in Kafka's format, and their change notifications.
"""
