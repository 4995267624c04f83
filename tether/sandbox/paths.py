"""Path confinement for the in-process file tools.

``Workspace.resolve`` turns a model-supplied path into a real path inside the
work dir: relative paths are taken from the work dir, absolute ones must lie in
it (``/workspace/...``, the sandbox's name for it, is accepted too), symlinks
are resolved and the result re-checked, so ``..`` and symlinks cannot leave it.

The ``open_*`` helpers then walk the resolved path one component at a time with
``O_NOFOLLOW`` relative to a directory fd, so a symlink swapped in after the
check (by a concurrently running ``bash`` call) makes the open fail instead of
escaping. Only regular files are opened; FIFOs and devices are refused.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from tether.errors import ToolError
from tether.sandbox.config import WORKSPACE

__all__ = ["Workspace"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Workspace:
    """The work dir as seen by the file tools."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise ToolError(f"work dir {str(self.root)!r} is not a directory")

    def resolve(self, user_path: str) -> Path:
        """The real absolute path for ``user_path``; ``ToolError`` if it is outside the work dir."""
        if not isinstance(user_path, str) or not user_path.strip():
            raise ToolError("path must be a non-empty string")
        if "\0" in user_path:
            raise ToolError("path must not contain NUL bytes")
        raw = PurePosixPath(user_path)
        if raw.is_absolute():
            if raw == PurePosixPath(WORKSPACE) or raw.is_relative_to(WORKSPACE):
                raw = raw.relative_to(WORKSPACE)
            elif not Path(raw).is_relative_to(self.root):
                raise ToolError(f"path {user_path!r} is outside the work dir; use a path relative to it")
        try:
            resolved = (self.root / raw).resolve(strict=False)
        except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop
            raise ToolError(f"cannot resolve path {user_path!r}: {exc}") from exc
        if not resolved.is_relative_to(self.root):
            raise ToolError(f"path {user_path!r} resolves outside the work dir")
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` as shown to the model: relative to the work dir (``.`` for the root)."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def _parts(self, path: Path) -> tuple[str, ...]:
        if not path.is_relative_to(self.root):
            raise ToolError("path is outside the work dir")
        return path.relative_to(self.root).parts

    @contextlib.contextmanager
    def _walk(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A directory fd for ``root/parts``, reached without following any symlink."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise ToolError(f"cannot open directory {part!r}: {exc.strerror or exc}") from exc
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def open_dir(self, path: Path) -> Iterator[int]:
        """A directory fd for the resolved ``path`` (for ``os.scandir``)."""
        with self._walk(self._parts(path)) as fd:
            yield fd

    def read_bytes(self, path: Path, *, max_bytes: int) -> tuple[bytes, int]:
        """Up to ``max_bytes`` of the regular file at ``path`` and its full size."""
        parts = self._parts(path)
        if not parts:
            raise ToolError("the work dir itself is a directory, not a file")
        with self._walk(parts[:-1]) as dfd:
            try:
                fd = os.open(
                    parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd
                )
            except FileNotFoundError as exc:
                raise ToolError(f"file not found: {self.relative(path)}") from exc
            except OSError as exc:
                raise ToolError(f"cannot open {self.relative(path)}: {exc.strerror or exc}") from exc
            try:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    raise ToolError(f"{self.relative(path)} is a directory; use list_dir")
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(f"{self.relative(path)} is not a regular file")
                os.set_blocking(fd, True)
                chunks: list[bytes] = []
                remaining = max_bytes
                while remaining > 0:
                    chunk = os.read(fd, min(remaining, 1 << 20))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    remaining -= len(chunk)
                return b"".join(chunks), info.st_size
            finally:
                os.close(fd)

    def write_bytes(self, path: Path, data: bytes, *, max_bytes: int) -> bool:
        """Atomically replace (or create) the file at ``path``; returns True if it was created.

        Missing parent directories are created, each inside the work dir. The new
        content goes to a temporary file in the same directory, renamed over the
        target, so readers never see half a file; an existing file keeps its mode.
        """
        if len(data) > max_bytes:
            raise ToolError(f"refusing to write {len(data)} bytes (limit {max_bytes})")
        parts = self._parts(path)
        if not parts:
            raise ToolError("cannot write to the work dir itself")
        name = parts[-1]
        with self._walk(parts[:-1], create=True) as dfd:
            mode = 0o644
            created = True
            try:
                info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(f"{self.relative(path)} exists and is not a regular file")
                mode, created = stat.S_IMODE(info.st_mode), False
            tmp = f".{name}.tether-{os.getpid()}-{os.urandom(4).hex()}.tmp"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd
            )
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            os.close(fd)
            try:
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise ToolError(f"cannot write {self.relative(path)}: {exc.strerror or exc}") from exc
            return created
