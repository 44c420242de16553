#!/usr/bin/env bash
# containers-mxnet-image.sh - the root file system of the MXNet test image, an image of
# the kind users run (mxnet/python-style), built from Debian's packages: no host mounts.
#
#   Debian bookworm (mmdebstrap --variant=essential) with python3, python3-venv and the
#   system libraries libmxnet.so links against but the mxnet wheel does not bundle
#   (libgomp1, libquadmath0 for its libgfortran, libstdc++6);
#   /opt/mxnet-venv: a venv of the image's own Python with mxnet==1.9.1 and numpy<1.24,
#   installed by the image's pip from wheels the host's pip downloaded for the image's
#   Python (cp311, manylinux2014), so no pip runs with the host's configuration inside;
#   a user of its own: mxnet (uid 1000, home /home/mxnet), the default user (--changes).
# Nothing here is pulled from a registry: apt uses Debian's default mirror (mmdebstrap's
# default), pip its configured index. Packages are fixed by the suite (bookworm: Python
# 3.11, the newest with numpy<1.24 wheels); containers-up.sh labels the image with a
# hash of --inputs, so changing what the image is made of rebuilds it.
#
# Usage: containers-mxnet-image.sh TAR PYTHON   build the rootfs into TAR (PYTHON: a host
#                                               interpreter with pip, for the download);
#                                               mmdebstrap's output in TAR's dir/mxnet-image.log
#        containers-mxnet-image.sh --changes    the image's configuration, one
#                                               Dockerfile instruction a line (import -c)
#        containers-mxnet-image.sh --inputs     everything the image is made of (to hash)
# Env:   MXBATCH_MXNET_IMAGE_TIMEOUT  seconds for the download and for mmdebstrap (900)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

SUITE=bookworm
PY_VERSION=3.11   # bookworm's python3
VENV=/opt/mxnet-venv
REQUIREMENTS=('mxnet==1.9.1' 'numpy<1.24')
PACKAGES=python3,python3-venv,libgomp1,libquadmath0,libstdc++6
USER_NAME=mxnet USER_ID=1000
TIMEOUT=${MXBATCH_MXNET_IMAGE_TIMEOUT:-900}
CHANGES=("ENV PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    'ENV LANG=C.UTF-8' "USER $USER_NAME" "WORKDIR /home/$USER_NAME" 'CMD ["python3"]')

# in the chroot, with nothing of the caller's environment (PIP_*, PYTHON*, proxies)
IN_CHROOT="chroot \"\$1\" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8"

build() {
    local tar=$1 python=$2 work arch mmlog
    mmlog=$(dirname "$tar")/mxnet-image.log
    arch=$(uname -m)
    command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed"
    work=$(mktemp -d "${tar%/*}/.mxnet-image.XXXXXX")
    # shellcheck disable=SC2064  # $work is expanded now, on purpose
    trap "rm -rf '$work'" EXIT
    log "downloading ${REQUIREMENTS[*]} for cp${PY_VERSION/./} $arch (host pip)"
    timeout -k 10 "$TIMEOUT" "$python" -m pip download --quiet --dest "$work/wheels" \
        --only-binary=:all: --implementation cp --python-version "$PY_VERSION" \
        --platform "manylinux2014_$arch" "${REQUIREMENTS[@]}" \
        || die "pip download ${REQUIREMENTS[*]} failed"
    log "mmdebstrap $SUITE ($PACKAGES), then $VENV (log: $mmlog)"
    if ! timeout -k 10 "$TIMEOUT" mmdebstrap --variant=essential --include="$PACKAGES" \
            --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/info/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            --customize-hook='mkdir -p "$1/tmp/wheels"' \
            --customize-hook="sync-in $work/wheels /tmp/wheels" \
            --customize-hook="$IN_CHROOT python3 -m venv $VENV" \
            --customize-hook="$IN_CHROOT PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
                $VENV/bin/pip install --quiet --no-index --find-links /tmp/wheels \
                $(printf "'%s' " "${REQUIREMENTS[@]}")" \
            --customize-hook='rm -rf "$1/tmp/wheels"' \
            --customize-hook="echo '$USER_NAME:x:$USER_ID:$USER_ID:MXNet:/home/$USER_NAME:/bin/sh' >>\"\$1/etc/passwd\"" \
            --customize-hook="echo '$USER_NAME:x:$USER_ID:' >>\"\$1/etc/group\"" \
            --customize-hook="install -d -m 0755 -o $USER_ID -g $USER_ID \"\$1/home/$USER_NAME\"" \
            "$SUITE" "$work/rootfs.tar" >"$mmlog" 2>&1; then
        tail -n 30 "$mmlog" >&2
        die "mmdebstrap failed"
    fi
    mv -f "$work/rootfs.tar" "$tar"
}

case ${1:-} in
    --changes) printf '%s\n' "${CHANGES[@]}" ;;
    --inputs) declare -p SUITE PY_VERSION VENV REQUIREMENTS PACKAGES USER_NAME USER_ID CHANGES IN_CHROOT
        declare -f build ;;
    -h | --help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" ;;
    *) (($# == 2)) || die "usage: $0 TAR PYTHON | --changes"; build "$1" "$2" ;;
esac
