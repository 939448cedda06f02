"""The placement buckets' attach, tried again with a backoff (issue 52 item 10): a fresh
cluster's first attach may time out while another node creates the streams."""

from node.placement.manager import MAX_ATTACH_PAUSE_SECS, attach_backoff


def test_attach_pauses_double_up_to_a_bound_never_under_a_turn():
    pauses = [attach_backoff(n, 0.5) for n in range(1, 9)]
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert max(attach_backoff(n, 0.5) for n in range(1, 200)) == MAX_ATTACH_PAUSE_SECS
    assert attach_backoff(1, 1.5) == 1.5  # a placement turn at least
