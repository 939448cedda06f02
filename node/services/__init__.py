"""The write side: commands checked against the read models and journaled as events
(approvals, tasks, grants, findings, deployments, the registry, rollouts)."""
