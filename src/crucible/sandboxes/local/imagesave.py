"""An image's layers from the tool that holds it (imagetools.py): their digests, bottom
first, and the image as a `docker save` archive, streamed, for layers.py to unpack.

Buildah: `buildah inspect` (the OCI config's rootfs.diff_ids) and `buildah push
--disable-compression IMAGE docker-archive:/dev/stdout` (each layer a `<diff id>.tar`).
Docker: the engine's inspect (RootFS.Layers) and `get_image` (`docker save`).
Buildah's store also hands over one layer's tar alone (storelayer.py: `direct`), so that an
image whose base is unpacked already costs its own layers only.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator

from crucible.errors import SandboxFailed
from crucible.sandboxes.local.imagetools import Buildah, Docker, ImageTool
from crucible.sandboxes.local.storelayer import Store

PUSH_TIMEOUT_SEC = 60.0  # for buildah to exit once its archive is read


async def layer_ids(tool: ImageTool, image_id: str) -> list[str] | None:
    """The image's layer digests, bottom first; None when the tool gives none."""
    if isinstance(tool, Buildah):
        proc = await asyncio.create_subprocess_exec(
            tool.path, "inspect", "--type", "image", image_id,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxFailed(f"buildah lost image {image_id[:12]}")
        try:
            rootfs = (json.loads(out).get("OCIv1") or {}).get("rootfs") or {}
        except ValueError as exc:
            raise SandboxFailed(f"buildah inspect {image_id[:12]}: unreadable: {exc}") from exc
        return [str(d) for d in rootfs.get("diff_ids") or []] or None
    if isinstance(tool, Docker):
        info = await asyncio.to_thread(tool.api.inspect_image, f"sha256:{image_id}")
        return [str(d) for d in (info.get("RootFS") or {}).get("Layers") or []] or None
    return None


async def direct(tool: ImageTool) -> Callable[[str], Iterator[bytes] | None] | None:
    """Where the tool's store can be read here: a layer's tar by its diff id (None for a
    layer the store lacks); None for a tool without one."""
    if not isinstance(tool, Buildah):
        return None
    store = getattr(tool, "_store", False)
    if store is False:
        store = await _store(tool)
        tool._store = store  # type: ignore[attr-defined]  # asked once per tool
    if store is None:
        return None

    def tar(diff_id: str) -> Iterator[bytes] | None:
        layer = store.layer_for(diff_id)
        return None if layer is None else store.tar(layer)

    return tar


async def _store(tool: Buildah) -> Store | None:
    proc = await asyncio.create_subprocess_exec(
        tool.path, "info",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, _ = await proc.communicate()
    try:
        info = json.loads(out) if proc.returncode == 0 else None
    except ValueError:
        info = None
    return Store.of(info) if isinstance(info, dict) else None


def save(tool: ImageTool, image_id: str) -> Iterator[bytes]:
    """Blocking: the image's archive, streamed; the tool is stopped when it is not read to
    its end."""
    if isinstance(tool, Docker):
        stream = tool.api.get_image(f"sha256:{image_id}")
        try:
            yield from stream
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return
    if not isinstance(tool, Buildah):
        raise SandboxFailed(f"{tool.name} cannot hand over an image's layers")
    # Uncompressed: each layer's blob is then named by its diff id.
    argv = [tool.path, "push", "--disable-compression", "--quiet", image_id]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [*argv, "docker-archive:/dev/stdout"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
            start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            while chunk := proc.stdout.read(1 << 20):
                yield chunk
            rc = proc.wait(timeout=PUSH_TIMEOUT_SEC)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if rc != 0:
            err.seek(0)
            tail = err.read()[-500:].decode(errors="replace")
            raise SandboxFailed(f"buildah push of {image_id[:12]} failed: {tail}")
