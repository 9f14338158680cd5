#!/usr/bin/env bash
# Build the function's runtime image without a container engine, reproducibly:
#
#   SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) hack/image/build-image.sh CHECKOUT OUT.tar
#
# 1. the function wheel, from CHECKOUT's pyproject.toml, README.md and function/ (what .dockerignore
#    keeps), built by hatchling in a throwaway host venv pinned by requirements-build.txt;
# 2. the runtime wheels: the exact files (URL and sha256) of requirements-runtime.txt, for CPython
#    3.13 manylinux x86_64 (hack/image/lock.sh regenerates both requirement files);
# 3. a distroless-like Debian trixie root from `mmdebstrap --variant=extract` (unpacked packages, no
#    maintainer scripts, no shell), with a dpkg status file, users root/nobody/nonroot (65532) and
#    without the build host's resolv.conf/hostname, apt state, docs and /dev nodes;
# 4. /venv/fn made by the image's own python3 in a chroot, the function installed into it offline
#    (pip runs from its wheel and is not left behind), owned by nonroot like the Dockerfile's COPY;
# 5. mkimage.py packs it: two layers (Debian, /venv), one tarball that is both a `docker save`
#    archive and an OCI layout; entrypoint, user, port and PATH as in the Dockerfile. Build-time
#    files of the Debian layer are dated by the newest .deb rather than SOURCE_DATE_EPOCH, so that
#    layer only changes with Debian (and registries and nodes keep it across releases).
#
# Needs root (mmdebstrap's root mode and chroot), mmdebstrap, python3 (3.11+, with venv), go (the
# workload CRDs, hack/crds/fetch.sh), network access to the Debian mirror, PyPI and the Go module
# proxy. amd64 only. The same inputs give the same bytes; what moves the digest: the source,
# SOURCE_DATE_EPOCH, a pin in hack/image/ or hack/crds/, the Debian mirror (a trixie point or
# security release), and for the compressed digests only, the host's zlib.
#
# Environment: SOURCE_DATE_EPOCH (default: the checkout's last commit time), PYTHON (python3),
# WORK (a scratch folder, default a new temporary one, removed afterwards unless KEEP_WORK=1),
# DEBIAN_MIRROR (http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR
# (http://deb.debian.org/debian-security), IMAGE_TAG (function-inference-cluster:v<__version__>),
# DEBS_OUT (a folder to keep the .debs the Debian root was made of), DEBIAN_DEBS (a folder of .debs,
# a DEBS_OUT of an earlier build: the root is made of exactly these instead of what the mirror serves
# today, so that build is reproduced even after a Debian point or security release, or while
# deb.debian.org's mirrors are out of step with one another).
set -euo pipefail

usage() { echo "usage: $0 CHECKOUT OUT.tar" >&2; exit 2; }
[ $# -eq 2 ] || usage
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$1" && pwd)"
out="$(realpath -m "$2")"
python="${PYTHON:-python3}"
suite=trixie
py_version=3.13
packages=base-files,python3,libstdc++6,netbase,tzdata  # libstdc++6: grpcio's native module
debian_mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
# The release version: function/__version__.py, the one source of the function's, the image's and
# both packages' versions.
version="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$src/function/__version__.py")"
[ -n "$version" ] || die "no __version__ in $src/function/__version__.py"
tag="${IMAGE_TAG:-function-inference-cluster:v$version}"
uid=65532

die() { echo "build-image: $*" >&2; exit 1; }
step() { printf 'build-image: %-34s %5ss\n' "$1" "$SECONDS" >&2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap root mode, chroot)"
command -v mmdebstrap >/dev/null \
  || die "mmdebstrap is not installed (apt-get install --no-install-recommends mmdebstrap)"
for tool in dpkg-deb chroot "$python"; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed"
done
[ "$(dpkg --print-architecture)" = amd64 ] || die "only amd64 hosts are supported"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH="$(git -C "$src" log -1 --format=%ct)" || die "set SOURCE_DATE_EPOCH"
fi
export SOURCE_DATE_EPOCH
export PYTHONHASHSEED=0 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

if [ -n "${WORK:-}" ]; then
  work="$(realpath -m "$WORK")"
  [ ! -e "$work" ] || [ -z "$(ls -A "$work")" ] || die "WORK=$work is not empty"
  mkdir -p "$work"
else
  work="$(mktemp -d /tmp/build-image.XXXXXX)"
fi
mmpid=""
cleanup() {
  if [ -n "$mmpid" ]; then kill "$mmpid" 2>/dev/null || true; wait "$mmpid" || true; fi
  [ "${KEEP_WORK:-}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
root="$work/rootfs"
SECONDS=0

# DEBIAN_DEBS: a flat repository of the given .debs, which apt copies into the root's cache
# (copy://) like it downloads from a mirror; its index is the packages' own control fields
# (apt's sources.list(5): the copy method, trusted=yes for a repository without a signed Release;
# run here with mmdebstrap 1.3.5 and trixie's apt, a package with an epoch included).
sources=("deb $debian_mirror $suite main" "deb $debian_mirror $suite-updates main"
  "deb $security_mirror $suite-security main")
if [ -n "${DEBIAN_DEBS:-}" ]; then
  repo="$work/debian-debs"
  mkdir -p "$repo"
  cp "$DEBIAN_DEBS"/*.deb "$repo/" || die "no .debs in DEBIAN_DEBS=$DEBIAN_DEBS"
  for deb in "$repo"/*.deb; do
    dpkg-deb -f "$deb"
    printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$(basename "$deb")" \
      "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
  done >"$repo/Packages"
  sources=("deb [trusted=yes] copy://$repo ./")
fi

# 3 (started first, it is mostly download): the Debian root. mmdebstrap is retried once, since a
# mirror sync can briefly leave indexes and packages out of step.
debian() {
  local attempt pid
  for attempt in 1 2; do
    rm -rf "$root"
    mmdebstrap -q --variant=extract --skip=cleanup/apt/cache --include="$packages" \
      "$suite" "$root" "${sources[@]}" &
    pid=$!
    trap 'kill "$pid" 2>/dev/null; wait "$pid"; exit 1' TERM  # when the build stops early
    if wait "$pid"; then return 0; fi
    echo "build-image: mmdebstrap attempt $attempt failed" >&2
  done
  return 1
}
debian >"$work/mmdebstrap.log" 2>&1 &
mmpid=$!

# 1: the wheel.
mkdir -p "$work/src" "$work/wheels"
# The workload CRDs from the checkout's own pinned Go module (go is needed), never a stale local
# copy; a checkout from before hack/crds (v0.1.0) carries them in git.
fetch="$src/hack/crds/fetch.sh"
[ -x "$fetch" ] && skip=(--exclude=function/serving/crds) || skip=()
tar -C "$src" --exclude=__pycache__ --exclude='*.pyc' "${skip[@]}" \
  -cf - pyproject.toml README.md function | tar -C "$work/src" -xf -
if [ -x "$fetch" ]; then
  "$fetch" "$work/src/function/serving/crds"
fi
[ -f "$work/src/function/serving/crds/inference.networking.k8s.io_inferencepools.yaml" ] \
  || die "no workload CRDs for the wheel (hack/crds/fetch.sh)"
# The pinned pip and hatchling go into a venv without the host Python's bundled pip when the host's
# pip can install into another interpreter (pip 22.3+, --python): much faster than ensurepip.
build_reqs=(install -q --no-compile --no-deps --require-hashes -r "$here/requirements-build.txt")
"$python" -m venv --without-pip "$work/buildenv"
if "$python" -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))' \
    2>/dev/null; then
  "$python" -m pip --python "$work/buildenv/bin/python" "${build_reqs[@]}"
else
  "$work/buildenv/bin/python" -m ensurepip -q
  "$work/buildenv/bin/python" -m pip "${build_reqs[@]}"
fi
"$work/buildenv/bin/python" -m pip wheel -q --no-deps --no-build-isolation --no-index \
  -w "$work/wheels" "$work/src"
step "wheel"

# 2: the runtime wheels, for the image's Python rather than the host's.
"$work/buildenv/bin/python" -m pip download -q --no-deps --require-hashes --only-binary=:all: \
  --python-version "$py_version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -r "$here/requirements-runtime.txt" -d "$work/wheels"
step "runtime wheels"

wait "$mmpid" || { cat "$work/mmdebstrap.log" >&2; mmpid=""; die "mmdebstrap failed"; }
mmpid=""
[ -x "$root/usr/bin/python$py_version" ] \
  || die "the $suite root has no python$py_version; regenerate the pins (hack/image/lock.sh)"
step "debian root (mmdebstrap)"

# dpkg status from the unpacked .debs (extract runs no dpkg), so scanners see the versions.
for deb in "$root"/var/cache/apt/archives/*.deb; do
  dpkg-deb -f "$deb" | sed '/^Package:/a Status: install ok installed'
  echo
done >"$work/status"
# One stanza per package, in byte order of the names.
"$python" - "$work/status" "$root/var/lib/dpkg/status" <<'PY'
import sys

stanzas = [s for s in open(sys.argv[1]).read().split("\n\n") if s.strip()]
stanzas.sort(key=lambda s: s.split("\n", 1)[0])
open(sys.argv[2], "w").write("\n\n".join(stanzas) + "\n")
PY
# The newest member time of the .debs' ar archives (their build time, or their SOURCE_DATE_EPOCH),
# so no later than any file in them: the base layer's clamp, which then moves with Debian and not
# with every commit of ours.
debian_epoch="$("$python" - "$root"/var/cache/apt/archives/*.deb <<'PY'
import sys

newest = 0
for deb in sys.argv[1:]:
    with open(deb, "rb") as f:
        assert f.read(8) == b"!<arch>\n", deb
        while header := f.read(60):
            newest = max(newest, int(header[16:28]))
            size = int(header[48:58])
            f.seek(size + size % 2, 1)
print(newest)
PY
)"
if [ -n "${DEBS_OUT:-}" ]; then
  mkdir -p "$DEBS_OUT"
  cp "$root"/var/cache/apt/archives/*.deb "$DEBS_OUT/"
fi
# The build host's files that mmdebstrap copies in (extract skips the hooks that would remove them),
# apt's state, and what a runtime image does not read.
rm -rf "$root"/etc/resolv.conf "$root"/etc/hostname "$root"/etc/apt "$root"/var/lib/apt \
  "$root"/var/cache/apt "$root"/var/log/apt "$root"/usr/share/man "$root"/usr/share/info \
  "$root"/usr/share/locale "$root"/usr/share/lintian
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete

# Users as distroless numbers them.
cat >"$root/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:$uid:$uid:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$root/etc/group" <<EOF
root:x:0:
nobody:x:65534:
nonroot:x:$uid:
EOF
chmod 0644 "$root/etc/passwd" "$root/etc/group"
install -d -m 0700 -o "$uid" -g "$uid" "$root/home/nonroot"
chmod 1777 "$root/tmp"
step "debian fixups"

# 4: the venv, by the image's own Python, offline. No bytecode for the interpreter's own runs (the
# stdlib would get timestamped .pyc files); pip compiles the installed packages with checked hashes
# under SOURCE_DATE_EPOCH.
mkdir -p "$root/tmp/wheels"
cp "$work"/wheels/*.whl "$root/tmp/wheels/"
pip_wheel="$(cd "$root/tmp/wheels" && ls pip-*.whl)"
in_root() {
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
    PYTHONHASHSEED=0 SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 chroot "$root" "$@"
}
in_root /usr/bin/python3 -m venv --without-pip /venv/fn
in_root /venv/fn/bin/python "/tmp/wheels/$pip_wheel/pip" install -q --no-index --no-cache-dir \
  --find-links /tmp/wheels function-inference-cluster
rm -rf "$root"/tmp/wheels "$root"/root/.cache
chown -R "$uid:$uid" "$root/venv/fn"
# No device nodes in the image (the runtime mounts /dev); nothing left in /tmp.
find "$root/dev" "$root/tmp" "$root/run" -mindepth 1 -delete
step "venv"

# 5: pack.
mkdir -p "$(dirname "$out")"
"$python" "$here/mkimage.py" "$root" "$out" --layer venv \
  --entrypoint /venv/fn/bin/function --user "$uid:$uid" --port 9443 --tag "$tag" \
  --base-epoch "$debian_epoch" \
  --label org.opencontainers.image.source=https://github.com/modelplane/function-inference-cluster \
  --label "org.opencontainers.image.version=$version" >"$work/image.json"
step "pack"
cat "$work/image.json"
