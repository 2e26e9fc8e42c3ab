# A secret made at start, served to whoever connects on port 7000; each visit is logged.
use strict;
use warnings;
use IO::Socket::INET;

my @chars = ('a' .. 'z', 0 .. 9);
my $secret = join '', map { $chars[int rand @chars] } 1 .. 24;
my $server = IO::Socket::INET->new(LocalPort => 7000, Listen => 16, ReuseAddr => 1)
  or die "listen: $!";
open(my $ready, '>', '/tmp/ready') or die "ready: $!";
close $ready;
while (my $client = $server->accept) {
    print $client "$ENV{GREETING} $secret\n";
    close $client;
    open(my $log, '>>', '/tmp/visits.log') or die "log: $!";
    print $log "visit\n";
    close $log;
}
