"""What a subprocess printed, kept within a bound: its start and its end, the middle cut and said. A script
that prints without end (2.4 GB in 2 s was seen) must not fill the harness's memory, and what classifies a
run (its first error, its last lines, an OUTCOME line) lies at the ends."""

from __future__ import annotations

import collections
import pathlib
import threading

HEAD = 64 * 2**10  # bytes kept from the start
TAIL = 448 * 2**10  # bytes kept from the end


def _cut_marker(cut: int) -> bytes:
    return f"\n[... {cut:,} bytes of output cut ...]\n".encode()


class Drain:
    """Reads a pipe to its end on a thread of its own, keeping HEAD bytes of its start and TAIL of its end."""

    def __init__(self, pipe):
        self.head, self.tail_size, self.cut = bytearray(), 0, 0
        self.tail: collections.deque[bytes] = collections.deque()
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        for chunk in iter(lambda: pipe.read1(1 << 16) if hasattr(pipe, "read1") else pipe.read(1 << 16), b""):
            room = HEAD - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail.append(chunk)
                self.tail_size += len(chunk)
                while self.tail_size - len(self.tail[0]) >= TAIL:
                    self.cut += len(self.tail[0])
                    self.tail_size -= len(self.tail.popleft())
        pipe.close()

    def text(self, wait: float | None = 30) -> str:
        """What was kept, as text (the cut said where it was); waits for the pipe's end up to `wait` s."""
        self.thread.join(wait)
        tail = b"".join(self.tail)
        middle = _cut_marker(self.cut) if self.cut else b""
        return (bytes(self.head) + middle + tail).decode(errors="replace")


def read_file(path: pathlib.Path) -> str:
    """A file's start and end, within the same bound, without reading its middle."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size <= HEAD + TAIL:
                handle.seek(0)
                return handle.read().decode(errors="replace")
            handle.seek(0)
            head = handle.read(HEAD)
            handle.seek(size - TAIL)
            return (head + _cut_marker(size - HEAD - TAIL) + handle.read(TAIL)).decode(errors="replace")
    except FileNotFoundError:
        return ""


def run(argv, timeout: float | None = None, **popen) -> tuple[int | None, str]:
    """Run `argv` to its end (None for its exit status past `timeout`, then it is killed), with its stdout
    and stderr together kept within the bound."""
    import subprocess

    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)
    drain = Drain(process.stdout)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        code = None
    return code, drain.text()
