# Run inside a captured network namespace (a jail, or a namespace given to
# capture_network_namespace): TCP to 203.0.113.7:443 (expects "ok" back), TCP to
# the unnamed port 8081 (refused, or answered with "catch"), TCP to [2001:db8::7]:80 when argv[1] is
# "v6", and a UDP datagram to 198.51.100.1:53 whose answer must come from there.
import socket, sys
s = socket.create_connection(("203.0.113.7", 443), timeout=10)
s.sendall(b"hello-airlock")
if s.recv(16) != b"ok":
    sys.exit(2)
s.close()
# With the jail's catch-all port (argv[2] == "catch"), 8081 is answered (by the listener
# airlock would serve); without it, refused by the kernel.
catch = len(sys.argv) > 2 and sys.argv[2] == "catch"
try:
    socket.create_connection(("203.0.113.7", 8081), timeout=10).close()
    if not catch:
        sys.exit(3)
except ConnectionRefusedError:
    if catch:
        sys.exit(3)
if sys.argv[1] == "v6":
    s = socket.create_connection(("2001:db8::7", 80), timeout=10)
    s.sendall(b"six")
    s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(10)
u.sendto(b"dns-query", ("198.51.100.1", 53))
data, source = u.recvfrom(64)
if data != b"dns-answer" or source != ("198.51.100.1", 53):
    sys.exit(4)
