"""Who may read the node's files: its own user only, whatever the umask it was started with.

The data dir holds every journal (tasks, approvals, state values), the node key, the compiled
cache (native code the node loads and runs) and the registry's blobs. Outside the shipped
systemd unit (`UMask=0077`) a node started from a shell inherits umask 022, and everything it
wrote was readable by every local user. So every command that opens the data dir first calls
`make_private`: the process umask becomes 077 (whatever it creates from then on, LMDB, wasmtime's
cache, blobs, checkpoints, is 0600/0700) and what an older run left is brought to 0600/0700.

`exposure` says what is wrong with a credential file's mode (docs/security.md): readable or
writable by other users, or writable by its group. Group-readable is allowed: `root:agent-node
0640` is how a service group is usually handed a secret.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from eventstore.keys import KEY_FILE

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
_GROUP_OR_OTHER = 0o077
_REFUSED = 0o007 | 0o020  # any access by other users; writes by the group


def make_private(data_dir: Path) -> list[Path]:
    """Set the process umask to 077, create `data_dir` (0700) if absent and take group and
    other permissions off everything under it but the node key. Returns the paths changed."""
    os.umask(PRIVATE_UMASK)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # a node key others could read may be known to them: its loader refuses it (chmod 600
    # is the operator's call, after thinking about a rotation), so it is not fixed here
    paths = [p for p in _tree(data_dir) if not p.name.startswith(KEY_FILE)]
    changed = [path for path in paths if _restrict(path)]
    if changed:
        log.warning(
            "took group/other permissions off %d path(s) under %s (e.g. %s): they were "
            "readable by other local users",
            len(changed),
            data_dir,
            changed[0],
        )
    return changed


def _tree(root: Path) -> list[Path]:
    """`root` and everything under it, symbolic links not followed."""
    paths = [root]
    for folder, dirs, files in os.walk(root):
        paths += [Path(folder, name) for name in (*dirs, *files)]
    return paths


def _restrict(path: Path) -> bool:
    """Drop group/other bits (files keep their owner bits, folders become 0700)."""
    try:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode) or not mode & _GROUP_OR_OTHER:
            return False
        os.chmod(path, stat.S_IMODE(mode) & ~_GROUP_OR_OTHER)
    except OSError as exc:  # a file of another user, or gone meanwhile: say so, go on
        log.warning("cannot restrict the permissions of %s: %s", path, exc.strerror)
        return False
    return True


def exposure(path: Path) -> str | None:
    """Why the mode of a credential file lets others at it (`is ...`), or None."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None  # unreadable files are reported by whoever reads them
    if not mode & _REFUSED:
        return None
    who = "readable or writable by every local user" if mode & 0o007 else "group-writable"
    return f"is {who} (mode {mode:04o}); chmod 600 it (or 640 for a service group)"
