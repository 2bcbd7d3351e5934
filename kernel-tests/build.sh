#!/bin/sh
# build.sh OUTDIR: builds, statically, what guest.sh runs: OUTDIR/layerseal,
# OUTDIR/nostatx and one test binary per package with tests in
# OUTDIR/tests/NAME.test (NAME: the package dir with / as -, "root" for the
# module's root package). Needs the go command; run from anywhere.
set -eu
out=$1
cd "$(dirname "$0")/.."
mkdir -p "$out/tests"
export CGO_ENABLED=0
# Without the symbol table and DWARF (stack traces keep their names): a
# third smaller, so the guests unpack less at boot and the hostile tests
# copy less of their own binary.
ld="-s -w"
go build -ldflags="$ld" -o "$out/layerseal" ./cmd/layerseal
go build -ldflags="$ld" -o "$out/nostatx" ./kernel-tests/nostatx
for pkg in . ./overlay ./nsrun ./probe ./internal/linux ./internal/oracle ./cmd/layerseal ./kernel-tests; do
	set -- "$pkg"/*_test.go
	[ -e "$1" ] || continue
	name=$(echo "${pkg#./}" | tr / -)
	[ "$pkg" = . ] && name=root
	go test -c -ldflags="$ld" -o "$out/tests/$name.test" "$pkg"
done
