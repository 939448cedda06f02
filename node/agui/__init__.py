"""AG-UI, in one package (docs/protocols/agui.md), one module per job:

- `run.py`: the `POST /agui/{agent}` endpoint (RunAgentInput in, an SSE run out);
- `runs.py`: what a run does (a task, approvals resumed, the agent's output followed);
- `input.py`: the client's RunAgentInput, decoded and bounded;
- `events.py`: the events of one run, built in AG-UI's shapes;
- `stream.py`: the journal's run events made into a well-nested AG-UI sequence per agent, for
  `GET /api/v1/agui/events`;
- `clock.py`: AG-UI's timestamps.
"""
