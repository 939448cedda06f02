"""A whole nats-server config for a mesh (docs/mesh.md, "Generated permissions"): the server,
JetStream with an fsync before every acknowledgement, an optional cluster, and the users of
`permissions.render`, called here rather than copied, so the config always carries the
permissions of this release.

Passwords: each user's comes from the variable the permissions name (`$NODE_A_PASSWORD`).
nats-server looks a variable up in the same file first, then in its environment; `passwords`
writes the definitions into the file (`agent-node mesh init`, which made them), otherwise the
server's environment must hold them. (A variable defined in another included file is not
seen: nats-server resolves variables per file.)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from node.config.names import ConfigError
from node.sync.nats.permissions import Member, check_members, render

# what a value written inside double quotes here may hold (names, paths, addresses, passwords)
_QUOTABLE = re.compile(r'[^"\\\x00-\x1f\x7f]*')
_SERVER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass
class ServerSettings:
    """One nats-server of the mesh: its name, where it listens for clients, where JetStream
    keeps the streams, and (for a cluster of several) its route listener and every route."""

    name: str = "nats-1"
    listen: str = "127.0.0.1:4222"
    store_dir: str = "/var/lib/nats"
    cluster: str = "agent-mesh"
    cluster_listen: str = ""
    routes: list[str] = field(default_factory=list)

    def check(self) -> None:
        if not _SERVER_NAME.fullmatch(self.name):
            raise ConfigError(f"server name {self.name}: letters, digits, . _ - (up to 64)")
        if not _SERVER_NAME.fullmatch(self.cluster):
            raise ConfigError(f"cluster name {self.cluster}: letters, digits, . _ - (up to 64)")
        host_port(self.listen, "--listen")
        if self.cluster_listen:
            host_port(self.cluster_listen, "--cluster-listen")
        for route in self.routes:
            if urlsplit(route).scheme not in ("nats", "nats-route", "tls") or not quotable(route):
                raise ConfigError(f"--route {route}: not a nats://HOST:PORT route URL")
        if self.routes and not self.cluster_listen:
            raise ConfigError("--route needs --cluster-listen (where this server takes routes)")
        if not self.store_dir or not quotable(self.store_dir):
            raise ConfigError(f"--store-dir {self.store_dir}: not a usable folder path")


def quotable(text: str) -> bool:
    """Whether `text` can be written as is between double quotes of a nats-server config."""
    return _QUOTABLE.fullmatch(text) is not None


def host_port(text: str, option: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets), checked; ConfigError naming `option`."""
    host, sep, port = text.rpartition(":")
    usable = quotable(host) and not any(c.isspace() for c in host)
    if not sep or not host or not usable or not port.isdigit() or not 0 < int(port) < 65536:
        shown = f"{option}{text}" if option.endswith("=") else f"{option} {text}"
        raise ConfigError(f"{shown}: not HOST:PORT")
    return host.strip("[]"), int(port)


def listen_of(url: str) -> str:
    """Where a server reached at `url` (nats://HOST:PORT) listens: that address when it names
    an IP address or localhost, else every interface on its port (a host name may resolve to
    an address this host does not have)."""
    parts = urlsplit(url)
    if parts.scheme not in ("nats", "tls") or not parts.hostname:
        raise ConfigError(f"--nats {url}: not nats://HOST:PORT")
    port = parts.port or 4222
    host = parts.hostname
    if host == "localhost":
        return f"127.0.0.1:{port}"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"0.0.0.0:{port}"
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def render_server(
    mesh: str,
    members: list[Member],
    server: ServerSettings,
    passwords: dict[str, str] | None = None,
) -> str:
    """The nats-server config: `passwords` (user → password) are defined in it when given."""
    server.check()
    check_members(members)
    lines = [
        "# nats-server config of an agent-node mesh, made by `agent-node mesh nats-config` (or",
        '# `mesh init`); `agent-node docs mesh`, "NATS JetStream transport". Start it with',
        "#   nats-server -c THIS_FILE",
        "# and after nodes join or leave, generate it again and `nats-server --signal reload`.",
        "",
        f'server_name: "{server.name}"',
        f'listen: "{server.listen}"',
        "",
        "jetstream {",
        f'  store_dir: "{server.store_dir}"',
        "  # fsync every write before acknowledging it: an acknowledged envelope survives a power",
        '  # loss (docs/mesh.md, "sync_interval")',
        "  sync_interval: always",
        "}",
        "",
    ]
    if server.cluster_listen:
        lines += [
            "cluster {",
            f'  name: "{server.cluster}"',
            f'  listen: "{server.cluster_listen}"',
            "  routes: [",
            *(f'    "{route}"' for route in server.routes),
            "  ]",
            "}",
            "",
        ]
    if passwords:
        lines += [
            "# The nodes' NATS passwords (each node has its own in its credentials folder); this",
            "# file is therefore mode 0600. To keep them out of it, delete these lines and give",
            "# nats-server the variables in its environment (systemd: EnvironmentFile=).",
        ]
        for member in members:
            password = passwords[member.user]
            if not quotable(password):
                raise ConfigError(f"the password of {member.user} cannot be written here")
            lines.append(f'{member.password_variable}: "{password}"')
        lines.append("")
    return "\n".join(lines) + "\n" + render(mesh, members)
