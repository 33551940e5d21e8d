#!/usr/bin/env bash
# Makes silk's Debian package and release archive from one binary:
#
#   packaging/package.sh [--binary PATH] [--out DIR]
#
# Without --binary it builds `cargo build --release --locked -p silk`. The binary is stripped
# and its debug info split off into silk-VERSION-ARCH.debug (linked by .gnu_debuglink, for
# gdb and backtraces). Out (default target/package):
#   silk_VERSION_ARCH.deb          /usr/bin/silk, the systemd units silk-hub and silk-agent
#                                  (reading /etc/silk/{hub,agent}.toml), the `silk` system user
#                                  and /var/lib/silk (postinst), completions, man pages, docs
#   silk-VERSION-ARCH-linux.tar.gz the same files for a hand install (see its README.md)
#   silk-VERSION-ARCH.debug        the debug info
# Needs dpkg-deb, objcopy and strip (Debian's dpkg-dev/binutils).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/target/package"
binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument \`$1\` (see --help)" >&2; exit 2 ;;
  esac
done
for tool in dpkg-deb objcopy strip gzip tar; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool is missing (apt-get install dpkg-dev binutils)" >&2; exit 2; }
done
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n1)"
arch="$(dpkg --print-architecture)"
if [ -z "$binary" ]; then
  (cd "$root" && cargo build --release --locked -p silk)
  binary="$root/target/release/silk"
fi
[ -x "$binary" ] || { echo "package.sh: no binary at $binary" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The binary: stripped, its debug info beside it.
debug="silk-$version-$arch.debug"
cp "$binary" "$work/silk"
objcopy --only-keep-debug "$work/silk" "$out/$debug"
strip --strip-all "$work/silk"
(cd "$out" && objcopy --add-gnu-debuglink="$debug" "$work/silk")
chmod 0755 "$work/silk"

# Completions and man pages, made by the binary itself.
mkdir -p "$work/completions" "$work/man"
"$work/silk" completions bash > "$work/completions/silk.bash"
"$work/silk" completions zsh > "$work/completions/_silk"
"$work/silk" completions fish > "$work/completions/silk.fish"
"$work/silk" man --out "$work/man" >/dev/null
gzip -9n "$work"/man/*.1

# The Debian package.
deb="$work/deb"
install -D -m0755 "$work/silk" "$deb/usr/bin/silk"
install -D -m0644 "$root/packaging/silk-hub.service" "$deb/usr/lib/systemd/system/silk-hub.service"
install -D -m0644 "$root/packaging/silk-agent.service" "$deb/usr/lib/systemd/system/silk-agent.service"
install -D -m0640 "$root/packaging/hub.toml" "$deb/etc/silk/hub.toml"
install -D -m0640 "$root/packaging/agent.toml" "$deb/etc/silk/agent.toml"
install -D -m0644 "$work/completions/silk.bash" "$deb/usr/share/bash-completion/completions/silk"
install -D -m0644 "$work/completions/_silk" "$deb/usr/share/zsh/vendor-completions/_silk"
install -D -m0644 "$work/completions/silk.fish" "$deb/usr/share/fish/vendor_completions.d/silk.fish"
install -d "$deb/usr/share/man/man1"
install -m0644 "$work"/man/*.1.gz "$deb/usr/share/man/man1/"
install -D -m0644 "$root/README.md" "$deb/usr/share/doc/silk/README.md"
install -D -m0644 "$root/docs/configuration.md" "$deb/usr/share/doc/silk/configuration.md"
cat > "$deb/usr/share/doc/silk/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: silk
Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
install -d "$deb/DEBIAN"
install -m0755 "$root/packaging/debian/postinst" "$root/packaging/debian/prerm" \
  "$root/packaging/debian/postrm" "$deb/DEBIAN/"
printf '/etc/silk/hub.toml\n/etc/silk/agent.toml\n' > "$deb/DEBIAN/conffiles"
size_kb="$(du -sk --exclude=DEBIAN "$deb" | cut -f1)"
cat > "$deb/DEBIAN/control" <<CONTROL
Package: silk
Version: $version
Architecture: $arch
Maintainer: Silk developers <silk@example.invalid>
Installed-Size: $size_kb
Depends: libc6, libgcc-s1, adduser
Recommends: nats-server
Suggests: postgresql, redis-server, podman, runc
Section: net
Priority: optional
Homepage: https://example.invalid/silk
Description: distributed web-crawling platform
 One binary for the whole crawl platform: declarative spiders, a crash-safe
 frontier, a download center of agents over NATS JetStream, jobs, cron, runs,
 logs and items behind an HTTP API and web UI, and teams' own crawlers
 (projects from git, Scrapy through the SDK).
 .
 This package installs the services silk-hub and silk-agent (configured in
 /etc/silk), the system user silk and its data directory /var/lib/silk.
CONTROL
dpkg-deb --root-owner-group -Zxz --build "$deb" "$out/silk_${version}_${arch}.deb" >/dev/null

# The release archive.
name="silk-$version-$arch-linux"
tree="$work/$name"
install -D -m0755 "$work/silk" "$tree/silk"
install -D -m0644 "$root/packaging/silk-hub.service" "$root/packaging/silk-agent.service" -t "$tree/systemd"
install -D -m0644 "$root/packaging/hub.toml" "$root/packaging/agent.toml" -t "$tree/etc"
install -D -m0644 "$work"/completions/* -t "$tree/completions"
install -D -m0644 "$work"/man/*.1.gz -t "$tree/man"
install -m0644 "$root/README.md" "$root/docs/configuration.md" "$tree/"
cat > "$tree/INSTALL.md" <<INSTALL
# Installing silk $version from this archive

    install -m0755 silk /usr/local/bin/silk
    adduser --system --group --home /var/lib/silk silk
    install -d -o silk -g silk -m0750 /var/lib/silk /var/lib/silk/hub /var/lib/silk/agent
    install -D -m0640 -g silk etc/hub.toml /etc/silk/hub.toml
    install -D -m0640 -g silk etc/agent.toml /etc/silk/agent.toml
    sed 's,/usr/bin/silk,/usr/local/bin/silk,' systemd/silk-hub.service > /etc/systemd/system/silk-hub.service
    sed 's,/usr/bin/silk,/usr/local/bin/silk,' systemd/silk-agent.service > /etc/systemd/system/silk-agent.service
    systemctl daemon-reload && systemctl enable --now silk-hub silk-agent

The debug info of this binary is the separate file $debug of the release.
INSTALL
tar -C "$work" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"

stripped="$(stat -c %s "$work/silk")"
echo "silk $version ($arch): binary $(stat -c %s "$binary") bytes, stripped $stripped bytes"
ls -l "$out/silk_${version}_${arch}.deb" "$out/$name.tar.gz" "$out/$debug" | awk '{print $5, $9}'
