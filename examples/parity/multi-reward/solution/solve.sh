#!/usr/bin/env bash
cat > /app/greet.sh <<'SH'
#!/usr/bin/env bash
echo "hello, $1"
SH
chmod +x /app/greet.sh
