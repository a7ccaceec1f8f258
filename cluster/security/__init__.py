"""Authorization (issue 21): Kafka's ACL model and ZooKeeper-mode AclAuthorizer."""
