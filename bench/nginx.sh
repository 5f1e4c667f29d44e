#!/usr/bin/env bash
# The loopback upstream of bench/c1.sh and bench/startup.py: the harness's PKI (made once
# under DIR/pki by ../shared/bench/lib/certs.sh, or $BENCH_CERTS) and nginx on
# 127.0.0.1:18443 (TLS, h2 + http/1.1, `return 200 "tiny"`), started unless it runs already.
# Prints the PKI directory.
#
#   bench/nginx.sh DIR
set -euo pipefail
mkdir -p "$1"
d=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
pki=$(bash "${BENCH_CERTS:-$here/../../shared/bench/lib/certs.sh}" "$d/pki" | tail -1)
if [[ ! -s $d/nginx.pid ]] || ! kill -0 "$(cat "$d/nginx.pid")" 2>/dev/null; then
  cat > "$d/nginx.conf" <<NGINX
worker_processes 1; pid $d/nginx.pid; error_log $d/error.log; daemon on;
events { worker_connections 1024; }
http { access_log off;
  server { listen 127.0.0.1:18443 ssl http2; ssl_certificate $pki/upstream.crt;
    ssl_certificate_key $pki/upstream.key; keepalive_requests 100000;
    location / { return 200 "tiny"; } } }
NGINX
  nginx -c "$d/nginx.conf"
fi
echo "$pki"
