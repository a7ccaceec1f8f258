"""node/restart_policy.py: when `raykafka start` replaces a dead broker actor."""
from __future__ import annotations

from node.restart_policy import Action, RestartPolicy

EDGE = (1, "edge", 0)
SIBLING = (1, "edge", 1)


def test_a_first_death_is_replaced_at_once():
    policy = RestartPolicy()
    assert policy.died(EDGE, 100.0) == 100.0
    assert policy.pending() == [EDGE]
    assert policy.decide(EDGE, 100.0, node_alive=True, stopping=False).action is Action.REPLACE
    policy.replaced(EDGE)
    assert policy.pending() == []
    assert policy.decide(EDGE, 100.0, node_alive=True, stopping=False).action is Action.LEAVE


def test_repeated_deaths_back_off_exponentially_up_to_the_cap_and_are_forgotten_later():
    policy = RestartPolicy(base_backoff_s=1.0, max_backoff_s=8.0, forget_after_s=60.0)
    delays = []
    now = 0.0
    for _ in range(6):
        due = policy.died(EDGE, now)
        delays.append(due - now)
        policy.replaced(EDGE)
        now += 1.0
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0]
    # A death long after the last ones is a first death again.
    assert policy.died(EDGE, now + 61.0 + 6) == now + 67.0


def test_waiting_until_the_backoff_is_over():
    policy = RestartPolicy(base_backoff_s=2.0)
    policy.died(EDGE, 0.0)
    policy.replaced(EDGE)
    due = policy.died(EDGE, 1.0)  # the replacement died too
    decision = policy.decide(EDGE, 2.0, node_alive=True, stopping=False)
    assert decision.action is Action.WAIT and decision.retry_at == due == 3.0
    assert policy.decide(EDGE, 3.0, node_alive=True, stopping=False).action is Action.REPLACE


def test_a_failed_replacement_counts_as_a_death():
    policy = RestartPolicy(base_backoff_s=1.0)
    policy.died(EDGE, 0.0)
    assert policy.decide(EDGE, 0.0, True, False).action is Action.REPLACE
    assert policy.died(EDGE, 0.5) == 1.5  # the attempt failed: try again after a backoff
    assert policy.decide(EDGE, 1.0, True, False).action is Action.WAIT


def test_nothing_is_replaced_on_a_dead_node_or_while_stopping():
    policy = RestartPolicy()
    policy.died(EDGE, 0.0)
    policy.died(SIBLING, 0.0)
    gone = policy.decide(EDGE, 0.0, node_alive=False, stopping=False)
    assert gone.action is Action.LEAVE and "node" in gone.reason
    stopping = policy.decide(SIBLING, 0.0, node_alive=True, stopping=True)
    assert stopping.action is Action.LEAVE and "stopping" in stopping.reason
    policy.forget(EDGE)
    policy.forget(SIBLING)
    assert policy.pending() == []
    # Forgotten history: the revived node's edge starts with a clean slate.
    assert policy.died(EDGE, 1.0) == 1.0


def test_children_are_independent():
    policy = RestartPolicy(base_backoff_s=1.0)
    policy.died(EDGE, 0.0)
    policy.replaced(EDGE)
    policy.died(EDGE, 0.1)
    assert policy.died(SIBLING, 0.1) == 0.1, "a sibling's first death is not backed off by the primary's"
