"""A host service of the test's own: a listener on a host address that no sandbox may
reach, answering one line and recording each peer that connected (`hits`)."""

from __future__ import annotations

import asyncio


class HostService:
    def __init__(self, line: bytes = b"host service\n") -> None:
        self.line = line
        self.hits: list[str] = []

    async def greet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits.append(str(writer.get_extra_info("peername")))
        writer.write(self.line)
        await writer.drain()
        writer.close()

    async def listen(self, host: str) -> tuple[asyncio.AbstractServer, int]:
        """Start listening on `host` (port chosen by the kernel): the server and its port."""
        server = await asyncio.start_server(self.greet, host, 0)
        return server, server.sockets[0].getsockname()[1]
