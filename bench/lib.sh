# Shared by the bench/gpu_*.sh scripts, which source it (`. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`):
# unpacking the cudal1 binaries carried compressed (`xz -3 -c target/release/cudal1 >
# .carry/cudal1-new.xz`), starting and stopping a local server, and checkpointing a store. It only
# defines functions; sourcing it runs nothing.

# unpack XZ DEST: the binary compressed in XZ, decompressed to DEST and made executable; fails
# when either step does.
unpack() {
  xz -dc "$1" > "$2" && chmod +x "$2"
}

# unpack_missing XZ DEST: as unpack, unless DEST is an executable already (unpacked by an earlier
# call on the same machine).
unpack_missing() {
  [ -x "$2" ] || unpack "$1" "$2"
}

# unpack_carried DIR: every .carry/cudal1-*.xz (this tree's build as cudal1-new.xz, the build
# before as cudal1-prev.xz, ...) unpacked into DIR under its name less `.xz`.
unpack_carried() {
  local x
  for x in .carry/cudal1-*.xz; do
    unpack "$x" "$1/$(basename "$x" .xz)"
  done
}

# port: a free TCP port on 127.0.0.1.
port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_up URL PID: waits (150 s at most) until URL/health answers; fails at once when PID exits.
wait_up() {
  for _ in $(seq 300); do
    python3 - "$1" <<'PY' && return 0
import sys, urllib.request
try: urllib.request.urlopen(sys.argv[1] + "/health", timeout=2); sys.exit(0)
except OSError: sys.exit(1)
PY
    kill -0 "$2" 2>/dev/null || { echo "error: the server exited; see its log"; return 1; }
    sleep 0.5
  done
  return 1
}

# stop PID: SIGINT (a server finishes what it must and exits), then SIGKILL after 30 s.
stop() {
  kill -INT "$1" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done
  echo "still running 30 s after SIGINT: killed"
  kill -9 "$1" 2>/dev/null
}

# checkpoint DB: the SQLite store's write-ahead log folded into DB, so that the file alone is whole.
checkpoint() {
  python3 -c "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('pragma wal_checkpoint(truncate)')" "$1"
}
