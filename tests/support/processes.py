"""The processes of a running server (supervisor, engine, fronts, their children), from /proc."""

from pathlib import Path


def children(pid: int) -> list[int]:
    """Every live descendant of `pid`, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                found.append(child)
                frontier.append(child)
    return found


def role_pids(server, role: str) -> list[int]:
    """Pids of the server's processes running `python -m service.<role>`."""
    pids = []
    for pid in children(server.process.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"service.{role}".encode() in argv:
            pids.append(pid)
    return pids


def memory_status(pid: int) -> dict[str, int]:
    """The process's memory figures from /proc/PID/status (VmRSS, VmHWM, ...), in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[key] = int(value.split()[0]) * 1024
    return fields
