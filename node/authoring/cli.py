"""`agent-node agent new|build|test|publish`: write, build, try and publish an agent.

Registered on agent-node's parser by node.cli.main as one `agent` group; every command works on
an agent project folder (default: the current one), see node.authoring.project.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node.authoring import LANGUAGES
from node.cli.node_api import CA_FILE_ENV, TOKEN_ENV, URL_ENV, ClientError, Node
from node.display.humanize import visible, visible_lines

if TYPE_CHECKING:  # a project, the build, the harness load in the commands (CLI start-up time)
    from node.authoring import harness

CACHE_ENV = "AGENT_NODE_COMPILED_CACHE"  # the node's own variable for its compiled cache


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `agent` command group to agent-node's sub-commands."""
    group = sub.add_parser(
        "agent",
        help="write, build, test and publish an agent (a project)",
        epilog="the guide to writing agents (host functions, limits, approvals, faults): "
        "`agent-node docs agents`",
    )
    actions = group.add_subparsers(metavar="ACTION")

    def action(name: str, func: Any, help: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help, description=help)
        p.set_defaults(func=_reporting(func))
        return p

    new = action("new", cmd_new, "make a new agent project: source, WIT world, test, README")
    new.add_argument("name", help="agent name, also its registry package id (lower case)")
    new.add_argument("--lang", choices=sorted(LANGUAGES), default="python")
    new.add_argument(
        "--template",
        choices=("words", "tools"),
        default="words",
        help="words (counts words, gated actions) or tools (a model calling the agent's tools)",
    )
    new.add_argument("--dir", default=".", help="folder to make the project in (default .)")

    built = action("build", cmd_build, "build the project into build/NAME.wasm")
    built.add_argument("dir", nargs="?", default=".", help="the project (default .)")

    test = action("test", cmd_test, "run the agent in the node's runtime with fake grants")
    test.add_argument("dir", nargs="?", default=".", help="the project (default .)")
    test.add_argument("--wasm", help="run this component instead of the project's build")
    test.add_argument("--no-build", action="store_true", help="never build first")
    test.add_argument("--ticks", type=_positive, default=1, help="ticks to run (default 1)")
    # the flags that make the run's harness.Plan have its fields' names as their dest
    test.add_argument(
        "--input",
        dest="task_input",
        metavar="INPUT",
        help="a task's input (JSON), handled after the ticks",
    )
    test.add_argument("--from", dest="task_from", default="operator", help="the task's sender")
    test.add_argument("--tool", help="an MCP tool to call last")
    test.add_argument(
        "--arguments",
        dest="tool_arguments",
        metavar="ARGUMENTS",
        default="{}",
        help="the tool's arguments (JSON)",
    )
    test.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="NAME[=REPLY]",
        help="enable a capability; invoke answers REPLY (JSON, default the node's"
        ' {"status": "recorded"})',
    )
    test.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="NAME=DECISION",
        help="gate a capability behind an approval decided approve, deny or timeout",
    )
    test.add_argument(
        "--grant", action="append", default=[], metavar="DOMAIN", help="grant a secret domain"
    )
    test.add_argument(
        "--secret", action="append", default=[], metavar="DOMAIN.KEY=VALUE", help="a secret"
    )
    test.add_argument(
        "--state", action="append", default=[], metavar="KEY=VALUE", help="initial state"
    )
    test.add_argument("--infer-reply", default="ok", help="what inference answers")
    test.add_argument(
        "--infer-file",
        metavar="PATH",
        help="answers to the inference calls, in order: a JSON list of texts or chat answers "
        '({"message": {"content", "tool_calls"}})',
    )
    test.add_argument(
        "--fuel",
        dest="fuel_per_tick",
        metavar="FUEL",
        type=_positive,
        help="fuel per call (default the node's)",
    )
    test.add_argument(
        "--timeout-ms",
        dest="tick_timeout_ms",
        metavar="TIMEOUT_MS",
        type=_positive,
        default=10_000,
        help="time per call",
    )
    test.add_argument(
        "--memory-mb",
        dest="memory_limit_mb",
        metavar="MEMORY_MB",
        type=_positive,
        help="linear memory limit",
    )
    test.add_argument("--json", action="store_true", help="the report as JSON")

    pub = action("publish", cmd_publish, "upload the built agent to a node's registry")
    pub.add_argument("dir", nargs="?", default=".", help="the project (default .)")
    pub.add_argument("--url", default=os.environ.get(URL_ENV), help=f"node URL (${URL_ENV})")
    pub.add_argument(
        "--token", default=os.environ.get(TOKEN_ENV), help=f"token, scope publish (${TOKEN_ENV})"
    )
    pub.add_argument(
        "--ca-file", help=f"PEM CA certificate(s) an https node's must chain to (${CA_FILE_ENV})"
    )
    pub.add_argument("--version", help="the version to publish (default: agent.toml's)")
    pub.add_argument("--wasm", help="publish this component instead of the project's build")
    pub.add_argument("--json", action="store_true", help="the node's answer as JSON")


class UsageError(Exception):
    """A flag's value is wrong; exit status 2."""


def _reporting(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from node.authoring import build as builder
        from node.authoring.project import ProjectError

        try:
            return int(func(args))
        except ClientError as exc:  # the node's words: one line
            print(f"agent-node: {visible(exc.detail)}", file=sys.stderr)
            return 1
        except (ProjectError, builder.BuildError, TimeoutError) as exc:  # a compiler's lines
            print(f"agent-node: {visible_lines(str(exc))}", file=sys.stderr)
            return 1
        except UsageError as exc:
            print(f"agent-node: {exc}", file=sys.stderr)
            return 2

    return run


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


# ---------------------------------------------------------------------------- new
def cmd_new(args: argparse.Namespace) -> int:
    from node.authoring import project

    made = project.create(args.name, args.lang, Path(args.dir), args.template)
    where = os.path.relpath(made.root)
    if where.startswith(".."):
        where = str(made.root)
    print(f"made {made.language} agent {made.name} in {where}/")
    print(f"  cd {where}")
    print("  agent-node agent build          # -> build/" + made.output.name)
    if args.template == "tools":
        question = json.dumps({"question": "Weather in Paris?"})
        print(f"  agent-node agent test --input '{question}' --infer-file answers.json")
    else:
        print('  agent-node agent test --input \'{"text": "hello world"}\'')
    print("  " + ("npm test" if made.language == "js" else "python -m unittest"))
    print("the guide to writing agents: agent-node docs agents")
    return 0


# ---------------------------------------------------------------------------- build
def cmd_build(args: argparse.Namespace) -> int:
    from node.authoring import build as builder
    from node.authoring import project

    target = project.load(Path(args.dir))
    print(f"building {target.name} ({target.language}) ...", file=sys.stderr)
    built = builder.build(target)
    print(f"built {built.path} ({built.size / 1e6:.1f} MB in {built.seconds:.1f} s)")
    return 0


# ---------------------------------------------------------------------------- test
def cmd_test(args: argparse.Namespace) -> int:
    import logging

    from node.authoring import build as builder
    from node.authoring import harness, project  # harness: wasmtime, only this command needs it
    from node.authoring.project import ProjectError

    logging.getLogger("node.runtime").setLevel(logging.ERROR)  # faults are in the report
    fakes = _fakes(args)
    if args.task_input is not None:
        _check_json("--input", args.task_input, want_object=True)
    _check_json("--arguments", args.tool_arguments, want_object=True)
    if args.wasm:
        component, name = Path(args.wasm), Path(args.wasm).stem
        if not component.is_file():
            raise ProjectError(f"{component} does not exist")
    else:
        target = project.load(Path(args.dir))
        component, name = target.output, target.name
        if not args.no_build and builder.is_stale(target):
            print(f"building {target.name} ({target.language}) ...", file=sys.stderr)
            builder.build(target)
        elif not component.exists():
            raise ProjectError(f"{component} does not exist: run `agent-node agent build`")
    given = vars(args)
    plan = harness.Plan(**{f.name: given[f.name] for f in fields(harness.Plan) if f.name in given})
    report = harness.run(component.resolve(), name, fakes, plan, _compiled_cache())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(human_report(report))
    return 0 if report["ok"] else 1


def _compiled_cache() -> Path:
    """Compiled components survive between runs: a Python agent compiles in seconds, a JS
    one in tens of seconds, and loads from the cache in milliseconds."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "agent-node" / "compiled"


def _fakes(args: argparse.Namespace) -> harness.Fakes:
    from node.authoring import harness

    fakes = harness.Fakes(grants=set(args.grant), infer_reply=args.infer_reply)
    if args.infer_file:
        from node.inference import canned

        try:
            fakes.infer_answers = canned.load(Path(args.infer_file).read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"--infer-file {args.infer_file}: {e}") from None
    for item in args.capability:
        name, has_reply, reply = item.partition("=")
        if has_reply:
            _check_json("--capability " + name, reply, want_object=False)
        fakes.capabilities[name] = reply if has_reply else harness.RECORDED
    for item in args.gate:
        name, _, decision = item.partition("=")
        if decision not in harness.DECISIONS:
            raise UsageError(f"--gate {item}: give NAME=approve, NAME=deny or NAME=timeout")
        fakes.gates[name] = decision
    for item in args.secret:
        where, has_value, value = item.partition("=")
        domain, dot, key = where.partition(".")
        if not (has_value and dot and domain and key):
            raise UsageError(f"--secret {item}: give DOMAIN.KEY=VALUE")
        fakes.secrets[(domain, key)] = value
    for item in args.state:
        key, has_value, value = item.partition("=")
        if not has_value:
            raise UsageError(f"--state {item}: give KEY=VALUE")
        fakes.state[key] = value
    return fakes


def _check_json(flag: str, text: str, want_object: bool) -> None:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: not JSON ({exc})") from None
    if want_object and not isinstance(value, dict):
        raise UsageError(f"{flag}: give a JSON object")


def human_report(report: dict[str, Any]) -> str:
    """The report for a person: each run with what the agent did in it, then the results."""
    loaded = report.get("load_seconds")
    lines = [f"agent {report['agent']}: {report['component']}"]
    if loaded is not None:
        lines[0] += f" (loaded in {loaded:.2f} s)"
    for event in report["events"]:
        lines.append(_event_line(event))
    if report.get("tools") is not None:
        names = ", ".join(t["name"] for t in report["tools"]) or "(none)"
        lines.append(f"tools: {names}")
    if report.get("task") is not None:
        task = report["task"]
        result = task.get("output") if task["status"] == "completed" else task.get("error")
        lines.append(f"task {task['id']}: {task['status']}: {_compact(result)}")
    if report.get("tool") is not None:
        tool = report["tool"]
        lines.append(
            f"tool {tool['name']}: {'ok' if tool['ok'] else 'error'}: {_compact(tool['result'])}"
        )
    if report["state"]:
        lines.append("state: " + ", ".join(f"{k}={v}" for k, v in report["state"].items()))
    if report["fault"]:
        lines.append(f"FAULT ({report['fault']['kind']}): {report['fault']['error']}")
    lines.append("ok" if report["ok"] else "FAILED")
    # each line is what the agent wrote, on one line: its own line breaks and escape
    # sequences are shown, never acted on (it could print a fake "ok" or clear the screen)
    return "\n".join(map(visible, lines))


def _event_line(event: dict[str, Any]) -> str:
    from projections import catalogue as c

    kind = event["type"]
    if kind == "run.started":
        detail = f" {event['detail']}" if event["detail"] else ""
        return f"-- {event['kind']}{detail}"
    if kind == "run.finished":
        outcome = f"error: {event['error']}" if event["error"] else "ok"
        return f"   {event['kind']} {outcome} ({event['duration_ms']} ms, {event['fuel']:,} fuel)"
    if kind == c.Log.type:
        return f"   log {event['level']}: {event['message']}"
    if kind == "output":
        return f"   {event['stream']}: {event['line']}"
    if kind == c.Finding.type:
        return f"   finding {event['severity']}: {event['title']}: {event['detail']}"
    if kind == "invoke":
        outcome = f"error {event['error']}" if "error" in event else _compact(event["result"])
        return f"   invoke {event['capability']} {_compact(event['request'])} -> {outcome}"
    if kind == c.AgentErrored.type:
        return f"   FAULT ({event['kind']}): {event['error']}"
    rest = {k: v for k, v in event.items() if k != "type"}
    return f"   {kind} {_compact(rest)}"


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


# ---------------------------------------------------------------------------- publish
def cmd_publish(args: argparse.Namespace) -> int:
    from node.authoring import project
    from node.authoring.project import ProjectError
    from node.authoring.publish import publish, reference

    if not args.url:
        raise UsageError(f"give the node's --url or set {URL_ENV}")
    if not args.token:
        raise UsageError(f"give --token (a token with scope publish) or set {TOKEN_ENV}")
    target = project.load(Path(args.dir))
    component = Path(args.wasm) if args.wasm else target.output
    if not component.is_file():
        raise ProjectError(f"{component} does not exist: run `agent-node agent build` first")
    version = args.version or target.version
    node = Node(args.url, args.token, timeout=300, ca_file=args.ca_file)
    try:
        result = publish(node, target.name, version, target.description, component)
    finally:
        node.close()
    ref = reference(result["id"], result["version"])
    if args.json:
        print(json.dumps({**result, "reference": ref}, indent=2))
        return 0
    ref = visible(ref)
    print(ref)
    print(
        visible(f"published {result['id']} {result['version']} ({result['checksum']})"),
        file=sys.stderr,
    )
    name = visible(result["id"])
    print(
        f"deploy it: agent-node agents deploy {name} {ref} (an admin token), or run it from "
        f'runtime.toml: component = "{ref}" in an [[agents]] entry',
        file=sys.stderr,
    )
    return 0
