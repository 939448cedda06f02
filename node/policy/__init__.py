"""Approval policies (issue 47, docs/approvals.md): Cedar policy files that decide routine
approval requests (permit, forbid with a reason, or ask people, possibly several), budgets that
bound what they permit, and the approvers a request needs.

`rules.py` reads the policies' annotations, `schema.py` builds the Cedar schema and context of
each capability's request, `policyset.py` loads and checks the files, `engine.py` evaluates one
request, `approvers.py` counts distinct approvers against a requirement, `budgets.py` parses a
budget and keeps the charges in flight. The gate (node/services/approval_policy.py) applies
a ruling; `agent-node policy test` (node/cli/policy.py) replays a set over the journal.
"""
