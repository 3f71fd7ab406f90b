#!/bin/sh
# Installs cg-trace from the unpacked release tarball this script sits in: the binary, the
# shell completions and the man pages, under a prefix (default /usr/local). Needs no Rust
# toolchain: only sh, install and sha256sum (coreutils). `cargo xtask dist` builds the
# tarball and puts this script in it.
#
#   sh install.sh [--prefix DIR] [--checksum FILE.tar.gz.sha256]
#
# --checksum: first check the tarball (named in FILE, found next to it) against the SHA-256
# that FILE holds; nothing is installed when it does not match. The files inside the
# tarball are always checked against its SHA256SUMS.
#
# Running cg-trace needs root, or CAP_BPF and CAP_PERFMON: this script prints the setcap line
# that gives them to the installed binary; it does not run it.

set -eu

prefix=/usr/local
checksum=

usage() {
    echo "usage: sh install.sh [--prefix DIR] [--checksum FILE.tar.gz.sha256]" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --checksum) [ $# -ge 2 ] || usage; checksum=$2; shift 2 ;;
        --checksum=*) checksum=${1#--checksum=}; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; usage ;;
    esac
done

case $prefix in
    /*) ;;
    *) echo "install.sh: --prefix $prefix: give an absolute path" >&2; exit 2 ;;
esac

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

if [ -n "$checksum" ]; then
    if [ ! -f "$checksum" ]; then
        echo "install.sh: --checksum $checksum: no such file" >&2
        exit 2
    fi
    # sha256sum -c reads the tarball's name from the file: run it where the file is.
    if ! (cd -- "$(dirname -- "$checksum")" && sha256sum --check --strict --quiet -- "$(basename -- "$checksum")"); then
        echo "install.sh: the tarball does not match $checksum: download it again; nothing was installed" >&2
        exit 1
    fi
    echo "install.sh: checksum verified ($checksum)"
fi

if ! (cd -- "$here" && sha256sum --check --strict --quiet SHA256SUMS); then
    echo "install.sh: the unpacked files do not match their SHA256SUMS: unpack the tarball again; nothing was installed" >&2
    exit 1
fi

# What is installed, each file as SHA256SUMS names it: a file it does not list would go in
# unchecked, so none is installed then.
files="bin/cg-trace share/bash-completion/completions/cg-trace share/zsh/site-functions/_cg-trace share/fish/vendor_completions.d/cg-trace.fish"
for page in "$here"/share/man/man1/*.1; do
    files="$files share/man/man1/${page##*/}"
done
for file in $files; do
    if ! grep -q -x -F -e "$(cd -- "$here" && sha256sum -- "$file")" "$here/SHA256SUMS"; then
        echo "install.sh: $file is not listed in SHA256SUMS: unpack the tarball again; nothing was installed" >&2
        exit 1
    fi
done

# The folders written to under the prefix must not be symbolic links: one planted there
# (a prefix another user can write to) would send root's files wherever it points.
for dir in bin share share/man share/man/man1 share/bash-completion \
    share/bash-completion/completions share/zsh share/zsh/site-functions share/fish \
    share/fish/vendor_completions.d; do
    if [ -L "$prefix/$dir" ]; then
        echo "install.sh: $prefix/$dir is a symbolic link: remove it or choose another --prefix; nothing was installed" >&2
        exit 1
    fi
    for target in "$prefix/$dir"/cg-trace "$prefix/$dir"/_cg-trace "$prefix/$dir"/cg-trace.fish "$prefix/$dir"/cg-trace*.1; do
        if [ -L "$target" ] || { [ -e "$target" ] && [ ! -f "$target" ]; }; then
            echo "install.sh: $target is not a regular file: remove it; nothing was installed" >&2
            exit 1
        fi
    done
done

install -d -m 0755 "$prefix/bin"
install -m 0755 "$here/bin/cg-trace" "$prefix/bin/cg-trace"
install -d -m 0755 "$prefix/share/man/man1"
for page in "$here"/share/man/man1/*.1; do
    install -m 0644 "$page" "$prefix/share/man/man1/"
done
install -D -m 0644 "$here/share/bash-completion/completions/cg-trace" \
    "$prefix/share/bash-completion/completions/cg-trace"
install -D -m 0644 "$here/share/zsh/site-functions/_cg-trace" \
    "$prefix/share/zsh/site-functions/_cg-trace"
install -D -m 0644 "$here/share/fish/vendor_completions.d/cg-trace.fish" \
    "$prefix/share/fish/vendor_completions.d/cg-trace.fish"

echo "installed $prefix/bin/cg-trace"
echo "  man pages:   $prefix/share/man/man1/cg-trace.1 (and cg-trace-SUBCOMMAND.1)"
echo "  completions: $prefix/share/bash-completion/completions/cg-trace (bash),"
echo "               $prefix/share/zsh/site-functions/_cg-trace (zsh),"
echo "               $prefix/share/fish/vendor_completions.d/cg-trace.fish (fish)"
case ":${PATH:-}:" in
    *":$prefix/bin:"*) ;;
    *) echo "note: $prefix/bin is not on your PATH" ;;
esac
echo
echo "cg-trace needs root (sudo cg-trace ...), or these two capabilities; to trace without sudo, run:"
echo "  sudo setcap cap_bpf,cap_perfmon+ep $prefix/bin/cg-trace"
echo "(any user of this machine can then trace any process: see docs/modes-and-options.md, Privileges)"
