#!/usr/bin/env bash
# Builds the Debian package of sprayswitch (docs/packaging.md): a release build of the
# sprayswitch-control binaries, then what the package ships besides them, generated from them:
# the man pages and bash/zsh/fish completions (from the clap definitions: `sprayswitch man`,
# `sprayswitch completions`, the same for sprayctl) and /etc/sprayswitch/sprayswitch.toml (the
# embedded default, `sprayswitch show-config`), into target/release/deb-assets/; then cargo-deb
# packages them with control/debian/ (unit, sysusers.d file, maintainer scripts). Prints the
# .deb's path on its last line.
#
# Needs cargo-deb (CARGO_DEB_VERSION below): installed with `cargo install` when missing.
# Environment: CARGO_TARGET_DIR as for cargo; DEB_OUT [target/debian] where the .deb goes.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0

if ! cargo deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; then
  cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi

# The package's own build: this crate alone (as `cargo install --path control` builds it), not
# the workspace's feature union.
cargo build --release --locked -p sprayswitch-control --bins
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target/release"
assets="$bin/deb-assets"
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin/sprayswitch" show-config >"$assets/sprayswitch.toml"
for b in sprayswitch sprayctl; do
  "$bin/$b" man --out "$assets/man" >/dev/null
  for shell in bash zsh fish; do
    "$bin/$b" completions --shell "$shell" --out "$assets/completions" >/dev/null
  done
done
# Compressed as Debian policy asks (cargo-deb compresses man pages only when they are not in
# the target directory); -n: no name or time stamp, the same bytes on every build.
gzip -9n "$assets"/man/*.1

out=${DEB_OUT:-$target/debian}
mkdir -p "$out"
# --strip: the release profile keeps line tables for profiling (debug = 1); the package does not.
if ! said=$(cargo deb --no-build --locked --strip -p sprayswitch-control --output "$out" 2>&1); then
  echo "$said" >&2
  exit 1
fi
echo "$said" | tail -n 1
