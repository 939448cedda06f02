"""The serving process itself: logs, metrics, faults, file modes, checkpoints, the event
loop and the node's version."""
