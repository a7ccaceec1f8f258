"""The broker's lifecycle on one machine: its configuration checked at start,
ZooKeeper and Ray started (or joined), the broker actors created, supervised
and replaced when they die, and everything stopped in reverse order.

cli/ parses the command line and calls this package; nothing here reads argv.
"""
