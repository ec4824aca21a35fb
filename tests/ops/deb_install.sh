#!/usr/bin/env bash
# Builds driftd's .deb with cpack from a build directory, lists it, installs it with apt into
# a clean debian:bookworm-slim container (podman) and runs `systemd-analyze verify` on the
# installed unit there. Prints "deb-file PATH", the package's fields and listing, the version
# its changelog and manual page name, lintian's report between "lintian-begin" and
# "lintian-end" (when lintian is installed), the verify output between "verify-begin" and
# "verify-end", and whether each Documentation= file is there; exits non-zero on any failure.
#   deb_install.sh BUILD_DIR WORK_DIR
set -euo pipefail
build="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work/package" "$work/context"
(cd "$build" && cpack -G DEB -B "$work/package") >&2
deb="$(ls "$work"/package/driftd_*.deb | head -n1)"
echo "deb-file $deb"
dpkg-deb --info "$deb" | sed -n 's/^ *\(Depends\|Package\|Version\|Maintainer\):/deb-\1:/p'
dpkg-deb --contents "$deb" | awk '{print "deb-content " $6}'
# The changelog's latest entry and the manual page's header, which name the version too.
member() { dpkg-deb --fsys-tarfile "$deb" | tar -xO "$1" | gzip -dc; }
echo "deb-changelog: $(member ./usr/share/doc/driftd/changelog.gz | head -n1)"
echo "deb-man: $(member ./usr/share/man/man1/driftd.1.gz | grep '^\.TH')"
# lintian, as Debian's archive checks a package (errors and warnings; informational tags are
# left out).
if command -v lintian >/dev/null; then
  echo lintian-begin
  lintian "$deb" > "$work/lintian.txt" 2>&1 && status=0 || status=$?
  grep -v '^running with root privileges' "$work/lintian.txt" || true
  echo "lintian-exit $status"
  echo lintian-end
fi

bash "$here/../docker/podman_image.sh" base >&2
cache="${DRIFTD_PODMAN_CACHE:-$HOME/.cache/driftd-podman}"
export CONTAINERS_CONF="$cache/containers.conf"
podman=(podman --runtime runc --cgroup-manager=cgroupfs)
cp "$deb" "$work/context/driftd.deb"
cat > "$work/context/Containerfile" <<'CONTAINERFILE'
FROM docker.io/library/debian:bookworm-slim
COPY driftd.deb /tmp/driftd.deb
# apt resolves the package's Depends (the shared libraries dpkg-shlibdeps found).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends /tmp/driftd.deb systemd \
 && driftd version
RUN echo verify-begin; systemd-analyze verify /usr/lib/systemd/system/driftd.service 2>&1; echo "verify-exit $?"; echo verify-end
# The units' Documentation= names files the package installed.
RUN for doc in $(sed -n 's/^Documentation=//p' /usr/lib/systemd/system/driftd*.service); do \
      if [ -f "${doc#file:}" ]; then echo "doc-present $doc"; else echo "doc-missing $doc"; fi; \
    done
CONTAINERFILE
"${podman[@]}" build --pull=never --no-cache --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  -t "localhost/driftd-deb:$$" "$work/context" 2>&1
"${podman[@]}" rmi "localhost/driftd-deb:$$" >/dev/null 2>&1 || true
