"""cluster.commit_timer.CommitTimer: append -> HW times, split at the first
follower fetch answer carrying the data (bench.replication --profile)."""
from cluster.commit_timer import CommitTimer


def test_append_to_serve_and_to_commit():
    timer = CommitTimer()
    timer.appended(10, 1.000)
    timer.appended(20, 1.010)
    timer.served(10, 1.002)  # only the first append's data left
    timer.committed(10, 1.005)
    stats = timer.stats()
    assert stats["serve_count"] == 1 and stats["serve_total_ms"] == 2.0
    assert stats["commit_count"] == 1 and stats["commit_total_ms"] == 5.0
    timer.served(25, 1.030)
    timer.committed(25, 1.050)
    stats = timer.stats()
    assert stats["serve_count"] == 2 and stats["serve_max_ms"] == 20.0
    assert stats["commit_count"] == 2 and stats["commit_max_ms"] == 40.0
    # buckets <=1,2,5,10,20,50,...: 5 ms and 40 ms
    assert stats["commit_histogram"][2] == 1 and stats["commit_histogram"][5] == 1


def test_commit_without_answer_drops_unserved_and_reset_clears():
    timer = CommitTimer()
    timer.appended(5, 0.0)
    timer.committed(5, 0.001)  # e.g. the ISR shrank to the leader alone
    timer.served(5, 0.002)
    assert timer.stats()["serve_count"] == 0
    timer.appended(9, 0.0)
    timer.reset_pending()
    timer.served(9, 1.0)
    timer.committed(9, 1.0)
    assert timer.stats()["serve_count"] == 0 and timer.count == 1
