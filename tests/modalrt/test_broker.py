"""The dispatching side (modalrt/broker.py) spoken to by a hostile program: what it is sent
is never unpickled there, a malformed request is refused without ending the broker, and
only what it dispatched becomes an event."""

from __future__ import annotations

import os
import pickle
import socket
from pathlib import Path

from crucible.modalrt import wire
from crucible.modalrt.broker import BROKER_FD_VAR, Broker
from crucible.modalrt.context import ENV_VAR, RuntimeConfig


class _Boom:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:  # unpickling it would create the marker
        return (open, (self.marker, "w"))


def test_a_hostile_program_reaches_no_code_and_forges_no_event(tmp_path: Path) -> None:
    prog = tmp_path / "p.py"
    prog.write_text("")
    cfg = RuntimeConfig(program=str(prog), module="p", state_dir=str(tmp_path),
                        run_dir=str(tmp_path))  # fmt: skip
    broker = Broker({**os.environ, ENV_VAR: cfg.model_dump_json()}, str(tmp_path))
    sock = socket.socket(fileno=os.dup(int(broker.env[BROKER_FD_VAR])))
    broker.started()
    r, w = sock.makefile("rb"), sock.makefile("wb")
    marker = tmp_path / "ran"
    blob = pickle.dumps(_Boom(str(marker)))
    hostile = [
        {"op": "send", "wid": 1, "id": 1, "req": "call", "via": "map"},  # no such container
        {"op": "spawn", "wid": 2, "tag": "f", "resources": {"gpu": ["x"], "nope": 1}},
        {"op": "reply", "wid": 1, "id": 1, "ok": True},  # replies are the containers', not ours
        {"op": "input", "function": "f", "via": "map", "ok": True},
    ]
    answers = []
    for frame in hostile:
        wire.send_frame(w, frame, blob)
        answers.append(wire.recv_frame(r)[0])
    assert [a["op"] for a in answers] == ["refused"] * 4
    assert answers[1]["wid"] == 2  # the spawn is answered: its caller does not wait
    sock.close()
    assert broker.finish() == []
    assert not marker.exists()
