#!/usr/bin/env bash
# Bundles this machine's PostgreSQL 15 server (initdb, pg_ctl, postgres, their server modules,
# share/postgresql/15 and the shared libraries they load that a base Ubuntu lacks) for a machine
# without PostgreSQL, e.g. the GPU machine of bench/gpu_serve.sh:
#   bash bench/pack_postgres.sh [DEST]      (default .carry/pg; prints the PG_BIN to use)
# The layout mirrors Debian's (lib/postgresql/15/{bin,lib}, share/postgresql/15), so that the
# binaries find their share and module folders relative to themselves. A tar.xz of it is written
# beside it for carrying (the folder itself is larger than the tarball: ICU's data is ~30 MB).
set -euo pipefail
DEST=${1:-.carry/pg}
SRC=${PG_SRC:-/usr/lib/postgresql/15}
SHARE=${PG_SHARE:-/usr/share/postgresql/15}
for b in initdb pg_ctl postgres; do
  [ -x "$SRC/bin/$b" ] || { echo "error: $SRC/bin/$b not found; install PostgreSQL 15 (apt-get install postgresql-15) or set PG_SRC" >&2; exit 2; }
done
rm -rf "$DEST"
mkdir -p "$DEST/lib/postgresql/15/bin" "$DEST/lib/postgresql/15/lib" "$DEST/share/postgresql" "$DEST/libs"
cp -a "$SRC/bin/initdb" "$SRC/bin/pg_ctl" "$SRC/bin/postgres" "$DEST/lib/postgresql/15/bin/"
# Server modules initdb and a plain server load (PL/pgSQL, text search dictionaries, encodings);
# the LLVM JIT is left out (jit is off without it).
for f in "$SRC"/lib/*.so; do
  case "$(basename "$f")" in llvmjit*) ;; *) cp -a "$f" "$DEST/lib/postgresql/15/lib/" ;; esac
done
cp -a "$SHARE" "$DEST/share/postgresql/15"
# Shared libraries, but not those every Ubuntu has (glibc, libgcc, libstdc++, zlib, ...): copies
# of those could clash with the host's own.
BASE='^(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64|libgcc_s|libstdc\+\+|libz|liblzma|libzstd|libsystemd|libcap|libcap-ng|libaudit|libpam|libgcrypt|libgpg-error|libcom_err|libkeyutils|liblz4|libcrypto|libssl|libselinux|libpcre2-8)\.so'
{ for b in "$DEST"/lib/postgresql/15/bin/* "$DEST"/lib/postgresql/15/lib/*.so; do ldd "$b" 2>/dev/null; done; } \
  | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    name=$(basename "$lib")
    if ! [[ $name =~ $BASE ]]; then cp -L "$lib" "$DEST/libs/$name"; fi
  done
cat > "$DEST/env.sh" <<'SH'
# Source this: makes the bundled libraries findable and sets PG_BIN.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$here/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PG_BIN="$here/lib/postgresql/15/bin"
SH
# The binaries load the bundled libraries through RUNPATH-free LD_LIBRARY_PATH; a wrapper per
# binary would break postgres's re-exec of itself, so gpu_serve.sh sources env.sh instead.
tar -C "$(dirname "$DEST")" -cJf "$DEST.tar.xz" "$(basename "$DEST")"
echo "pack_postgres: $(du -sh "$DEST" | cut -f1) in $DEST, $(du -sh "$DEST.tar.xz" | cut -f1) as $DEST.tar.xz; PG_BIN=$DEST/lib/postgresql/15/bin (source $DEST/env.sh)" >&2
