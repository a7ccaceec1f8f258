"""The controller's logic, with its I/O behind interfaces: channel.py (requests to
replicas, edges, coordinators; death watches). No Ray here."""
