# Makes a random token at start and sends it, one line, to every client on port 7100.
use strict;
use warnings;
use IO::Socket::INET;

my $token = join '', map { sprintf '%02x', int rand 256 } 1 .. 16;
my $listen = IO::Socket::INET->new(LocalPort => 7100, Listen => 8, ReuseAddr => 1)
  or die "cannot listen: $!";
open(my $flag, '>', '/tmp/vault-ready') or die "cannot flag: $!";
close $flag;
while (my $peer = $listen->accept) {
    print $peer "$token\n";
    close $peer;
}
