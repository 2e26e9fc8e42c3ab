"""Image mode's own /etc/hosts, /etc/resolv.conf and /etc/hostname (etcfiles.py), on real
image-backed local sandboxes, and the attacks on them.

Docker gives each container writable copies of these three files (an entrypoint that
blocks names in /etc/hosts, as Harbor's dns-blacklisting recipe does, needs it). They must
stay the sandbox's own: nothing written there reaches the host's files, crucible's shared
etc snapshot, or another sandbox, and a link the image plants there is never written
through. Before the fix the first two were read-only binds of the shared snapshot: every
write inside failed, and the entrypoint exited before its service started.
"""

from __future__ import annotations

import os
import secrets
import tarfile
from pathlib import Path

from tests.helpers.wait import await_until
from tests.sandboxes.test_local_images import make_env, provider, rootfs_dir, spec

from crucible.sandboxes.local.provider import LocalProvider, LocalSandbox

__all__ = ["provider", "rootfs_dir"]  # its module's fixtures (the cache autouse) here too

# An image whose /etc/hosts is a link to a host file, and whose entrypoint blocks a name in
# /etc/hosts before its "service" (here: a marker file) starts, as the recipe's does.
ENTRY = (
    "#!/bin/sh\nset -e\nprintf '0.0.0.0 blocked.example\\n' >> /etc/hosts\n"
    'touch /tmp/service-up\nexec "$@"\n'
)


# The links come in a layer (ADD of a tar): a RUN step cannot replace /etc/hosts, which
# the builder mounts there while it runs.
DOCKERFILE = (
    "FROM debian:bookworm-slim\nCOPY entry.sh /entry.sh\nADD links.tar /\n"
    'ENTRYPOINT ["/bin/sh", "/entry.sh"]\n'
)


def plant_links(env: Path, target: Path) -> None:
    """links.tar: etc/hosts and etc/hostname, links to a host file."""
    with tarfile.open(env / "links.tar", "w") as tar:
        for name in ("etc/hosts", "etc/hostname"):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, str(target)
            tar.addfile(info)


HOST_HOSTS = Path("/etc/hosts")


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


async def test_each_image_sandbox_has_its_own_writable_etc_files(
    provider: LocalProvider, tmp_path: Path
) -> None:
    target = Path("/tmp") / f"crucible-etc-target-{secrets.token_hex(6)}"
    target.write_text("host-original\n")
    host_hosts = _bytes(HOST_HOSTS)
    env = make_env(tmp_path, DOCKERFILE)
    (env / "entry.sh").write_text(ENTRY)
    plant_links(env, target)
    snapshot = provider.etc_dir(False) / "hosts"
    before = snapshot.read_bytes()
    try:
        async with (
            await provider.create(spec(env)) as one,
            await provider.create(spec(env)) as two,
        ):
            assert isinstance(one, LocalSandbox) and isinstance(two, LocalSandbox)
            assert one.image is not None  # the attack is real: the image's are links out
            assert os.readlink(one.image.rootfs.stack.find("/etc/hosts") or "") == str(target)

            async def up(sb: LocalSandbox) -> bool:
                return (await sb.exec("test -f /tmp/service-up", timeout=5)).ok

            await await_until(lambda: up(one), "the entrypoint's service in one")
            # The entrypoint wrote /etc/hosts (the link the image planted is hidden, never
            # followed), and the agent can edit all three files.
            r = await one.exec(
                "test -L /etc/hosts && echo LINK; grep -c blocked.example /etc/hosts; "
                "echo '10.9.9.9 planted.example' >> /etc/hosts && echo attacker > /etc/hostname"
                " && echo 'nameserver 10.9.9.9' > /etc/resolv.conf && echo WROTE; "
                "getent hosts localhost >/dev/null && echo RESOLVES",
                timeout=10,
            )
            assert r.stdout.split() == ["1", "WROTE", "RESOLVES"], r
            got = await one.exec("cat /etc/hosts /etc/hostname /etc/resolv.conf", timeout=10)
            assert "planted.example" in got.stdout and "attacker" in got.stdout
            # The second sandbox of the same image sees none of it.
            await await_until(lambda: up(two), "the entrypoint's service in two")
            other = await two.exec("cat /etc/hosts /etc/hostname /etc/resolv.conf", timeout=10)
            assert other.ok and "planted.example" not in other.stdout, other
            assert "attacker" not in other.stdout and "10.9.9.9" not in other.stdout
            assert other.stdout.count("blocked.example") == 1  # its own entrypoint's line
            # crucible's own files are no change of the attempt's.
            assert not {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"} & set(
                await one.changed_system_paths()
            )
        # Nothing reached the host: not its /etc, not the shared snapshot, not the link's target.
        assert _bytes(HOST_HOSTS) == host_hosts
        assert snapshot.read_bytes() == before
        assert target.read_text() == "host-original\n"
    finally:
        target.unlink()
