# Shared by the bench/gpu_*.sh scripts, which source it (`. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`):
# unpacking the cudal1 binaries carried compressed (`xz -3 -c target/release/cudal1 >
# .carry/cudal1-new.xz`). It only defines functions; sourcing it runs nothing.

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
